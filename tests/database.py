"""The database made unreachable for a test, the way an outage looks to the app, or reached
through a pooler, the way a host behind PgBouncer reaches it."""

import copy
import socket
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection

from conversations import checkpoints
from memory_app.runtime.loop import run_sync

# How long a request waits for a pooled connection while the database is down (seconds).
OUTAGE_POOL_TIMEOUT = 0.5


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def unreachable_database() -> Iterator[None]:
    """Point this thread's default connection at a closed port, then back.

    The connection pool keeps the parameters it was built with, so it is closed on the way in
    and out: the outage starts at once, and recovery is the app connecting afresh.
    """
    saved = copy.deepcopy(connection.settings_dict)
    connection.close()
    connection.close_pool()
    connection.settings_dict.update(HOST="127.0.0.1", PORT=str(closed_port()))
    pool = connection.settings_dict["OPTIONS"].get("pool")
    if isinstance(pool, dict):
        connection.settings_dict["OPTIONS"]["pool"] = {**pool, "timeout": OUTAGE_POOL_TIMEOUT}
    try:
        yield
    finally:
        connection.close()
        connection.close_pool()
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)


@contextmanager
def through_pgbouncer(port: int) -> Iterator[None]:
    """Point the default connection (Django's pool, the checkpointers' pools, every direct
    connection) at a PgBouncer on `port`, as a host behind one has it: the same database,
    `DISABLE_SERVER_SIDE_CURSORS`. The caller sets `DATABASE_POOL_MODE` itself."""
    saved = copy.deepcopy(connection.settings_dict)
    connection.close()
    connection.close_pool()
    checkpoints.close_checkpointer()
    run_sync(checkpoints.close_async_checkpointer())  # the process loop's saver
    connection.settings_dict.update(
        HOST="127.0.0.1", PORT=str(port), DISABLE_SERVER_SIDE_CURSORS=True
    )
    try:
        yield
    finally:
        connection.close()
        connection.close_pool()
        checkpoints.close_checkpointer()
        run_sync(checkpoints.close_async_checkpointer())
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)
