"""The process's event loop: every turn's async agent phase runs on it, whoever calls.

Loop-bound resources (the model client's async connection pool, the async checkpointer's
pool) belong to the loop that made them and break on any other (`Event loop is closed` once a
private loop is gone). So one loop per process runs every turn, in a daemon thread started on
first use and started anew in a forked child (the thread does not survive a fork).

- `run_sync(coroutine)`: a sync caller's adapter. The caller's thread waits and meanwhile
  serves the turn's database phases itself (`on_database`), so a sync caller's database work
  stays on its own thread and connection, as if it had run the turn itself. A
  `KeyboardInterrupt` or `SystemExit` arriving while it waits cancels the turn (giving it
  `CANCELLED_BY_INTERRUPT`), lets it finish its close, then propagates.
- `on_process_loop(coroutine)`: an async caller on any other loop (a fresh `asyncio.run`
  each time included) awaits the turn there; cancelling the caller cancels the turn with the
  caller's reason, waits for its close, then propagates.
- `relay`: an async generator living on the process loop, read from another loop: it runs
  there as one task, at most `RELAY_AHEAD` events ahead of its reader (events cross threads
  as they come, without a task or a round trip each); a reader that stops or is cancelled
  cancels it on its loop.
- `iterate_sync`: the same generator stepped from sync code, one step per item asked for;
  closing the consumer closes the generator on its loop.
- `on_database(func)`: how a turn runs a database phase: on the waiting sync caller's thread,
  else on a database worker thread (never on the loop).
- `cancel_reason(default)`: inside a turn, why it was cancelled.

LangChain wraps each middleware's `awrap_model_call` / `awrap_tool_call` in LangSmith's
`traceable`, which sets up and ends its (maybe) traced call on a worker thread: two thread
hops per model call and per tool call, tracing on or off. With tracing off there is nothing to
send, so the process loop's first start installs `inline_unless_tracing` as LangSmith's
`aio_to_thread` (its documented runtime override): inline while tracing is off, LangSmith's
own way while it is on.
"""

import asyncio
import collections
import concurrent.futures
import contextvars
import os
import queue
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from contextlib import aclosing
from typing import Any, ParamSpec, TypeVar

import langsmith
from langsmith.utils import tracing_is_enabled

from conversations.utils.connections import in_worker_thread

__all__ = [
    "CANCELLED_BY_INTERRUPT",
    "cancel_reason",
    "inline_unless_tracing",
    "iterate_sync",
    "on_database",
    "on_process_loop",
    "process_loop",
    "relay",
    "run_sync",
]

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")

# The `error` of a run whose sync caller was interrupted (Ctrl-C, or a signal's SystemExit).
CANCELLED_BY_INTERRUPT = "cancelled: the caller was interrupted ({kind})"

_loop: tuple[int, asyncio.AbstractEventLoop] | None = None
_loop_lock = threading.Lock()


async def inline_unless_tracing(
    default: Callable[..., Awaitable[Any]],
    ctx: contextvars.Context,
    func: Callable[..., Any],
    /,
    *args: Any,
    **kwargs: Any,
) -> Any:
    """LangSmith's `aio_to_thread`: `func` (the setup or end of a `traceable` call) run
    inline in `ctx` while tracing is off in it (then it does no I/O), else on LangSmith's
    thread as LangSmith would."""
    if ctx.run(tracing_is_enabled):
        return await default(ctx, func, *args, **kwargs)
    return ctx.run(func, *args, **kwargs)


def process_loop() -> asyncio.AbstractEventLoop:
    """This process's event loop, running in its daemon thread (started on first use, and
    again in a forked child, whose copy of the parent's thread does not run)."""
    global _loop
    with _loop_lock:
        if _loop is None or _loop[0] != os.getpid():
            langsmith.set_runtime_overrides(aio_to_thread=inline_unless_tracing)
            loop = asyncio.new_event_loop()
            threading.Thread(
                target=loop.run_forever, name=f"yuxi-loop-{os.getpid()}", daemon=True
            ).start()
            _loop = (os.getpid(), loop)
        return _loop[1]


