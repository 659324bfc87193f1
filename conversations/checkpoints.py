"""The LangGraph checkpoints of interrupted runs: the one owner of their tables and savers.

A turn of a user whose memory writes need approval runs its graph with a checkpointer, so a
turn stopped before a write can be continued by the `resume` run that carries the user's
decision. Checkpoints are keyed by the `run_id` of the run that started the turn (a resume
that is interrupted again keeps that key) and deleted as soon as the turn ends without an
interrupt, or its approval is decided, expired or erased: they never become a second store of
conversations or memory.

The savers (`PostgresSaver` for sync turns, `AsyncPostgresSaver` for async ones) cannot share
Django's connections: each has its own psycopg pool of at most `CHECKPOINT_POOL_MAX`
connections, opened on first use. The tables live in the default schema of the same
database; migration `0010_checkpoint_tables` creates them (their `setup()` uses `CREATE INDEX
CONCURRENTLY`, so it runs on its own autocommit connection). Set-wise deletes for the reaper
and for erasure run on the caller's Django connection, inside its transaction.
"""

import asyncio
import os
import threading
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from django.db import DEFAULT_DB_ALIAS, connection, connections
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from conversations.conf import setting
from conversations.utils.connections import DATABASE_WAIT_SECONDS, transaction_pooled

__all__ = [
    "checkpointer",
]

# The tables `PostgresSaver.setup()` creates, each keyed by `thread_id` (our checkpoint key).
CHECKPOINT_TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")
_MIGRATIONS_TABLE = "checkpoint_migrations"


def _saver_connection() -> dict[str, Any]:
    """What the savers need of their connections: LangGraph's own `from_conn_string` settings
    (every statement prepared at its first run), except behind a pooler in transaction mode,
    where a statement prepared on one server connection is missing on the next transaction's
    (or another client's of the same name is there): none is prepared."""
    threshold = None if transaction_pooled() else 0
    return {"autocommit": True, "prepare_threshold": threshold, "row_factory": dict_row}


def _conninfo(settings_dict: dict[str, Any]) -> str:
    """A libpq connection string for the database Django's `settings_dict` names."""
    return psycopg.conninfo.make_conninfo(
        dbname=settings_dict["NAME"],
        user=settings_dict["USER"] or None,
        password=settings_dict["PASSWORD"] or None,
        host=settings_dict["HOST"] or None,
        port=settings_dict["PORT"] or None,
        application_name="yuxi-checkpoints",
    )


def setup_checkpoint_tables(settings_dict: dict[str, Any]) -> None:
    """Create or upgrade the checkpoint tables in the database `settings_dict` names, on an
    autocommit connection of its own (`CREATE INDEX CONCURRENTLY` cannot run in a
    transaction, nor beside one of the same session)."""
    with psycopg.connect(_conninfo(settings_dict), **_saver_connection()) as conn:
        PostgresSaver(conn).setup()


def drop_checkpoint_tables(settings_dict: dict[str, Any]) -> None:
    """The reverse of `setup_checkpoint_tables`."""
    with psycopg.connect(_conninfo(settings_dict), autocommit=True) as conn:
        for table in (*CHECKPOINT_TABLES, _MIGRATIONS_TABLE):
            conn.execute(f'DROP TABLE IF EXISTS "{table}"')


def _pool_arguments() -> dict[str, Any]:
    """A saver pool's arguments: the default database, connections made only when needed, at
    most `CHECKPOINT_POOL_MAX` of them, waited for at most `DATABASE_WAIT_SECONDS`, not opened
    yet."""
    size = int(setting("CHECKPOINT_POOL_MAX"))
    if size < 1:
        raise ValueError("CHECKPOINT_POOL_MAX must be at least 1")
    return {
        "conninfo": _conninfo(connections[DEFAULT_DB_ALIAS].settings_dict),
        "min_size": 0,
        "max_size": size,
        # A turn waits for a saver's connection no longer than for any other.
        "timeout": DATABASE_WAIT_SECONDS,
        "kwargs": _saver_connection(),
        "open": False,
    }


