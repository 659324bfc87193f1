"""A real PgBouncer in transaction mode, started and stopped by a test, the slice's script or
the fault harness: the pooler a team puts between several app hosts and one PostgreSQL.

Debian's `pgbouncer` (1.18: no protocol-level prepared statements) refuses to run as root, so
as root it runs as the `postgres` OS user. Its settings are the ones docs/operations.md gives
an operator: transaction pooling, `query_wait_timeout` within the app's 10 s bound, and a
`server_login_retry` of 1 s so that a PostgreSQL restart is over for the clients a second
after PostgreSQL is back.
"""

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg

__all__ = ["PGBOUNCER", "TEST_PORT", "PgBouncer", "pgbouncer_missing"]

PGBOUNCER = os.environ.get("PGBOUNCER", "/usr/sbin/pgbouncer")
LOOPBACK = "127.0.0.1"
# The first of the few ports the suite's own PgBouncers and relays listen on (fixed, never
# random: give each checkout on one machine its own).
TEST_PORT = int(os.environ.get("YUXI_TEST_PGBOUNCER_PORT", "24990"))
# What docs/operations.md tells an operator to set (seconds).
QUERY_WAIT_TIMEOUT = 10
SERVER_LOGIN_RETRY = 1
# SHOW POOLS' columns counting a pool's server connections, whatever their state.
_SERVER_STATES = ("sv_active", "sv_idle", "sv_used", "sv_tested", "sv_login")


def pgbouncer_missing() -> str:
    """Why no PgBouncer can run here ("" when one can): a reason for a skipped test."""
    if not Path(PGBOUNCER).is_file():
        return f"{PGBOUNCER} is not installed (Debian's package pgbouncer; .ci/run installs it)"
    return ""


class PgBouncer:
    """One PgBouncer process on `port` in front of PostgreSQL at `server_host:server_port`,
    every database name passed through, transaction pooling, at most `pool_size` server
    connections per database and user."""

    def __init__(
        self,
        *,
        port: int,
        server_host: str = LOOPBACK,
        server_port: int = 5432,
        pool_size: int = 8,
        max_client_conn: int = 1000,
    ) -> None:
        self.port = port
        self.dir = Path(tempfile.mkdtemp(prefix=f"yuxi-pgbouncer-{port}-"))
        self.dir.chmod(0o755)
        self.as_postgres = os.geteuid() == 0
        (self.dir / "userlist.txt").write_text('"postgres" ""\n')
        (self.dir / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"* = host={server_host} port={server_port}\n"
            "[pgbouncer]\n"
            f"listen_addr = {LOOPBACK}\n"
            f"listen_port = {port}\n"
            f"unix_socket_dir = {self.dir}\n"
            f"logfile = {self.dir / 'pgbouncer.log'}\n"
            "auth_type = trust\n"
            f"auth_file = {self.dir / 'userlist.txt'}\n"
            "admin_users = postgres\n"
            "pool_mode = transaction\n"
            f"default_pool_size = {pool_size}\n"
            f"max_client_conn = {max_client_conn}\n"
            f"query_wait_timeout = {QUERY_WAIT_TIMEOUT}\n"
            f"server_login_retry = {SERVER_LOGIN_RETRY}\n"
            "server_connect_timeout = 5\n"
            # Consecutive transactions of one client go to different server connections, as
            # they do under load from many hosts: what a session left behind is not there.
            "server_round_robin = 1\n"
        )
        if self.as_postgres:
            for path in (self.dir, *self.dir.iterdir()):
                shutil.chown(path, "postgres", "postgres")
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> "PgBouncer":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def url(self, database: str) -> str:
        """A `DATABASE_URL` reaching `database` through this PgBouncer."""
        return f"postgres://postgres@{LOOPBACK}:{self.port}/{database}"

    def start(self, timeout: float = 15.0) -> None:
        command = [PGBOUNCER, str(self.dir / "pgbouncer.ini")]
        if self.as_postgres:
            command = ["runuser", "-u", "postgres", "--", *command]
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"pgbouncer exited:\n{self.log()[-2000:]}")
            try:
                socket.create_connection((LOOPBACK, self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"pgbouncer did not listen on {self.port}:\n{self.log()[-2000:]}")

    def stop(self) -> None:
        """Stop it at once (SIGINT: every client and server connection closed)."""
        if self.process is None or self.process.poll() is not None:
            return
        # Signalled through its session: as root, the process is runuser's child.
        os.killpg(self.process.pid, 2)
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, 9)
            self.process.wait(10)

    def restart(self) -> None:
        self.stop()
        self.start()

    def warm(self, database: str, servers: int = 3) -> None:
        """Open `servers` server connections to `database` (transactions open side by side),
        so that a client's consecutive transactions each take another one."""
        held = [psycopg.connect(self.url(database)) for _ in range(servers)]
        try:
            for conn in held:
                conn.execute("SELECT 1")  # each inside its own open transaction
        finally:
            for conn in held:
                conn.close()

    def log(self) -> str:
        path = self.dir / "pgbouncer.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def admin(self, command: str) -> list[dict[str, object]]:
        """`command` on PgBouncer's admin console (`SHOW POOLS`, `SHOW CLIENTS`, ...)."""
        with psycopg.connect(
            host=LOOPBACK, port=self.port, dbname="pgbouncer", user="postgres", autocommit=True
        ) as conn:
            cursor = psycopg.ClientCursor(conn)
            cursor.execute(command)
            if cursor.description is None:
                return []
            names = [column.name for column in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def clients_and_servers(self, database: str) -> tuple[int, int]:
        """(client connections, server connections) of `database`'s pools now."""
        clients = servers = 0
        for pool in self.admin("SHOW POOLS"):
            if pool["database"] == database:
                clients += int(pool["cl_active"]) + int(pool["cl_waiting"])
                servers += sum(int(pool[key]) for key in _SERVER_STATES)
        return clients, servers
