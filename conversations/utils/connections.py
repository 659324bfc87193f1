"""Database connections outside Django's own: handing one back early, opening a direct one,
a server-side cursor on one for reads too big to fetch at once, a cursor whose statements the
server prepares, and running database work for async callers on worker threads that own
their connections."""

import asyncio
import contextlib
import contextvars
import functools
import os
from collections.abc import Awaitable, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

import psycopg
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connection, connections
from django.db.backends.postgresql.base import ServerBindingCursor
from django.db.backends.utils import CursorWrapper
from psycopg import pq

from conversations.conf import setting

__all__ = [
    "release_connection",
    "direct_connection",
    "in_worker_thread",
]

# The longest a wait for a database connection lasts (seconds), a direct one's or a
# checkpointer's: the bound docs/operations.md gives every request's wait.
DATABASE_WAIT_SECONDS = 10

P = ParamSpec("P")
R = TypeVar("R")


def transaction_pooled() -> bool:
    """Whether the default database is reached through a pooler in transaction mode (the
    `DATABASE_POOL_MODE` setting): each transaction may run on another server connection, so
    no connection of the apps prepares a statement there."""
    return setting("DATABASE_POOL_MODE") == "transaction"


def direct_connection(**kwargs: object) -> psycopg.Connection:
    """A new psycopg connection to the default database, outside Django's pool.

    For work that must not hold or wait for a pooled connection (the lease keeper's renewals,
    a bench's monitor); `kwargs` (e.g. `autocommit`, `application_name`) go to `psycopg.connect`.
    Connecting waits at most `DATABASE_WAIT_SECONDS` unless `kwargs` say otherwise. Behind a
    pooler in transaction mode it never prepares a statement (psycopg's default is to prepare
    one at its fifth run, on a server connection the next transaction may not get).
    The caller closes it.
    """
    params = connections[DEFAULT_DB_ALIAS].settings_dict
    kwargs.setdefault("connect_timeout", DATABASE_WAIT_SECONDS)
    conn = psycopg.connect(
        dbname=params["NAME"],
        user=params["USER"] or None,
        password=params["PASSWORD"] or None,
        host=params["HOST"] or None,
        port=params["PORT"] or None,
        **kwargs,
    )
    if transaction_pooled():
        conn.prepare_threshold = None
    return conn


def release_connection() -> None:
    """Close this thread's connection (back to the pool) unless a transaction still needs it.

    Agent runs do their database work from several threads (LangGraph runs tools on pool
    threads) and then wait on a model for seconds: a connection kept across that wait would
    tie one up per chat instead of per query.
    """
    if not connection.in_atomic_block:
        connection.close()


def server_cursor(
    pg: psycopg.Connection, name: str, sql: str, params: Sequence[object], *, fetch_rows: int
) -> psycopg.ServerCursor:
    """`sql` executed on a named server-side cursor of `pg` (inside its transaction), fetching
    `fetch_rows` rows per round trip: memory stays bounded whatever the result's size."""
    cursor = pg.cursor(name=name)
    cursor.itersize = fetch_rows
    cursor.execute(sql, params)
    return cursor


@contextmanager
def prepared_cursor(alias: str = DEFAULT_DB_ALIAS) -> Iterator[CursorWrapper]:
    """A cursor of Django's connection `alias` (its transaction, its execute wrappers, its
    error translation) whose statements PostgreSQL prepares on that connection: each is
    planned once there (psycopg keeps the last 100 per connection), not at every run.

    For the few statements every chat turn sends, whose planning costs PostgreSQL more than
    running them. The parameters are bound by the server: at most 65535 of them, and a
    value's type is the one psycopg gives it (cast in the SQL where the column's differs).
    With the `PREPARED_STATEMENTS` setting False, behind a pooler in transaction mode
    (`DATABASE_POOL_MODE`: the statement would be prepared on a server connection the next
    transaction may not get, and another client's statement of the same name may be there),
    and while Django logs queries (`DEBUG`, or a test capturing them: its log reads a prepared
    statement's SQL as None), it is Django's own cursor.
    """
    database = connections[alias]
    if not setting("PREPARED_STATEMENTS") or transaction_pooled() or database.queries_logged:
        with database.cursor() as cursor:
            yield cursor
        return
    database.ensure_connection()
    # This thread's own connection, as Django's are: changed for this cursor, then restored.
    pg = database.connection
    client_binding, threshold = pg.cursor_factory, pg.prepare_threshold
    pg.cursor_factory = ServerBindingCursor  # for Django's own cursor set-up
    try:
        with database.wrap_database_errors:
            cursor = database._prepare_cursor(database.create_cursor())
    finally:
        pg.cursor_factory = client_binding
    pg.prepare_threshold = 0  # prepared at its first run (Django's default: never)
    try:
        with cursor:
            yield cursor
    except DatabaseError:
        _forget_prepared(pg)
        raise
    finally:
        pg.prepare_threshold = threshold


def _forget_prepared(pg: psycopg.Connection) -> None:
    """After a statement failed outside a transaction: PostgreSQL forgets every statement
    prepared on the connection, and psycopg with it (it reads the `DEALLOCATE ALL`).

    A statement that fails at the run that prepares it stays prepared on the server while
    psycopg forgets its name; a plan a migration made stale ("cached plan must not change
    result type") fails every later run. Inside a transaction the rollback clears them."""
    if pg.info.transaction_status != pq.TransactionStatus.IDLE:
        return
    with contextlib.suppress(psycopg.Error), ServerBindingCursor(pg) as cursor:
        cursor.execute("DEALLOCATE ALL", prepare=False)  # the failure is what is raised


@functools.cache
def _database_workers(pid: int) -> ThreadPoolExecutor:
    """This process's worker threads for async callers' database work, as many as the pool has
    connections (a worker never waits for a connection another worker of ours holds idle).
    Keyed by process id: a forked worker process never uses its parent's threads."""
    pool = connections[DEFAULT_DB_ALIAS].settings_dict["OPTIONS"].get("pool") or {}
    return ThreadPoolExecutor(
        max_workers=pool.get("max_size", 16), thread_name_prefix=f"yuxi-db-{pid}"
    )


def in_worker_thread(func: Callable[P, R]) -> Callable[P, Awaitable[R]]:
    """`func` for async callers: awaited, it runs on one of the process's database worker
    threads and hands that thread's connection back to the pool before it returns.

    Django's ORM may not run on an event loop. Each call owns its connection from start to
    end, so calls need no shared thread, and they run side by side (asgiref's thread-sensitive
    mode runs them one at a time on a single thread, where one memory write waiting on a
    user's lock would hold up every other turn's database work). Such a call never joins a
    transaction of the caller's thread. It runs in a copy of the caller's context variables,
    as `sync_to_async(thread_sensitive=False)` would run it, but handed to the pool directly:
    asgiref's own bookkeeping per call (context copied back, thread-local storage re-homed)
    cost more CPU than the hop itself, and a turn makes several (bench/chat_turn.py). So,
    unlike asgiref's, what the call sets in its context variables stays in its copy.
    A caller cancelled while it waits is cancelled at once: a call a thread has started runs
    to its end, one still queued for a thread never runs (a phase that must run whatever
    happens is awaited with `memory_app.runtime.concurrency.settling.to_the_end`).
    """

    def owned(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        finally:
            release_connection()

    @functools.wraps(func)
    async def awaited(*args: P.args, **kwargs: P.kwargs) -> R:
        workers = _database_workers(os.getpid())
        call = functools.partial(contextvars.copy_context().run, owned, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(workers, call)

    return awaited
