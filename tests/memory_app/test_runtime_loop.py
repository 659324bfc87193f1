"""The process's event loop: turns run on one loop whoever calls them, so a model client's
connection pool (bound to the loop that opened it) works on every call; sync callers keep
their database work on their own thread; a caller's cancellation reaches the turn."""

import asyncio
import concurrent.futures
import contextlib
import contextvars
import os
import signal
import threading
import time

import langsmith
import pytest

from conversations.models import AgentRun
from memory_app.runtime import achat, astream_chat, chat, stream_chat
from memory_app.runtime.concurrency.loop import (
    CANCELLED_BY_INTERRUPT,
    cancel_reason,
    inline_unless_tracing,
    on_database,
    on_process_loop,
    process_loop,
    run_sync,
)
from memory_app.runtime.concurrency.relay import RELAY_AHEAD, iterate_sync, relay
from memory_app.runtime.concurrency.settling import to_the_end
from tests.factories import UserFactory, memory_user
from tests.wire_model import text_reply

# What the wire model (the `wire_model` fixture) answers these turns.
WIRE_REPLY = "hello from the wire"


def _run_status(run_id: str) -> tuple[str, str]:
    run = AgentRun.objects.get(run_id=run_id)
    return run.status, run.error


@pytest.mark.django_db(transaction=True)
def test_achat_in_a_fresh_asyncio_run_each_time_succeeds_every_time(wire_model):
    wire_model.answer(*[text_reply(WIRE_REPLY)] * 3)
    user = UserFactory()
    turns = [asyncio.run(achat(user_id=user.pk, message=f"hello {i}")) for i in range(3)]
    assert [(t.status, t.reply) for t in turns] == [("succeeded", WIRE_REPLY)] * 3
    assert [_run_status(t.run_id) for t in turns] == [("succeeded", "")] * 3


@pytest.mark.django_db(transaction=True)
def test_stream_chat_called_again_and_again_in_one_process_succeeds_every_time(wire_model):
    wire_model.answer(*[text_reply(WIRE_REPLY)] * 3)
    user = UserFactory()
    for i in range(3):
        events = list(stream_chat(user_id=user.pk, message=f"hello {i}"))
        assert events[-1]["event"] == "done", events[-1]
        assert "".join(e["text"] for e in events if e["event"] == "token") == WIRE_REPLY


@pytest.mark.django_db(transaction=True)
def test_every_entry_point_in_any_order_shares_one_model_connection_pool(wire_model):
    user = UserFactory()

    async def streamed() -> list[dict]:
        return [event async for event in astream_chat(user_id=user.pk, message="hi")]

    assert chat(user_id=user.pk, message="hi").status == "succeeded"
    assert asyncio.run(achat(user_id=user.pk, message="hi")).status == "succeeded"
    assert list(stream_chat(user_id=user.pk, message="hi"))[-1]["event"] == "done"
    assert asyncio.run(streamed())[-1]["event"] == "done"
    assert chat(user_id=user.pk, message="hi").status == "succeeded"
    assert len(wire_model.requests) == 5


def test_the_process_loop_is_one_loop_in_a_daemon_thread_for_every_caller():
    async def running() -> asyncio.AbstractEventLoop:
        return asyncio.get_running_loop()

    loop = process_loop()
    assert run_sync(running()) is loop
    assert asyncio.run(on_process_loop(running())) is loop
    assert process_loop() is loop
    [thread] = [t for t in threading.enumerate() if t.name == f"yuxi-loop-{os.getpid()}"]
    assert thread.daemon


def test_a_forked_child_starts_its_own_process_loop():
    parent = process_loop()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its copy of the parent's loop thread does not run
        try:

            async def running() -> int:
                return id(asyncio.get_running_loop())

            answer = b"ok" if run_sync(running()) != id(parent) else b"same loop"
        except BaseException:
            answer = b"failed"
        os.write(write, answer)
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    assert os.read(read, 100) == b"ok"


