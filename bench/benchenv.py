"""Shared start of the bench scripts: Django on a database of their own, never the site's.

The benches truncate and seed tables, so they run against `BENCH_DATABASE_URL` when it is set,
else a database named after the site's: `DATABASE_URL` (from the environment or `.env`) with
`_bench` appended to its database name (`.../yuxi_memory` → `.../yuxi_memory_bench`), on the
same server; created and migrated here when missing. So benches on a shared PostgreSQL (CI,
several checkouts) follow each one's own database and never collide.
"""

import importlib.util
import os
import secrets
import subprocess
import sys
import tempfile
import types
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import environ

PROJECT_ROOT = Path(__file__).resolve().parent.parent
# The site's own default database (yuxi_site.settings), when DATABASE_URL is not set either.
SITE_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/yuxi_memory"
# What a bench database's name adds to the site's.
BENCH_SUFFIX = "_bench"


def bench_database_url(env: Mapping[str, str]) -> str:
    """The benches' database: `BENCH_DATABASE_URL` if set, else `DATABASE_URL` (or the site's
    default) with `BENCH_SUFFIX` appended to its database name."""
    if env.get("BENCH_DATABASE_URL"):
        return env["BENCH_DATABASE_URL"]
    parts = urlsplit(env.get("DATABASE_URL") or SITE_DATABASE_URL)
    name = parts.path.lstrip("/")
    if not name:
        raise SystemExit("DATABASE_URL names no database: set BENCH_DATABASE_URL")
    return urlunsplit(parts._replace(path=f"/{name}{BENCH_SUFFIX}"))


def setup_django() -> None:
    """Point Django at the bench database, make sure it exists and is migrated, set it up."""
    # `.env` as the settings read it: the environment wins.
    environ.Env.read_env(PROJECT_ROOT / ".env")
    os.environ["DATABASE_URL"] = bench_database_url(os.environ)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "yuxi_site.settings")
    # The settings refuse to start without a strong key; a bench signs nothing that outlives it.
    os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(50))
    sys.path.insert(0, str(PROJECT_ROOT))
    checked = subprocess.run([sys.executable, str(PROJECT_ROOT / "scripts/ensure_database.py")])
    if checked.returncode:
        sys.exit(checked.returncode)

    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


# The history repository: one file until it became a package, then a package of modules.
REPOSITORY = "conversations.repository"


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True
    ).stdout


def repository_at(revision: str) -> types.ModuleType:
    """`conversations.repository` as git `revision` had it, loaded beside the current one:
    the one file `repository.py` of the old layout, or every module of the package (its own
    imports of `conversations.repository.*` load that revision's modules, not today's).

    Call after `setup_django()` (the repository imports the models).
    """
    path = REPOSITORY.replace(".", "/")
    files = _git("ls-tree", "-r", "--name-only", revision, "--", f"{path}.py", path).split()
    if not files:
        raise SystemExit(f"{revision} has no {path}")
    package = f"{path}/__init__.py" in files
    current = {
        name: sys.modules.pop(name)
        for name in list(sys.modules)
        if name == REPOSITORY or name.startswith(f"{REPOSITORY}.")
    }
    try:
        with tempfile.TemporaryDirectory(prefix="repository-") as folder:
            for name in files:
                target = Path(folder, name)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(_git("show", f"{revision}:{name}"), encoding="utf-8")
            spec = importlib.util.spec_from_file_location(
                REPOSITORY,
                Path(folder, path, "__init__.py") if package else Path(folder, f"{path}.py"),
                submodule_search_locations=[str(Path(folder, path))] if package else None,
            )
            module = importlib.util.module_from_spec(spec)
            sys.modules[REPOSITORY] = module
            spec.loader.exec_module(module)
    finally:
        for name in list(sys.modules):
            if name == REPOSITORY or name.startswith(f"{REPOSITORY}."):
                del sys.modules[name]
        sys.modules.update(current)
    return module


def bench_user(*, prefix: str, enabled: bool, memory_bytes: int | None = None):
    """A fresh user with the memory switch set, and a MEMORY.md of `memory_bytes` if given.

    Call after `setup_django()` (the models are imported here for that reason).
    """
    import time

    from django.conf import settings
    from django.contrib.auth import get_user_model

    from memory_app.models import UserConfig

    user = get_user_model().objects.create(username=f"{prefix}-{time.time_ns()}")
    UserConfig.objects.create(user=user, enable_memory=enabled)
    if memory_bytes is not None:
        agents = Path(settings.WORKSPACE_ROOT) / str(user.pk) / "agents"
        agents.mkdir(parents=True)
        (agents / "MEMORY.md").write_bytes(b"m" * memory_bytes)
    return user


def claimed_run_context(user, *, prefix: str, name: str):
    """A claimed top-level chat run of `user` in a thread of its own (`{prefix}-{name}`), with
    an hour's lease so no sweep fails it mid-bench: the context the Chat service hands a tool.

    Call after `setup_django()` (the models are imported here for that reason).
    """
    from datetime import timedelta

    from conversations.models import AgentRun, Conversation
    from conversations.runs import ToolRuntimeContext
    from conversations.utils.db_functions import ClockTimestamp

    conversation = Conversation.objects.create(thread_id=f"{prefix}-{name}", user=user)
    run = AgentRun.objects.create(
        user=user,
        conversation=conversation,
        request_id=f"{prefix}-{name}",
        status=AgentRun.Status.RUNNING,
        worker_id=f"worker-{name}",
        started_at=ClockTimestamp(),
        lease_expires_at=ClockTimestamp() + timedelta(hours=1),
    )
    return ToolRuntimeContext(
        uid=str(user.pk),
        thread_id=conversation.thread_id,
        run_id=str(run.run_id),
        request_id=run.request_id,
        worker_id=run.worker_id,
    )


def logged_in_session(user) -> tuple[str, str]:
    """A logged-in session for `user`, made directly in the database as a login would leave
    it: (session key, CSRF secret to send as both the `csrftoken` cookie and `X-CSRFToken`)."""
    import secrets

    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
    from django.contrib.sessions.backends.db import SessionStore

    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.save()
    # Any 32 letters and digits are a CSRF secret; Django compares cookie and header.
    return session.session_key, secrets.token_hex(16)
