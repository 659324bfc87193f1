"""A slice of the test suite (approval, memory writes, chat, streams, export, admin, the lease
keeper and the checkpointer) with its database reached through Debian's PgBouncer in
transaction mode, as a host with several app hosts reaches it.

    .venv/bin/python scripts/test_through_pgbouncer.py [--port 24980] [pytest arguments]

Starts PgBouncer (as the `postgres` OS user when run as root) in front of the server that
`DATABASE_URL` names, then runs pytest on `SLICE` with `DATABASE_URL` pointing through it and
`DATABASE_POOL_MODE=transaction`. The test database (`test_<name>_pgbouncer`) is created
through PgBouncer, migrations included, and dropped directly once PgBouncer is stopped (it
keeps server connections to it open until then). Exits with pytest's status.
"""

import argparse
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import environ
import psycopg
from psycopg import sql

PROJECT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT_ROOT))

from tests.pgbouncer import PgBouncer, pgbouncer_missing  # noqa: E402

# The suite's files of the paths a pooler in transaction mode could break.
SLICE = (
    "tests/memory_app/test_runtime_approval.py",
    "tests/memory_app/test_services.py",
    "tests/memory_app/test_memory_fence.py",
    "tests/memory_app/test_api_chat.py",
    "tests/memory_app/test_api_chat_stream.py",
    "tests/memory_app/test_runtime_streaming.py",
    "tests/memory_app/test_user_data.py",
    "tests/memory_app/test_api_export.py",
    "tests/memory_app/test_admin.py",
    "tests/conversations/test_admin.py",
    "tests/conversations/test_lease_keeper.py",
    "tests/conversations/test_checkpoints.py",
)
DEFAULT_PORT = 24980
DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/yuxi_memory"


def _drop(direct_url: str, database: str) -> None:
    with psycopg.connect(direct_url, dbname="postgres", autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database))
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="PgBouncer's port")
    args, pytest_args = parser.parse_known_args()
    if reason := pgbouncer_missing():
        print(f"test_through_pgbouncer: {reason}", file=sys.stderr)
        return 2
    environ.Env.read_env(PROJECT_ROOT / ".env")  # as the settings read it: the environment wins
    direct_url = os.environ.get("DATABASE_URL", DEFAULT_URL)
    parts = urlsplit(direct_url)
    name = f"{parts.path.lstrip('/')}_pgbouncer"
    test_database = f"test_{name}"
    _drop(direct_url, test_database)
    env = {**os.environ, "DATABASE_POOL_MODE": "transaction"}
    try:
        with PgBouncer(
            port=args.port,
            server_host=parts.hostname or "127.0.0.1",
            server_port=parts.port or 5432,
        ) as bouncer:
            netloc = f"{parts.username or 'postgres'}@127.0.0.1:{bouncer.port}"
            env["DATABASE_URL"] = urlunsplit((parts.scheme, netloc, f"/{name}", "", ""))
            # The suite's own PgBouncer fixtures chain behind this one on ports of their own.
            env.setdefault("YUXI_TEST_PGBOUNCER_PORT", str(args.port + 1))
            print(f"test_through_pgbouncer: {env['DATABASE_URL']} (transaction mode)", flush=True)
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pytest",
                    "--reuse-db",
                    # A pooler hides a backend's pid from its client: those few tests watch
                    # PostgreSQL's locks by it, so they run in the suite's direct run only.
                    "-m",
                    "not backend_pid",
                    "-p",
                    "no:cacheprovider",
                    *SLICE,
                    *pytest_args,
                ],
                cwd=PROJECT_ROOT,
                env=env,
                check=False,
            )
    finally:
        _drop(direct_url, test_database)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
