"""Database connections outside Django's own: handing one back early, opening a direct one,
and a server-side cursor on one for reads too big to fetch at once."""

from collections.abc import Sequence

import psycopg
from django.db import DEFAULT_DB_ALIAS, connection, connections

__all__ = ["direct_connection", "release_connection", "server_cursor"]


def direct_connection(**kwargs: object) -> psycopg.Connection:
    """A new psycopg connection to the default database, outside Django's pool.

    For work that must not hold or wait for a pooled connection (the lease keeper's renewals,
    a bench's monitor); `kwargs` (e.g. `autocommit`, `application_name`) go to `psycopg.connect`.
    The caller closes it.
    """
    params = connections[DEFAULT_DB_ALIAS].settings_dict
    return psycopg.connect(
        dbname=params["NAME"],
        user=params["USER"] or None,
        password=params["PASSWORD"] or None,
        host=params["HOST"] or None,
        port=params["PORT"] or None,
        **kwargs,
    )


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
