"""Racing real database connections from threads, started together."""

import threading
from collections.abc import Callable, Iterable
from typing import Any

from django.db import connections


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