@pytest.fixture
def thread_hops(monkeypatch):
    """Every piece of work handed to a thread pool from now on (a spy: the work still runs)."""
    handed = []
    real = concurrent.futures.ThreadPoolExecutor.submit

    def counting(self, fn, /, *args, **kwargs):
        handed.append(fn)
        return real(self, fn, *args, **kwargs)

    monkeypatch.setattr(concurrent.futures.ThreadPoolExecutor, "submit", counting)
    return handed


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("message", "hops"),
    # open, prepare and close; a remember turn adds its tool call (two model calls, no hop)
    [("hello", 3), ("remember that I like tea", 4)],
)
def test_a_streamed_turn_hops_threads_only_for_its_database_work(
    wire_model, thread_hops, message, hops
):
    user = memory_user()

    async def turn(thread_id: str | None) -> list[dict]:
        return [
            event
            async for event in astream_chat(user_id=user.pk, message=message, thread_id=thread_id)
        ]

    first = asyncio.run(turn(None))  # the first turn of its shape compiles its graph
    thread_hops.clear()
    events = asyncio.run(turn(first[0]["thread_id"]))
    assert events[-1]["event"] == "done" and events[-1]["status"] == "succeeded"
    assert len(thread_hops) == hops


def test_langsmiths_calls_run_inline_while_tracing_is_off_and_its_own_way_when_on():
    process_loop()  # installs the override
    done_by_default = []

    async def default(ctx, func, *args, **kwargs):
        done_by_default.append(func)
        return ctx.run(func, *args, **kwargs)

    def whose_thread() -> str:
        return threading.current_thread().name

    here = threading.current_thread().name
    with langsmith.tracing_context(enabled=False):
        off = contextvars.copy_context()
    ran_on = asyncio.run(inline_unless_tracing(default, off, whose_thread))
    assert ran_on == here and done_by_default == []
    with langsmith.tracing_context(enabled=True):
        on = contextvars.copy_context()
    asyncio.run(inline_unless_tracing(default, on, whose_thread))
    assert done_by_default == [whose_thread]
    assert langsmith._runtime_overrides._runtime_overrides.aio_to_thread is inline_unless_tracing


class _Produced:
    """An async generator for the process loop that records what it yielded and how it
    ended (the reason `cancel_reason` gave it, if it was stopped)."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.yielded = 0
        self.ended: str | None = None

    async def events(self):
        try:
            for index in range(self.count):
                self.yielded = index + 1
                yield index
                await asyncio.sleep(0)
        except (asyncio.CancelledError, GeneratorExit):
            self.ended = cancel_reason("no reason given")
            raise
        self.ended = "finished"


def test_a_relayed_generator_runs_at_most_relay_ahead_events_ahead_of_a_slow_reader():
    produced = _Produced(RELAY_AHEAD * 3)

    async def read() -> tuple[list[int], int]:
        received, furthest_ahead = [], 0
        async for event in relay(produced.events()):
            await asyncio.sleep(0.002)  # a slow reader: the generator fills the window
            furthest_ahead = max(furthest_ahead, produced.yielded - len(received))
            received.append(event)
        return received, furthest_ahead

    received, furthest_ahead = asyncio.run(read())
    assert received == list(range(RELAY_AHEAD * 3))  # every event, in order
    assert furthest_ahead <= RELAY_AHEAD + 1
    assert furthest_ahead >= RELAY_AHEAD // 2  # it did run ahead while the reader was slow
    assert produced.ended == "finished"


_SET_IN_A_STEP: contextvars.ContextVar[str] = contextvars.ContextVar("set_in_a_step")


def test_a_generator_stepped_from_sync_code_keeps_what_it_set_in_its_context_across_steps():
    async def events():
        _SET_IN_A_STEP.set("set in the first step")
        yield 1
        yield _SET_IN_A_STEP.get("lost")  # a later step, a later task on the process loop

    assert list(iterate_sync(events())) == [1, "set in the first step"]
    assert _SET_IN_A_STEP.get("not the caller's") == "not the caller's"


@pytest.mark.parametrize("how", ["stops reading", "is cancelled"])
def test_a_reader_that_stops_or_is_cancelled_stops_the_generator_with_its_reason(how):
    produced = _Produced(10_000)

    async def read_three() -> None:
        async with contextlib.aclosing(relay(produced.events(), reason="the reader left")) as ev:
            for _ in range(3):
                await anext(ev)
            if how == "is cancelled":
                asyncio.current_task().cancel()
                await anext(ev)

    if how == "is cancelled":
        with pytest.raises(asyncio.CancelledError):
            asyncio.run(read_three())
    else:
        asyncio.run(read_three())
    assert produced.ended == "the reader left"
    assert produced.yielded < 10_000  # stopped where it was, well before its end


def test_what_a_relayed_generator_raises_reaches_its_reader_after_its_events():
    async def failing():
        yield "first"
        raise LookupError("gone")

    async def read() -> list[str]:
        received = []
        with pytest.raises(LookupError, match="gone"):
            async for event in relay(failing()):
                received.append(event)
        return received

    assert asyncio.run(read()) == ["first"]


@pytest.fixture
def interrupt_on_sigusr1():
    """SIGUSR1 raises KeyboardInterrupt in the main thread, as SIGINT's own handler would."""

    def interrupted(*_):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGUSR1, interrupted)
    yield
    signal.signal(signal.SIGUSR1, previous)


