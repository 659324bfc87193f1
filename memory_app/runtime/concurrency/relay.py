"""Events produced on the process's event loop, read from anywhere.

- `relay`: an async generator living on the process loop, read from another loop: it runs
  there as one task, at most `RELAY_AHEAD` events ahead of its reader (events cross threads
  as they come, without a task or a round trip each); a reader that stops or is cancelled
  cancels it on its loop.
- `iterate_sync`: the same generator stepped from sync code, one step per item asked for;
  closing the consumer closes the generator on its loop. Every step runs in one context, as
  the one task of `relay` would: a context variable the generator sets holds for its later
  steps.
"""

import asyncio
import collections
import contextvars
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import aclosing
from typing import Any, TypeVar

from memory_app.runtime.concurrency.loop import Job, loop_of_process, run_sync, until_finished

T = TypeVar("T")


async def _anext(events: AsyncIterator[T]) -> T:
    return await anext(events)


# How many events a relayed generator may run ahead of its reader before it waits for it.
RELAY_AHEAD = 64


class _Ended:
    """The last item of a relay: the generator finished (`error`: what it raised, if it did)."""

    def __init__(self, error: BaseException | None) -> None:
        self.error = error


class _Channel:
    """Events handed from the process loop to a reader on another loop: the writer appends
    and wakes the reader only if it is waiting (one cross-thread wake-up per idle reader, not
    per event), and waits itself once `RELAY_AHEAD` events are unread, until the reader is
    down to half of them."""

    def __init__(self, reader_loop: asyncio.AbstractEventLoop) -> None:
        self._reader_loop = reader_loop
        self._items: collections.deque[Any] = collections.deque()
        self._lock = threading.Lock()
        self._reader: asyncio.Future | None = None  # on the reader's loop
        self._writer: asyncio.Future | None = None  # on the process loop

    def _append(self, item: Any, *, wait_if_full: bool) -> asyncio.Future | None:
        with self._lock:
            self._items.append(item)
            reader, self._reader = self._reader, None
            if wait_if_full and len(self._items) >= RELAY_AHEAD:
                self._writer = asyncio.get_running_loop().create_future()
            writer = self._writer
        if reader is not None:
            self._reader_loop.call_soon_threadsafe(_settle, reader)
        return writer

    async def put(self, item: Any) -> None:
        """On the process loop: hand `item` over; wait while the reader is `RELAY_AHEAD`
        events behind."""
        writer = self._append(item, wait_if_full=True)
        if writer is not None:
            await writer

    def end(self, error: BaseException | None) -> None:
        """On the process loop: the generator is done (`error`: what it raised)."""
        self._append(_Ended(error), wait_if_full=False)

    async def get(self) -> Any:
        """On the reader's loop: the next item, once there is one."""
        while True:
            with self._lock:
                if self._items:
                    item = self._items.popleft()
                    writer = None
                    if len(self._items) <= RELAY_AHEAD // 2:  # not one wake-up per event
                        writer, self._writer = self._writer, None
                    break
                self._reader = reader = self._reader_loop.create_future()
            await reader
        if writer is not None:
            writer.get_loop().call_soon_threadsafe(_settle, writer)
        return item


def _settle(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_result(None)


async def _pump(events: AsyncIterator[T], channel: _Channel) -> None:
    """On the process loop: `events` into `channel`, then its end. Cancelled (its reader
    stopped or was cancelled), it closes `events` if the cancellation did not reach inside
    it, so the generator's own cancellation handling runs either way."""
    try:
        async for event in events:
            await channel.put(event)
    except asyncio.CancelledError as exc:
        await events.aclose()
        channel.end(exc)
        raise
    except BaseException as exc:
        channel.end(exc)
        raise
    channel.end(None)


async def relay(events: AsyncIterator[T], *, reason: str | None = None) -> AsyncIterator[T]:
    """`events` (an async generator on the process loop) read from any loop. It runs on the
    process loop as one task, at most `RELAY_AHEAD` events ahead of its reader; a reader that
    stops reading or is cancelled cancels it there (`reason`: what `cancel_reason` tells
    it), and waits until it has finished."""
    reader_loop = asyncio.get_running_loop()
    if reader_loop is loop_of_process():
        async with aclosing(events):
            async for event in events:
                yield event
        return
    channel = _Channel(reader_loop)
    job = Job(_pump(events, channel), None)
    try:
        while not isinstance(item := await channel.get(), _Ended):
            yield item
    except BaseException:
        if not job.done.done():
            job.cancel(reason)
            await until_finished(job)
        raise
    if item.error is not None:
        raise item.error


def iterate_sync(events: AsyncIterator[T]) -> Iterator[T]:
    """`events` (an async generator on the process loop) stepped from sync code, one step
    per item asked for, every step in one copy of the caller's context; a consumer that stops
    reading closes it on its loop."""
    context = contextvars.copy_context()
    try:
        while True:
            try:
                event = run_sync(_anext(events), context=context)
            except StopAsyncIteration:
                return
            yield event
    finally:
        run_sync(events.aclose(), context=context)
