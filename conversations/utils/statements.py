"""Counting the SQL statements a piece of work sends, on every thread's connection.

Agent runs talk to the database from several threads (tools run on LangGraph's pool threads),
so a count on the calling thread's connection alone undercounts. Transaction control (BEGIN,
COMMIT, ROLLBACK, SAVEPOINT, RELEASE) is not counted: it is not work.
"""

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from django.db import connection
from django.db.backends.signals import connection_created

__all__ = [
    "count_statements",
]

_CONTROL = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE")


@dataclass
class StatementCount:
    """Statements seen so far (`statements`: their SQL, in order; `connections`: how many
    connections were opened from the pool meanwhile)."""

    statements: list[str] = field(default_factory=list)
    connections: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __len__(self) -> int:
        return len(self.statements)


@contextmanager
def count_statements() -> Iterator[StatementCount]:
    """Count statements sent on any connection of the process while the block runs."""
    counted = StatementCount()
    active = [True]

    def wrapper(execute, sql, params, many, context):
        if active[0] and not sql.lstrip().upper().startswith(_CONTROL):
            with counted._lock:
                counted.statements.append(sql)
        return execute(sql, params, many, context)

    def on_connect(sender, connection, **kwargs):
        with counted._lock:
            counted.connections += 1
        if wrapper not in connection.execute_wrappers:
            connection.execute_wrappers.append(wrapper)

    connection_created.connect(on_connect, weak=False)
    connection.execute_wrappers.append(wrapper)
    try:
        yield counted
    finally:
        active[0] = False
        connection_created.disconnect(on_connect)
        if wrapper in connection.execute_wrappers:
            connection.execute_wrappers.remove(wrapper)
