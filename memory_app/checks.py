"""System checks (`manage.py check`) for what a host must give the apps: `WORKSPACE_ROOT`, and
a PostgreSQL default database (memory writes need its advisory and row locks)."""

from typing import Any

from django.conf import settings
from django.core.checks import Error, register

__all__ = ["host_settings_check"]

POSTGRESQL_ENGINE = "django.db.backends.postgresql"


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
    return errors
