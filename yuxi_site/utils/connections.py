"""Handing a thread's database connection back as soon as its database work is done."""

from django.db import connection

__all__ = ["release_connection"]


def release_connection() -> None:
    """Close this thread's connection (back to the pool) unless a transaction still needs it.

    Agent runs do their database work from several threads (LangGraph runs tools on pool
    threads) and then wait on a model for seconds: a connection kept across that wait would
    tie one up per chat instead of per query.
    """
    if not connection.in_atomic_block:
        connection.close()
