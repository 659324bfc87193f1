"""The settings the conversations app reads, each with its default, so a host sets only what
it changes. Read at call time (`setting(NAME)`), so tests and hosts override them in
`django.conf.settings`; `docs/settings.md` lists every one."""

from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

__all__ = [
    "setting",
    "DEFAULTS",
]

DEFAULTS: Mapping[str, Any] = {
    # How long a worker's claim on an AgentRun lasts before it must renew it.
    "AGENT_RUN_LEASE_SECONDS": 60,
    # A run still pending after this long is never claimed; `fail_expired_runs` fails it.
    "AGENT_RUN_PENDING_TIMEOUT_SECONDS": 300,
    # A memory write waiting for the user's decision this long is declined (a week).
    "MEMORY_APPROVAL_TTL_SECONDS": 604800,
    # Most connections each checkpoint saver of a process opens, on first use.
    "CHECKPOINT_POOL_MAX": 4,
    # The statements every chat turn sends are prepared by PostgreSQL on each connection and
    # planned once; False behind a pooler that loses prepared statements (transaction mode).
    "PREPARED_STATEMENTS": True,
    # "transaction" behind a pooler in transaction mode (PgBouncer): no statement is prepared
    # on any connection of the apps, whatever PREPARED_STATEMENTS says.
    "DATABASE_POOL_MODE": "session",
}


def setting(name: str, defaults: Mapping[str, Any] = DEFAULTS) -> Any:
    """`settings.<name>` where the host set it, else its default from `defaults`; a setting
    without a default must be set (ImproperlyConfigured names it)."""
    if hasattr(settings, name):
        return getattr(settings, name)
    if name in defaults:
        return defaults[name]
    raise ImproperlyConfigured(f"the setting {name} is required: set it in the host's settings")
