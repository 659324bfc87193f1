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
- `on_database(func)`: how a turn runs a database phase: on the waiting sync caller's thread,
  else on a database worker thread (never on the loop).
- `cancel_reason(default)`: inside a turn, why it was cancelled.

An event stream produced on the process loop reaches its reader through `relay`
(`memory_app.runtime.concurrency.relay`).

LangChain wraps each middleware's `awrap_model_call` / `awrap_tool_call` in LangSmith's
`traceable`, which sets up and ends its (maybe) traced call on a worker thread: two thread
hops per model call and per tool call, tracing on or off. With tracing off there is nothing to
send, so the process loop's first start installs `inline_unless_tracing` as LangSmith's
`aio_to_thread` (its documented runtime override): inline while tracing is off, LangSmith's
own way while it is on.
"""

import asyncio
import concurrent.futures
import contextvars
import functools
import logging
import os
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

import langsmith
from langsmith.utils import tracing_is_enabled

from conversations.utils.connections import in_worker_thread
from memory_app.runtime.concurrency.caller_thread import CallerThread

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")

logger = logging.getLogger("yuxi.runs")

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


class Job:
    """One coroutine run as a task on the process loop, settled into `done` only once the
    task has finished (its cancellation handling included)."""

    def __init__(
        self,
        coroutine: Coroutine[Any, Any, Any],
        caller: CallerThread | None,
        context: contextvars.Context | None = None,
    ):
        self.caller = caller
        self.reason: str | None = None
        self._context = context
        self.done: concurrent.futures.Future = concurrent.futures.Future()
        self._task: asyncio.Task | None = None
        self._loop = process_loop()
        self._loop.call_soon_threadsafe(self._start, coroutine)

    def _start(self, coroutine: Coroutine[Any, Any, Any]) -> None:
        context = self._context if self._context is not None else contextvars.copy_context()
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


_JOB: contextvars.ContextVar[Job | None] = contextvars.ContextVar("yuxi_job", default=None)


def cancel_reason(default: str) -> str:
    """Inside a turn being cancelled: the reason its canceller gave, else `default`."""
    job = _JOB.get()
    return job.reason if job is not None and job.reason else default


def _refuse_on_process_loop() -> None:
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        return
    if running is loop_of_process():
        raise RuntimeError("a sync entry point cannot be called on the process's event loop")


def loop_of_process() -> asyncio.AbstractEventLoop | None:
    return _loop[1] if _loop is not None and _loop[0] == os.getpid() else None


# What undoes a result its caller will not take (given the result and what stopped the
# caller): a coroutine run on the process loop.
Undo = Callable[[Any, BaseException], Coroutine[Any, Any, Any]]


def _untaken(done: concurrent.futures.Future | asyncio.Future) -> tuple[bool, Any]:
    """Whether a finished job returned a result (and which), reading its error otherwise so
    that asyncio does not log it: the job's own cancellation, expected."""
    if done.cancelled() or done.exception() is not None:
        return False, None
    return True, done.result()


def run_sync(
    coroutine: Coroutine[Any, Any, T],
    *,
    undo: Undo | None = None,
    context: contextvars.Context | None = None,
) -> T:
    """Run `coroutine` on the process loop for a sync caller and return its result; the
    caller's thread serves its database phases meanwhile; it runs in `context` (default: a
    copy of the caller's context variables). A `KeyboardInterrupt` or `SystemExit` while
    waiting cancels it (`CANCELLED_BY_INTERRUPT`), waits for it to finish (a second one does
    not cut that short), and propagates; if it had returned all the same (the interruption
    came as it ended), `undo(result, interruption)` runs first: a run it opened would
    otherwise stay open with nobody to close it."""
    _refuse_on_process_loop()
    caller = CallerThread()
    job = Job(coroutine, caller, context)

    def cancel(exc: BaseException) -> None:
        job.cancel(CANCELLED_BY_INTERRUPT.format(kind=type(exc).__name__))

    interruption = caller.serve_until(job.done, cancel)
    if interruption is None:
        return job.done.result()
    returned, result = _untaken(job.done)
    if returned and undo is not None:
        try:
            run_sync(undo(result, interruption))
        except Exception:  # the caller gets its interruption; the failure is told here
            logger.warning("undoing an interrupted caller's result failed", exc_info=True)
    raise interruption


async def on_process_loop(
    coroutine: Coroutine[Any, Any, T], *, reason: str | None = None, undo: Undo | None = None
) -> T:
    """Await `coroutine` on the process loop from any loop. Cancelling the caller cancels it
    (telling it `reason`), waits until it has finished, and propagates; if it had returned
    all the same (the cancellation came as it ended), `undo(result, cancellation)` runs first,
    to its end, on the process loop."""
    if asyncio.get_running_loop() is loop_of_process():
        return await coroutine
    job = Job(coroutine, None)
    waiting = asyncio.wrap_future(job.done)
    try:
        return await asyncio.shield(waiting)
    except asyncio.CancelledError as exc:
        waiting.add_done_callback(_untaken)  # its outcome is read below, from `job.done`
        if not job.done.done():
            job.cancel(reason)
            await until_finished(job)
        returned, result = _untaken(job.done)
        if returned and undo is not None:
            undoing = Job(undo(result, exc), None)
            await until_finished(undoing)
            if not undoing.done.cancelled() and undoing.done.exception() is not None:
                failure = undoing.done.exception()
                logger.warning("undoing a cancelled caller's result failed", exc_info=failure)
        raise


async def until_finished(job: Job) -> None:
    """Until `job` has finished, its outcome dropped (its cancellation, expected). A
    cancellation of the waiting task meanwhile (one that arrived while a relay's reader took
    a ready event, say) does not cut the wait short: it is passed on once the job is over."""
    finished = asyncio.wrap_future(job.done)
    interrupted = False
    while not finished.done():
        try:
            await asyncio.wait([finished])
        except asyncio.CancelledError:
            interrupted = True
    _untaken(finished)
    if interrupted:
        asyncio.current_task().cancel()


def on_database(func: Callable[P, R]) -> Callable[P, Awaitable[R]]:
    """`func` (database work) for a turn on the process loop: run on the thread of the sync
    caller waiting for the turn, if any (its connection and transaction, as if it ran the
    turn itself), else on a database worker thread. Never on the loop. Either way it runs in
    a copy of the turn's context variables (`cancel_reason` included)."""

    async def awaited(*args: P.args, **kwargs: P.kwargs) -> R:
        job = _JOB.get()
        if job is None or job.caller is None:
            return await in_worker_thread(func)(*args, **kwargs)
        call = functools.partial(contextvars.copy_context().run, func, *args, **kwargs)
        return await asyncio.wrap_future(job.caller.submit(call))

    return awaited
