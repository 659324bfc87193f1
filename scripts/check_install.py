"""Install the apps as a team would, from scratch, and prove they work there.

Builds the `yuxi-memory` wheel from this checkout, installs it into a fresh virtualenv
(dependencies from the package index), makes a host with `django-admin startproject`, applies
exactly the blocks `docs/integration.md` tells a team to add (with this machine's database),
then runs `migrate`, `check`, one remembering turn through `memory_app.runtime.chat` (and one
through `achat`), one approved write in the host's own agent, and the API under the host's
`memory/` prefix. Then a second, realistic host beside it (`tests/team_host`'s parts): an
email-login user model without username, names or is_active in an app listed after the apps,
its own ModelAdmin, its own NinjaAPI at `/api/` under the namespace `api`, and the guide's
bearer-token auth for the memory API; the same guide blocks, then every admin page of the
apps, the user's page under the prefix, the export, a remembering turn, an approved write, a
chat over a bearer token, and the host's own admin class and `api:` names unchanged. Stops at
the first step that fails, naming it, with the step's output.

The hosts' databases are `<DATABASE_URL's name>_install` and `..._install_team`, dropped and
created anew each run. Run by `scripts/check-install` (and so by `.ci/run`).
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

import environ
import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "integration.md"
HOST_CHECKS = ROOT / "scripts" / "check_install_host.py"
# The team's own parts of the second host: its accounts app and its own API.
TEAM_PARTS = ROOT / "tests" / "team_host"
# The first line of each block of the guide that a host adds, and the host file it goes to
# (appended; a new file for the service module).
GUIDE_BLOCKS = {
    "# settings.py: add at the end": "host/settings.py",
    "# urls.py: add at the end": "host/urls.py",
    "# memory_service.py: a module of your project": "memory_service.py",
    "# team_agent.py: your own agent, with the user's approval of each memory write": (
        "team_agent.py"
    ),
}
# The blocks only a host with its own API tokens adds (the second host).
TEAM_GUIDE_BLOCKS = {
    "# api_auth.py: bearer tokens your project already issues, for the memory API": ("api_auth.py"),
    "# settings.py: the memory API also takes your bearer tokens": "team/settings.py",
}
WHEEL_PACKAGES = {"memory_app", "conversations"}
# Files a working install cannot do without: both apps' migrations, the admin's shared
# templates and styles.
WHEEL_MUST_HOLD = [
    "memory_app/migrations/0001_initial.py",
    "conversations/migrations/0001_initial.py",
    "conversations/migrations/0010_checkpoint_tables.py",
    "conversations/templates/admin/yuxi_pagination.html",
    "conversations/static/yuxi/admin.css",
    "memory_app/templates/admin/memory_app/userconfig/memory_preview.html",
]
# What the wheel must not hold: the reference site's demo data.
WHEEL_MUST_NOT_HOLD = ["memory_app/management/commands/seed_demo.py"]


class StepFailed(Exception):
    """A step of the install failed; the message says what was seen."""


def _run(command: list[str], *, cwd: Path | None = None, env: dict | None = None) -> str:
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    output = (result.stdout + result.stderr).strip()
    if result.returncode != 0:
        raise StepFailed(f"`{' '.join(command)}` exited {result.returncode}:\n{output[-4000:]}")
    return output


def _database() -> dict:
    """The host's database: DATABASE_URL's server and credentials, its name + `_install`."""
    env = environ.Env()
    environ.Env.read_env(ROOT / ".env")
    db = env.db_url("DATABASE_URL", default="postgres://postgres@127.0.0.1:5432/yuxi_memory")
    return {
        "NAME": f"{db['NAME']}_install",
        "USER": db.get("USER") or "",
        "PASSWORD": db.get("PASSWORD") or "",
        "HOST": db.get("HOST") or "",
        "PORT": str(db.get("PORT") or ""),
    }


def guide_blocks(text: str, wanted: dict[str, str] = GUIDE_BLOCKS) -> dict[str, str]:
    """The guide's code blocks a host adds, by the host file each goes to."""
    blocks = {}
    for body in re.findall(r"```python\n(.*?)```", text, flags=re.S):
        first = body.splitlines()[0]
        if first in wanted:
            blocks[wanted[first]] = body
    missing = set(wanted.values()) - set(blocks)
    if missing:
        raise StepFailed(f"docs/integration.md has no block for {sorted(missing)}")
    return blocks


