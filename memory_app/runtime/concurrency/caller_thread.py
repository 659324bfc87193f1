"""A sync caller's thread, serving the database steps of the turn it waits for.

While `run_sync` waits for a turn on the process's event loop, the caller's own thread runs
the turn's database steps (`on_database` hands them here), so they use the caller's
connection and transaction, as if it ran the turn itself. An interruption of the waiting
thread (Ctrl-C, a signal's handler) is handled here, never raised inside the turn's task.
"""

import concurrent.futures
import queue
from collections.abc import Callable
from typing import Any, TypeVar

R = TypeVar("R")


class CallerThread:
    """A sync caller's thread, serving the database phases of the turn it waits for."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], concurrent.futures.Future]] = (
            queue.SimpleQueue()
        )

    def submit(self, func: Callable[[], R]) -> "concurrent.futures.Future[R]":
        future: concurrent.futures.Future[R] = concurrent.futures.Future()
        self._jobs.put((func, future))
        return future

    def serve_until(
        self, done: concurrent.futures.Future, interrupted: Callable[[BaseException], None]
    ) -> BaseException | None:
        """Run submitted work here until `done` is settled; returns the first
        `KeyboardInterrupt` or `SystemExit` that arrived meanwhile, if any.

        An interruption (Ctrl-C, a signal's handler) never stops the serving: the first is
        handed to `interrupted` (which cancels the turn), and the turn's cancellation and
        close are served here to their end; the step it interrupted ends cancelled. Raised
        inside the turn's task instead, it would stop the process loop itself.
        """
        done.add_done_callback(lambda _: self._jobs.put((_stop, concurrent.futures.Future())))
        first: BaseException | None = None
        while True:
            future: concurrent.futures.Future | None = None
            try:
                func, future = self._jobs.get()
                if func is _stop:
                    return first
                if future.set_running_or_notify_cancel():
                    _serve(func, future)
            except (KeyboardInterrupt, SystemExit) as exc:
                if first is None:  # the turn learns why before the step ends
                    first = exc
                    interrupted(exc)
                if future is not None and not future.done() and not future.cancel():
                    future.set_exception(concurrent.futures.CancelledError())


def _serve(func: Callable[[], Any], future: concurrent.futures.Future) -> None:
    """`func`'s outcome into `future`, an interruption excepted (`serve_until` ends it)."""
    try:
        result = func()
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # handed to the awaiting turn
        future.set_exception(exc)
    else:
        future.set_result(result)


def _stop() -> None:
    """The marker that ends `CallerThread.serve_until`."""