class _OpenOnUse(PostgresSaver):
    """A `PostgresSaver` whose pool opens on its first query, so a process (or a turn) that
    never needs a checkpoint never connects for one."""

    @contextmanager
    def _cursor(self, *, pipeline: bool = False) -> Iterator[Any]:
        self.conn.open()  # a no-op once open
        with super()._cursor(pipeline=pipeline) as cursor:
            yield cursor


_saver: tuple[int, PostgresSaver] | None = None
_saver_lock = threading.Lock()


def checkpointer() -> PostgresSaver:
    """This process's `PostgresSaver` (created once per process id, so a forked worker gets
    its own), on a pool of at most `CHECKPOINT_POOL_MAX` connections that opens on first use."""
    global _saver
    with _saver_lock:
        if _saver is None or _saver[0] != os.getpid():
            pool = ConnectionPool(**_pool_arguments(), name="yuxi-checkpoints")
            _saver = (os.getpid(), _OpenOnUse(pool))
        return _saver[1]


def close_checkpointer() -> None:
    """Close this process's sync saver's pool (at shutdown, or before its database goes); the
    next `checkpointer()` opens a new one."""
    global _saver
    with _saver_lock:
        if _saver is not None and _saver[0] == os.getpid():
            _saver[1].conn.close()
        _saver = None


# By event loop (a loop that is gone takes its saver with it).
_async_savers: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncPostgresSaver]" = (
    weakref.WeakKeyDictionary()
)


async def async_checkpointer() -> AsyncPostgresSaver:
    """The `AsyncPostgresSaver` of this process and running event loop, on its own async pool
    of at most `CHECKPOINT_POOL_MAX` connections, opened on first use (an async pool belongs
    to the loop that opened it)."""
    key = asyncio.get_running_loop()
    saver = _async_savers.get(key)
    if saver is None:
        pool = AsyncConnectionPool(**_pool_arguments(), name="yuxi-checkpoints-async")
        await pool.open()
        saver = _async_savers.setdefault(key, AsyncPostgresSaver(pool))
    return saver


async def close_async_checkpointer() -> None:
    """Close the running loop's async saver's pool, if it has one (before a private loop
    that streamed a turn goes away)."""
    saver = _async_savers.pop(asyncio.get_running_loop(), None)
    if saver is not None:
        await saver.conn.close()


def checkpoint_exists(key: str) -> bool:
    """Whether any checkpoint is stored under `key` (a run id as text)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT EXISTS (SELECT 1 FROM checkpoints WHERE thread_id = %s)", [key])
        return cursor.fetchone()[0]


def _delete_where(condition: str, params: list[Any]) -> int:
    """Delete the checkpoints, blobs and pending writes whose key meets `condition`, on the
    caller's connection (inside its transaction, if any); how many keys had checkpoints."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"WITH gone AS (DELETE FROM checkpoints WHERE {condition} RETURNING thread_id) "
            "SELECT count(DISTINCT thread_id) FROM gone",
            params,
        )
        deleted = cursor.fetchone()[0]
        for table in CHECKPOINT_TABLES[1:]:
            cursor.execute(f'DELETE FROM "{table}" WHERE {condition}', params)
    return deleted


def delete_checkpoints(keys: Sequence[str]) -> int:
    """Delete everything stored under `keys`; how many of them had checkpoints."""
    return _delete_where("thread_id = ANY(%s)", [list(keys)]) if keys else 0


# Every checkpoint key a user's runs could have used: the run ids of the user's runs.
_USER_KEYS_SQL = "SELECT run_id::text FROM conversations_agentrun WHERE user_id = %s"


def delete_user_checkpoints(*, user_id: int) -> int:
    """Delete everything stored under any of `user_id`'s runs, set-wise (for erasure: inside
    its transaction, before the runs themselves go); how many keys had checkpoints."""
    return _delete_where(f"thread_id IN ({_USER_KEYS_SQL})", [user_id])
