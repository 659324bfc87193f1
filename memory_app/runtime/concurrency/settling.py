"""Awaiting the phases that open and settle a run so that nothing stops them halfway:
`opened` lets an open finish and undoes what it opened when its caller was cancelled meanwhile;
`to_the_end` runs a close or cancel to its end however often its caller is cancelled
meanwhile; `settled` runs a close so, with the run's cancel in its place if the close's own
step was interrupted.
"""

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from memory_app.runtime.concurrency.loop import logger

T = TypeVar("T")


async def to_the_end(phase: Awaitable[T]) -> T:
    """Await a phase that settles the run (close, cancel) to its end however often the task is
    cancelled meanwhile, then pass the cancellation on: abandoned while it waited for a worker
    thread, it would never run, leaving its run `running`, renewed, with nobody to finish it."""
    task = asyncio.ensure_future(phase)
    interrupted: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.wait([task])
        except asyncio.CancelledError as exc:
            interrupted = interrupted or exc
    if interrupted is not None:
        failure = None if task.cancelled() else task.exception()
        if failure is not None:  # the caller gets the cancellation: the failure is told here
            logger.warning("a run's close failed after its caller was cancelled", exc_info=failure)
        raise interrupted
    return task.result()


async def settled(
    close: Callable[[], Awaitable[T]], *, instead: Callable[[], Awaitable[None]]
) -> T:
    """Await `close()` to its end (`to_the_end`) and return its result. If the close itself
    was cancelled — an interruption landed inside its step on a sync caller's thread, which
    ends that step cancelled — `instead()` (the run's cancel) runs to its end in its place,
    then the cancellation propagates: the run is closed either way."""
    closing = asyncio.ensure_future(close())
    try:
        return await to_the_end(closing)
    except asyncio.CancelledError:
        if closing.cancelled():
            await to_the_end(instead())
        raise


async def opened(opening: Awaitable[T], *, undo: Callable[[T], Awaitable[object]]) -> T:
    """Await an open phase so that a cancellation while it runs still undoes what it opens:
    the open goes on to its end (on its worker thread), then `undo(result)` runs to its end,
    then the cancellation propagates. An open that failed left nothing to undo."""
    task = asyncio.ensure_future(opening)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        try:
            result, failed = await task, False
        except Exception:  # the open failed: there is nothing to undo
            result, failed = None, True
        if not failed:
            await to_the_end(undo(result))
        raise
