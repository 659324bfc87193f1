"""System checks (`manage.py check`) for what a host must give the apps, found before the first
user does: `WORKSPACE_ROOT` (set, and a directory where files can be written, `flock`ed and
renamed atomically), a PostgreSQL default database (memory writes need its advisory and row
locks), the apps the apps depend on, behind a pooler in transaction mode Django's server-side
cursors off; what the user's page needs (warnings); and, with `--deploy`, a real model when
`DEBUG` is off (the scripted demo model would answer users)."""

import contextlib
import fcntl
import os
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from django.apps import apps
from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.shortcuts import resolve_url
from django.urls import NoReverseMatch, Resolver404, resolve

from conversations.conf import setting as conversations_setting
from memory_app.conf import setting

POSTGRESQL_ENGINE = "django.db.backends.postgresql"
LOCALE_MIDDLEWARE = "django.middleware.locale.LocaleMiddleware"
POOL_MODES = ("session", "transaction")


@register()
def host_settings_check(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """The settings a host must set itself, each named with what to do."""
    errors = []
    root = getattr(settings, "WORKSPACE_ROOT", None)
    if not root:
        errors.append(
            Error(
                "WORKSPACE_ROOT is not set.",
                hint="Set it to the directory of the users' workspaces, e.g. "
                'WORKSPACE_ROOT = BASE_DIR / "memory-workspaces" (docs/integration.md).',
                id="memory_app.E001",
            )
        )
    elif problem := workspace_root_problem(Path(root)):
        errors.append(
            Error(
                f"WORKSPACE_ROOT {str(root)!r} is not usable: {problem}.",
                hint="Point it at a directory on a local file system (or one whose locks work "
                "across hosts) that this process may create, write, lock and rename in.",
                id="memory_app.E003",
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
    mode = conversations_setting("DATABASE_POOL_MODE")
    if mode not in POOL_MODES:
        return [
            Error(
                f"DATABASE_POOL_MODE is {mode!r}.",
                hint="Set it to 'session' (PostgreSQL directly, or a pooler in session mode) or "
                "'transaction' (PgBouncer in transaction mode).",
                id="memory_app.E006",
            )
        ]
    default = settings.DATABASES.get("default", {})
    if mode == "transaction" and not default.get("DISABLE_SERVER_SIDE_CURSORS"):
        return [
            Error(
                "DATABASE_POOL_MODE is 'transaction' but Django opens server-side cursors.",
                hint='Set DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True: a cursor '
                "kept between transactions is gone on the pooler's next server connection.",
                id="memory_app.E005",
            )
        ]
    return []


def workspace_root_problem(root: Path) -> str | None:
    """Why `root` cannot hold the workspaces (None when it can): it must be a directory, or
    creatable under its nearest existing parent, where a file can be written, `flock`ed and
    atomically renamed. The probe leaves nothing behind."""
    if root.exists() and not root.is_dir():
        return "it exists and is not a directory"
    probe_in = root
    while not probe_in.exists():
        probe_in = probe_in.parent
    if not probe_in.is_dir():
        return f"{str(probe_in)!r} above it is not a directory"
    try:
        with tempfile.TemporaryDirectory(prefix=".yuxi-check-", dir=probe_in) as scratch:
            first, second = Path(scratch) / "probe", Path(scratch) / "renamed"
            fd = os.open(first, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.write(fd, b"probe")
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)
            os.replace(first, second)
    except OSError as exc:
        where = "it" if probe_in == root else f"{str(probe_in)!r}, where it would be created"
        return f"writing, locking (flock) or renaming a file in {where} failed: {exc.strerror}"
    return None


@register()
def dependency_apps_check(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """The apps the apps need in `INSTALLED_APPS` beyond those their models refer to (without
    `conversations` or `django.contrib.sessions` the models cannot load, and the app config
    says so before any check runs): an error naming each one missing."""
    needed = {
        "ninja": "django-ninja serves the API's Swagger UI from your static files (no CDN)",
    }
    return [
        Error(
            f"{name!r} is not in INSTALLED_APPS.",
            hint=f"Add it: {why} (INSTALLED_APPS += ['ninja', 'conversations', 'memory_app']).",
            id="memory_app.E004",
        )
        for name, why in needed.items()
        if not apps.is_installed(name)
    ]


@register()
def page_needs_check(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """What the user's page needs from the host: warnings, the page works without them."""
    warnings = []
    if LOCALE_MIDDLEWARE not in settings.MIDDLEWARE:
        warnings.append(
            Warning(
                "LocaleMiddleware is not in MIDDLEWARE: the user's page shows one language.",
                hint=f"Add {LOCALE_MIDDLEWARE!r} after SessionMiddleware, and LANGUAGES.",
                id="memory_app.W001",
            )
        )
    if _login_url_resolves():
        return warnings
    warnings.append(
        Warning(
            f"LOGIN_URL {settings.LOGIN_URL!r} names no URL: an anonymous visitor of the user's "
            "page is sent nowhere.",
            hint='Serve a login page, e.g. path("accounts/", include("django.contrib.auth.urls")),'
            " or set LOGIN_URL to yours.",
            id="memory_app.W002",
        )
    )
    return warnings


def _login_url_resolves() -> bool:
    """Whether LOGIN_URL names a URL of this site (or is another site's absolute URL)."""
    try:
        url = resolve_url(settings.LOGIN_URL)
    except NoReverseMatch:
        return False
    if "://" in url:
        return True
    with contextlib.suppress(Resolver404):
        resolve(urlsplit(url).path)
        return True
    return False


@register(Tags.security, deploy=True)
def deploy_model_check(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """`check --deploy`: no OpenAI-compatible model while DEBUG is off means the scripted demo
    model answers real users."""
    if settings.DEBUG or setting("LLM_BASE_URL"):
        return []
    return [
        Warning(
            "No model is configured (LLM_BASE_URL is empty) and DEBUG is off: the scripted "
            "demo model would answer your users.",
            hint="Set LLM_BASE_URL, LLM_API_KEY and LLM_MODEL to your OpenAI-compatible endpoint.",
            id="memory_app.W003",
        )
    ]
