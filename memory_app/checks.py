"""System checks (`manage.py check`) for what a host must give the apps: `WORKSPACE_ROOT`, a
PostgreSQL default database (memory writes need its advisory and row locks), and behind a
pooler in transaction mode, Django's server-side cursors off."""

from typing import Any

from django.conf import settings
from django.core.checks import Error, register

from conversations.conf import setting

__all__ = ["host_settings_check"]

POSTGRESQL_ENGINE = "django.db.backends.postgresql"
POOL_MODES = ("session", "transaction")


@register()
def host_settings_check(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """The settings a host must set itself, each named with what to do."""
    errors = []
    if not getattr(settings, "WORKSPACE_ROOT", None):
        errors.append(
            Error(
                "WORKSPACE_ROOT is not set.",
                hint="Set it to the directory of the users' workspaces, e.g. "
                'WORKSPACE_ROOT = BASE_DIR / "memory-workspaces" (docs/integration.md).',
                id="memory_app.E001",
            )
        )
    engine = settings.DATABASES.get("default", {}).get("ENGINE")
    if engine != POSTGRESQL_ENGINE:
        errors.append(
            Error(
                f"The default database is {engine!r}, not PostgreSQL.",
                hint="Memory writes need PostgreSQL's advisory and row locks: set "
                f'DATABASES["default"]["ENGINE"] = "{POSTGRESQL_ENGINE}".',
                id="memory_app.E002",
            )
        )
    errors.extend(_pool_mode_errors())
    return errors


def _pool_mode_errors() -> list[Error]:
    mode = setting("DATABASE_POOL_MODE")
    if mode not in POOL_MODES:
        return [
            Error(
                f"DATABASE_POOL_MODE is {mode!r}.",
                hint="Set it to 'session' (PostgreSQL directly, or a pooler in session mode) or "
                "'transaction' (PgBouncer in transaction mode).",
                id="memory_app.E004",
            )
        ]
    default = settings.DATABASES.get("default", {})
    if mode == "transaction" and not default.get("DISABLE_SERVER_SIDE_CURSORS"):
        return [
            Error(
                "DATABASE_POOL_MODE is 'transaction' but Django opens server-side cursors.",
                hint='Set DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True: a cursor '
                "kept between transactions is gone on the pooler's next server connection.",
                id="memory_app.E003",
            )
        ]
    return []
