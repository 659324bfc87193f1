"""Racing real database connections from threads, started together."""

import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from django.db import connections, transaction
from django.db.models import Model


def race(work: Callable[..., Any], arguments: Iterable[tuple]) -> list[Any]:
    """Run `work(*args)` for each args in its own thread and connection, all released at once.

    Returns the results in the order of `arguments`; re-raises the first error a racer hit.
    Each thread closes its connections, so no test leaks one into the next.
    """
    calls = list(arguments)
    barrier = threading.Barrier(len(calls))
    results: list[Any] = [None] * len(calls)
    errors: list[BaseException] = []

    def racer(index: int, args: tuple) -> None:
        try:
            barrier.wait(30)
            results[index] = work(*args)
        except BaseException as exc:  # re-raised below, in the test's thread
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=racer, args=(i, args)) for i, args in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return results


@contextmanager
def row_locked_elsewhere(instance: Model) -> Iterator[None]:
    """`instance`'s row held `FOR UPDATE` by another connection (a thread) for the body.

    The body starts once the lock is granted; the lock is released and the thread joined on
    exit. Needs `django_db(transaction=True)`: the other connection must see the row.
    """
    locked, release = threading.Event(), threading.Event()

    def hold() -> None:
        try:
            with transaction.atomic():
                type(instance)._default_manager.select_for_update().get(pk=instance.pk)
                locked.set()
                release.wait(30)
        finally:
            connections.close_all()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert locked.wait(30), "the other connection never got the row lock"
        yield
    finally:
        release.set()
        holder.join()