class _CallerThread:
    """A sync caller's thread, serving the database phases of the turn it waits for."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], concurrent.futures.Future]] = (
            queue.SimpleQueue()
        )

    def submit(self, func: Callable[[], R]) -> "concurrent.futures.Future[R]":
        future: concurrent.futures.Future[R] = concurrent.futures.Future()
        self._jobs.put((func, future))
        return future

    def serve_until(self, done: concurrent.futures.Future) -> None:
        """Run submitted work here until `done` is settled."""
        done.add_done_callback(lambda _: self._jobs.put((_stop, concurrent.futures.Future())))
        while True:
            func, future = self._jobs.get()
            if func is _stop:
                return
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(func())
            except BaseException as exc:  # handed to the awaiting turn
                future.set_exception(exc)


def _stop() -> None:
    """The marker that ends `_CallerThread.serve_until`."""


class _Job:
    """One coroutine run as a task on the process loop, settled into `done` only once the
    task has finished (its cancellation handling included)."""

    def __init__(self, coroutine: Coroutine[Any, Any, Any], caller: _CallerThread | None):
        self.caller = caller
        self.reason: str | None = None
        self.done: concurrent.futures.Future = concurrent.futures.Future()
        self._task: asyncio.Task | None = None
        self._loop = process_loop()
        self._loop.call_soon_threadsafe(self._start, coroutine)

    def _start(self, coroutine: Coroutine[Any, Any, Any]) -> None:
        context = contextvars.copy_context()
        context.run(_JOB.set, self)
        self._task = self._loop.create_task(coroutine, context=context)
        self._task.add_done_callback(self._settle)

    def _settle(self, task: asyncio.Task) -> None:
        if task.cancelled():
            self.done.set_exception(asyncio.CancelledError(self.reason))
        elif task.exception() is not None:
            self.done.set_exception(task.exception())
        else:
            self.done.set_result(task.result())

    def cancel(self, reason: str | None) -> None:
        """Cancel the task (`reason`: what `cancel_reason` tells it); `done` settles once it
        has finished."""
        self.reason = reason
        self._loop.call_soon_threadsafe(self._cancel)

    def _cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()


_JOB: contextvars.ContextVar[_Job | None] = contextvars.ContextVar("yuxi_job", default=None)


def cancel_reason(default: str) -> str:
    """Inside a turn being cancelled: the reason its canceller gave, else `default`."""
    job = _JOB.get()
    return job.reason if job is not None and job.reason else default


def _refuse_on_process_loop() -> None:
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        return
    if running is _loop_of_process():
        raise RuntimeError("a sync entry point cannot be called on the process's event loop")


def _loop_of_process() -> asyncio.AbstractEventLoop | None:
    return _loop[1] if _loop is not None and _loop[0] == os.getpid() else None


def run_sync(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run `coroutine` on the process loop for a sync caller and return its result; the
    caller's thread serves its database phases meanwhile. A `KeyboardInterrupt` or
    `SystemExit` while waiting cancels it (`CANCELLED_BY_INTERRUPT`), waits for it to finish,
    and propagates."""
    _refuse_on_process_loop()
    caller = _CallerThread()
    job = _Job(coroutine, caller)
    try:
        caller.serve_until(job.done)
    except (KeyboardInterrupt, SystemExit) as exc:
        job.cancel(CANCELLED_BY_INTERRUPT.format(kind=type(exc).__name__))
        caller.serve_until(job.done)
        raise
    return job.done.result()


async def on_process_loop(coroutine: Coroutine[Any, Any, T], *, reason: str | None = None) -> T:
    """Await `coroutine` on the process loop from any loop. Cancelling the caller cancels it
    (telling it `reason`), waits until it has finished, and propagates."""
    if asyncio.get_running_loop() is _loop_of_process():
        return await coroutine
    job = _Job(coroutine, None)
    waiting = asyncio.wrap_future(job.done)
    try:
        return await asyncio.shield(waiting)
    except asyncio.CancelledError:
        if not job.done.done():
            job.cancel(reason)
            await asyncio.wait([waiting])
        if waiting.done() and not waiting.cancelled():
            waiting.exception()  # read (the job's own cancellation), so asyncio does not log it
        raise


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
    if reader_loop is _loop_of_process():
        async with aclosing(events):
            async for event in events:
                yield event
        return
    channel = _Channel(reader_loop)
    job = _Job(_pump(events, channel), None)
    try:
        while not isinstance(item := await channel.get(), _Ended):
            yield item
    except BaseException:
        if not job.done.done():
            job.cancel(reason)
            await _finished(job)
        raise
    if item.error is not None:
        raise item.error


async def _finished(job: _Job) -> None:
    """Until `job` has finished, its outcome dropped (its cancellation, expected). A
    cancellation of the waiting task meanwhile (one that arrived while the reader took a
    ready event, say) does not cut the wait short: it is passed on once the job is over."""
    finished = asyncio.wrap_future(job.done)
    interrupted = False
    while not finished.done():
        try:
            await asyncio.wait([finished])
        except asyncio.CancelledError:
            interrupted = True
    if not finished.cancelled():
        finished.exception()  # read, so not logged
    if interrupted:
        asyncio.current_task().cancel()


def iterate_sync(events: AsyncIterator[T]) -> Iterator[T]:
    """`events` (an async generator on the process loop) stepped from sync code, one step
    per item asked for; a consumer that stops reading closes it on its loop."""
    try:
        while True:
            try:
                event = run_sync(_anext(events))
            except StopAsyncIteration:
                return
            yield event
    finally:
        run_sync(events.aclose())


def on_database(func: Callable[P, R]) -> Callable[P, Awaitable[R]]:
    """`func` (database work) for a turn on the process loop: run on the thread of the sync
    caller waiting for the turn, if any (its connection and transaction, as if it ran the
    turn itself), else on a database worker thread. Never on the loop."""

    async def awaited(*args: P.args, **kwargs: P.kwargs) -> R:
        job = _JOB.get()
        if job is None or job.caller is None:
            return await in_worker_thread(func)(*args, **kwargs)
        return await asyncio.wrap_future(job.caller.submit(lambda: func(*args, **kwargs)))

    return awaited