class Host:
    """One host project made by `startproject` in the shared virtualenv: its directory, its
    settings module, its own database."""

    def __init__(self, install: "Install", name: str, database: dict) -> None:
        self.install = install
        self.name = name
        self.path = install.work / name
        self.database = database

    def env(self) -> dict[str, str]:
        """The environment of the host's commands: none of this checkout's Python paths or
        settings (the apps must come from the wheel, the settings from the host)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "DJANGO_"))}
        env["DJANGO_SETTINGS_MODULE"] = f"{self.name}.settings"
        return env

    def startproject(self) -> str:
        self.path.mkdir()
        django_admin = self.install.work / "venv" / "bin" / "django-admin"
        _run([str(django_admin), "startproject", self.name, str(self.path)], env=self.env())
        return str(self.path)

    def add(self, target: str, body: str) -> None:
        """Append `body` to the host's file `target` (a new file if it has none)."""
        path = self.path / target
        path.write_text((path.read_text() + "\n\n" if path.exists() else "") + body)

    def apply_guide(self, wanted: dict[str, str] = GUIDE_BLOCKS) -> str:
        blocks = guide_blocks(GUIDE.read_text(), wanted)
        for target, body in blocks.items():
            self.add(target.replace("host/", f"{self.name}/"), body)
        if wanted is GUIDE_BLOCKS:
            self.add(
                f"{self.name}/settings.py",
                "# check-install: this machine's database, in place of the guide's example.\n"
                f'DATABASES["default"].update({json.dumps(self.database)})\n',
            )
            shutil.copy2(HOST_CHECKS, self.path / "install_checks.py")
        return ", ".join(sorted(blocks))

    def add_team_parts(self) -> str:
        """The team's own parts, before the guide's blocks: its accounts app (listed after
        the apps once the guide's line is in), its user model and admin, its own API."""
        shutil.copytree(
            TEAM_PARTS / "accounts",
            self.path / "accounts",
            ignore=shutil.ignore_patterns("__pycache__"),
        )
        shutil.copy2(TEAM_PARTS / "team_api.py", self.path / "team_api.py")
        self.add(
            "team/urls.py",
            "# The team's own API at /api/ (urls_namespace='api').\n"
            "from team_api import api  # noqa: E402\n\n"
            'urlpatterns += [path("api/", api.urls)]\n',
        )
        return "accounts (EmailUser, ApiToken, EmailUserAdmin), team_api (NinjaAPI 'api' at /api/)"

    def list_team_app_last(self) -> str:
        self.add(
            "team/settings.py",
            "# The team's accounts app, after the apps; its email-login user model.\n"
            'INSTALLED_APPS += ["accounts"]\n'
            'AUTH_USER_MODEL = "accounts.EmailUser"\n',
        )
        return "INSTALLED_APPS += ['accounts'], AUTH_USER_MODEL = 'accounts.EmailUser'"

    def recreate_database(self) -> str:
        server = {key.lower(): self.database[key] or None for key in ("USER", "PASSWORD", "HOST")}
        port = self.database["PORT"] or None
        with psycopg.connect(dbname="postgres", port=port, autocommit=True, **server) as conn:
            name = sql.Identifier(self.database["NAME"])
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(name))
            conn.execute(sql.SQL("CREATE DATABASE {}").format(name))
        return self.database["NAME"]

    def manage(self, *args: str) -> str:
        python = str(self.install.venv_python)
        return _run([python, "manage.py", *args], cwd=self.path, env=self.env())

    def migrate(self) -> str:
        output = self.manage("migrate", "--noinput")
        return f"{output.count(' OK')} migrations applied"

    def check(self) -> str:
        return self.manage("check", "--fail-level", "WARNING").splitlines()[-1]

    def host_check(self, name: str) -> Callable[[], str]:
        return lambda: _run(
            [str(self.install.venv_python), "install_checks.py", name],
            cwd=self.path,
            env=self.env(),
        )


