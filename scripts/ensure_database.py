"""Check that PostgreSQL is reachable before anything else runs, and create the database.

Prints one actionable message and exits 2 when the server cannot be reached, instead of
letting a traceback from deep inside Django or pytest explain it.
"""

import argparse
import os
import sys

import psycopg
from psycopg import sql

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "yuxi_site.settings")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from django.conf import settings  # noqa: E402
from django.core.exceptions import ImproperlyConfigured  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--server-only",
        action="store_true",
        help="only check the server and the right to create databases (the test suite "
        "creates its own)",
    )
    args = parser.parse_args()
    try:
        db = settings.DATABASES["default"]
    except ImproperlyConfigured as exc:
        sys.stderr.write(f"\nERROR: {exc}\n\n")
        return 2
    host = db.get("HOST") or "localhost"
    port = db.get("PORT") or 5432
    params = {
        "host": db.get("HOST") or None,
        "port": port,
        "user": db.get("USER") or None,
        "password": db.get("PASSWORD") or None,
        "dbname": "postgres",
        "connect_timeout": 5,
    }
    try:
        conn = psycopg.connect(**params, autocommit=True)
    except psycopg.OperationalError as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else exc.__class__.__name__
        sys.stderr.write(
            f"\nERROR: cannot reach PostgreSQL at {host}:{port} as user "
            f"{db.get('USER') or '(default)'}.\n  {reason}\n\n"
            "Yuxi Memory needs PostgreSQL (advisory and row locks; there is no SQLite "
            "fallback). Either:\n"
            "  - start the local server, e.g. "
            "`pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start`, or\n"
            "  - set DATABASE_URL (see .env.example) to a reachable server, e.g.\n"
            "    export DATABASE_URL=postgres://USER:PASSWORD@HOST:5432/yuxi_memory\n\n"
        )
        return 2
    with conn:
        if args.server_only:
            can_create = conn.execute(
                "SELECT rolcreatedb OR rolsuper FROM pg_roles WHERE rolname = current_user"
            ).fetchone()[0]
            if not can_create:
                sys.stderr.write(
                    "\nERROR: the PostgreSQL role in DATABASE_URL may not create databases; "
                    "the test suite creates its own. Grant it: ALTER ROLE <role> CREATEDB;\n\n"
                )
                return 2
            return 0
        name = db["NAME"]
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if not exists:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            print(f"Created database {name}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