def test_a_sync_caller_interrupted_inside_a_database_phase_cancels_the_turn_not_the_loop():
    """Ctrl-C while the caller's own thread runs one of the turn's database phases: the turn
    is cancelled with the interruption as its reason, a phase it awaits to the end ends too,
    and the process loop goes on serving turns (raised inside the turn's task, the
    KeyboardInterrupt would have stopped the loop, and every later turn would wait forever)."""
    seen: list[str] = []

    def interrupted_phase() -> None:
        raise KeyboardInterrupt

    async def turn() -> None:
        try:
            await to_the_end(on_database(interrupted_phase)())
        except asyncio.CancelledError:
            seen.append(cancel_reason("no reason given"))
            raise

    with pytest.raises(KeyboardInterrupt):
        run_sync(turn())
    assert seen == [CANCELLED_BY_INTERRUPT.format(kind="KeyboardInterrupt")]
    assert process_loop().is_running()
    assert run_sync(asyncio.sleep(0, result="still serving")) == "still serving"


def test_a_sync_caller_interrupted_as_the_coroutine_returns_has_its_result_undone(
    interrupt_on_sigusr1,
):
    """The interruption reaches the caller in the very step the coroutine returns (too late
    to cancel it): `undo` gets the result it will never see, and the interruption goes on."""
    undone: list[tuple[int, type]] = []

    async def returns() -> int:
        await asyncio.sleep(0.1)  # the caller is waiting by now
        os.kill(os.getpid(), signal.SIGUSR1)  # handled on the waiting main thread ...
        time.sleep(0.2)  # ... while this step, which nothing can cancel any more, goes on
        return 7

    async def undo(result: int, stopped: BaseException) -> None:
        undone.append((result, type(stopped)))

    with pytest.raises(KeyboardInterrupt):
        run_sync(returns(), undo=undo)
    assert undone == [(7, KeyboardInterrupt)]


def test_an_async_caller_cancelled_as_the_coroutine_returns_has_its_result_undone():
    """The caller's task is cancelled in the very step the coroutine returns on the process
    loop: `undo` gets the result, runs to its end, and the cancellation goes on."""
    undone: list[tuple[int, type]] = []

    async def caller() -> None:
        me, loop = asyncio.current_task(), asyncio.get_running_loop()

        async def returns() -> int:
            loop.call_soon_threadsafe(me.cancel)
            return 7

        async def undo(result: int, stopped: BaseException) -> None:
            await asyncio.sleep(0.05)  # not cut short by the caller's cancellation
            undone.append((result, type(stopped)))

        await on_process_loop(returns(), undo=undo)

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(caller())
    assert undone == [(7, asyncio.CancelledError)]


class Unusual(BaseException):
    """A BaseException that is neither an interruption nor a cancellation."""


def test_any_other_base_exception_of_a_database_phase_is_handed_to_the_turn():
    """Only an interruption stays with the caller's thread; anything else a step raises (a
    test's failure, a GeneratorExit) reaches the turn awaiting it, as an Exception does."""

    def unusual_phase() -> None:
        raise Unusual

    async def turn() -> str:
        try:
            await on_database(unusual_phase)()
        except Unusual:
            return "handed over"
        return "not raised"

    assert run_sync(turn()) == "handed over"


def test_a_second_interruption_while_the_turn_closes_does_not_cut_its_close_short():
    """Ctrl-C twice: the first cancels the turn, the second lands in a step of its cancel.
    That step ends cancelled, the rest of the close is still served on the caller's thread,
    and the first interruption propagates once the turn has finished."""
    closed: list[str] = []

    def interrupted_phase() -> None:
        raise KeyboardInterrupt

    async def turn() -> None:
        try:
            await on_database(interrupted_phase)()
        except asyncio.CancelledError:
            with contextlib.suppress(asyncio.CancelledError):
                await on_database(interrupted_phase)()
            await on_database(closed.append)("closed")
            raise

    with pytest.raises(KeyboardInterrupt):
        run_sync(turn())
    assert closed == ["closed"]
    assert run_sync(asyncio.sleep(0, result="still serving")) == "still serving"