class Install:
    """The steps shared by both hosts, in order, in one temporary directory."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.venv_python = work / "venv" / "bin" / "python"
        self.wheel: Path | None = None
        database = _database()
        self.host = Host(self, "host", database)
        self.team = Host(self, "team", {**database, "NAME": f"{database['NAME']}_team"})

    def copy_sources(self) -> str:
        """Copy this checkout's files (tracked, or new and not ignored) to build from, so no
        leftover of an earlier build in the checkout reaches the wheel."""
        listed = _run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT
        )
        source = self.work / "src"
        count = 0
        for name in filter(None, listed.split("\0")):
            path = ROOT / name
            if path.is_file():
                (source / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, source / name)
                count += 1
        return f"{count} files"

    def build_wheel(self) -> str:
        dist = self.work / "dist"
        _run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check"]
            + ["-q", "-w", str(dist), str(self.work / "src")]
        )
        [self.wheel] = dist.glob("yuxi_memory-*.whl")
        return self.wheel.name

    def inspect_wheel(self) -> str:
        names = zipfile.ZipFile(self.wheel).namelist()
        (self.work / "wheel-files.txt").write_text("\n".join(names) + "\n")
        tops = {name.split("/")[0] for name in names}
        packages = {top for top in tops if not top.endswith(".dist-info")}
        if packages != WHEEL_PACKAGES:
            raise StepFailed(f"the wheel's top-level entries are {sorted(tops)}")
        missing = [name for name in WHEEL_MUST_HOLD if name not in names]
        if missing:
            raise StepFailed(f"the wheel lacks {missing}")
        extra = [name for name in WHEEL_MUST_NOT_HOLD if name in names]
        if extra:
            raise StepFailed(f"the wheel holds {extra}")
        return f"{len(names)} files; top level: {', '.join(sorted(tops))}"

    def make_venv(self) -> str:
        _run([sys.executable, "-m", "venv", str(self.work / "venv")])
        _run(
            [str(self.venv_python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
            + [str(self.wheel)]
        )
        return _run([str(self.venv_python), "-m", "pip", "--version"]).split(" from ")[0]

    def steps(self) -> list[tuple[str, Callable[[], str]]]:
        host, team = self.host, self.team
        return [
            ("copy this checkout's sources", self.copy_sources),
            ("build the wheel (pip wheel --no-deps)", self.build_wheel),
            ("the wheel holds memory_app and conversations only", self.inspect_wheel),
            ("install the wheel into a fresh virtualenv", self.make_venv),
            ("django-admin startproject host", host.startproject),
            ("apply docs/integration.md's blocks", host.apply_guide),
            ("drop and create the host's database", host.recreate_database),
            ("manage.py migrate", host.migrate),
            ("manage.py check", host.check),
            ("the apps come from the wheel, not this checkout", host.host_check("origin")),
            (
                "a remembering turn (chat), then one from async code (achat)",
                host.host_check("turn"),
            ),
            ("an approved write in the host's own agent", host.host_check("approval")),
            ("the API under the host's memory/ prefix", host.host_check("api")),
            ("team host: django-admin startproject team", team.startproject),
            ("team host: its accounts app, user admin and own NinjaAPI", team.add_team_parts),
            ("team host: apply docs/integration.md's blocks", team.apply_guide),
            ("team host: its accounts app listed after the apps", team.list_team_app_last),
            (
                "team host: the guide's bearer-token blocks",
                lambda: team.apply_guide(TEAM_GUIDE_BLOCKS),
            ),
            ("team host: drop and create its database", team.recreate_database),
            ("team host: manage.py migrate", team.migrate),
            ("team host: manage.py check", team.check),
            ("team host: a remembering turn (chat, achat)", team.host_check("turn")),
            ("team host: an approved write in its own agent", team.host_check("approval")),
            ("team host: every admin page of the apps", team.host_check("admin")),
            ("team host: the user's page under memory/", team.host_check("page")),
            ("team host: the export", team.host_check("export")),
            ("team host: a chat over a bearer token", team.host_check("bearer")),
            (
                "team host: its own admin class and api: names unchanged",
                team.host_check("untouched"),
            ),
        ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    parser.add_argument(
        "--wheel-list", action="store_true", help="print every file of the wheel at the end"
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="yuxi-check-install-"))
    install = Install(work)
    steps = install.steps()
    started = time.monotonic()
    for number, (title, step) in enumerate(steps, 1):
        print(f"[{number}/{len(steps)}] {title} ...", flush=True)
        try:
            detail = step()
        except (StepFailed, OSError, psycopg.Error, ValueError) as exc:
            print(f"\ncheck-install FAILED at step {number}: {title}\n{exc}", file=sys.stderr)
            print(f"(files kept in {work})", file=sys.stderr)
            return 1
        for line in detail.splitlines():
            print(f"      {line}")
    if args.wheel_list:
        print((work / "wheel-files.txt").read_text(), end="")
    print(f"check-install: all {len(steps)} steps passed in {time.monotonic() - started:.0f} s")
    if args.keep:
        print(f"(files kept in {work})")
    else:
        shutil.rmtree(work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
