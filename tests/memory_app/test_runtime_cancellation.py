"""The cancellation policy, row by row, at every entry point, against a real HTTP model:
the consumer stops reading, the caller's task is cancelled, a sync caller is interrupted
(KeyboardInterrupt, SystemExit), the lease is lost, the model fails, a tool raises. Each row
gives the same final run status, `error` and stored rows wherever the turn was started."""

import asyncio
import io
import os
import signal
import threading
import time
from contextlib import aclosing, closing

import openai
import pytest
from django.core.management import CommandError, call_command
from django.db import DatabaseError
from langchain_core.messages import AIMessage
from langchain_openai import ChatOpenAI

from conversations import checkpoints, runs
from conversations.models import AgentRun, Message
from conversations.utils.connections import _database_workers, direct_connection
from memory_app.authorization import MemoryRunRefused
from memory_app.models import UserConfig
from memory_app.runtime import (
    ChatModelUnavailable,
    ChatRunLost,
    aagent_run,
    achat,
    agent_run,
    astream_chat,
    chat,
    service,
    stream_chat,
    team,
)
from memory_app.tools import RememberMemoryTool, build_memory_tools
from tests.factories import UserConfigFactory
from tests.memory_app.models import RecordingModel
from tests.wire_model import Reply, WireModel, call_reply, text_reply

pytestmark = pytest.mark.django_db(transaction=True)

BY_READER = "cancelled: the consumer stopped reading the stream"
BY_CALLER = "cancelled: the caller stopped waiting for the turn"
BY_KEYBOARD_INTERRUPT = "cancelled: the caller was interrupted (KeyboardInterrupt)"
CHAT_ENTRIES = ["chat", "achat", "stream_chat", "astream_chat", "manage.py chat"]
MESSAGE = "remember that I drink oolong tea"


@pytest.fixture
def wire(settings):
    with WireModel() as model:
        settings.LLM_BASE_URL = model.url
        settings.LLM_API_KEY = "local"
        settings.LLM_MODEL = "m"
        settings.LLM_MAX_RETRIES = 0
        yield model


@pytest.fixture
def user():
    return UserConfigFactory(enable_memory=True, user__username="mei").user


def chat_at(entry: str, user) -> object:
    """One turn of `user` started at `entry`: what it answered (a stream: its last event)."""
    if entry == "chat":
        return chat(user_id=user.pk, message=MESSAGE)
    if entry == "achat":
        return asyncio.run(achat(user_id=user.pk, message=MESSAGE))
    if entry == "stream_chat":
        return list(stream_chat(user_id=user.pk, message=MESSAGE))[-1]
    if entry == "astream_chat":

        async def events() -> list[dict]:
            return [e async for e in astream_chat(user_id=user.pk, message=MESSAGE)]

        return asyncio.run(events())[-1]
    call_command("chat", "--user", user.username, MESSAGE, stdout=io.StringIO())
    return None


def the_run(user) -> AgentRun:
    return AgentRun.objects.get(user=user)


def stored(user) -> list[str]:
    return list(Message.objects.filter(conversation__user=user).values_list("role", flat=True))


def memory_written(agents_file, user) -> bool:
    return agents_file(user.pk, "MEMORY.md").exists()


def cancelled_with(user, error: str) -> None:
    """The row of every cancellation: `cancelled` with its reason, the lease released, the
    user's message kept and nothing of the agent's stored."""
    run = the_run(user)
    assert (run.status, run.error, run.worker_id) == ("cancelled", error, None)
    assert stored(user) in (["user"], [])


# --- the consumer stops reading ------------------------------------------------------------


@pytest.mark.parametrize("entry", ["stream_chat", "astream_chat"])
def test_a_consumer_that_stops_reading_cancels_the_run(wire, user, entry):
    if entry == "stream_chat":
        with closing(stream_chat(user_id=user.pk, message=MESSAGE)) as events:
            assert next(events)["event"] == "run"
    else:

        async def read_one() -> None:
            async with aclosing(astream_chat(user_id=user.pk, message=MESSAGE)) as events:
                assert (await anext(events))["event"] == "run"

        asyncio.run(read_one())
    cancelled_with(user, BY_READER)
    assert stored(user) == ["user"]


# --- the caller's task is cancelled --------------------------------------------------------


async def cancelled_once(coroutine, *, when: threading.Event) -> None:
    """Run `coroutine` as a task, cancel it once `when` is set, and see it end cancelled."""
    task = asyncio.ensure_future(coroutine)
    while not when.is_set():
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.parametrize(
    ("entry", "error"),
    [("achat", BY_CALLER), ("astream_chat", BY_READER), ("aagent_run", BY_CALLER)],
)
def test_a_cancelled_caller_task_cancels_the_run(wire, user, entry, error):
    wire.script = lambda request: wire.think() or text_reply("too late")

    async def started() -> None:
        if entry == "achat":
            await achat(user_id=user.pk, message=MESSAGE)
        elif entry == "astream_chat":
            async for _ in astream_chat(user_id=user.pk, message=MESSAGE):
                pass
        else:
            async with aagent_run(user_id=user.pk, thread_id=None):
                model = ChatOpenAI(base_url=wire.url, api_key="local", model="m")
                await model.ainvoke("hi")

    asyncio.run(cancelled_once(started(), when=wire.thinking))  # while the model thinks
    cancelled_with(user, error)


# --- a sync caller is interrupted -----------------------------------------------------------


@pytest.fixture(params=[KeyboardInterrupt, SystemExit])
def interruption(request):
    """A signal that interrupts the main thread with this exception (SIGINT's own handler
    raises KeyboardInterrupt; a server's SIGTERM handler typically raises SystemExit)."""
    kind = request.param
    signum = signal.SIGINT if kind is KeyboardInterrupt else signal.SIGUSR1

    def interrupted(*_):
        raise kind

    previous = signal.signal(signum, interrupted)
    yield kind, signum
    signal.signal(signum, previous)


@pytest.mark.parametrize("entry", ["chat", "stream_chat", "manage.py chat", "agent_run"])
def test_an_interrupted_sync_caller_cancels_the_run_and_the_interruption_propagates(
    wire, user, entry, interruption
):
    kind, signum = interruption

    def interrupt_the_caller() -> None:
        os.kill(os.getpid(), signum)
        wire.think()

    wire.script = lambda request: interrupt_the_caller() or text_reply("too late")
    expected = CommandError if (entry, kind) == ("manage.py chat", KeyboardInterrupt) else kind
    with pytest.raises(expected) as raised:
        if entry == "agent_run":
            with agent_run(user_id=user.pk, thread_id=None):
                ChatOpenAI(base_url=wire.url, api_key="local", model="m").invoke("hi")
                time.sleep(10)  # the signal's handler interrupts the wait at once
        else:
            chat_at(entry, user)
    if expected is CommandError:
        assert raised.value.returncode == 130
    cancelled_with(user, f"cancelled: the caller was interrupted ({kind.__name__})")


# --- the lease is lost ---------------------------------------------------------------------


def take_over_the_lease(user) -> None:
    """Another worker takes the user's running run over (from its own connection); the
    process's lease keeper learns at its next beat that the lease is lost."""
    with direct_connection(autocommit=True) as conn:
        [(run_id,)] = conn.execute(
            "UPDATE conversations_agentrun SET worker_id = 'another-worker' "
            "WHERE user_id = %s AND status = 'running' RETURNING run_id::text",
            [user.pk],
        ).fetchall()
    lost = runs.lease_keeper().lost_event(run_id)
    runs.lease_keeper()._wake.set()  # beat now rather than a third of a lease from now
    assert lost.wait(30)


def lease_lost_row(user, agents_file) -> None:
    """The run is left to the reaper (still `running`, now another worker's): nothing of the
    agent's is stored, no memory written."""
    run = the_run(user)
    assert (run.status, run.worker_id) == ("running", "another-worker")
    assert stored(user) in (["user"], [])
    assert not memory_written(agents_file, user)


@pytest.mark.parametrize("entry", CHAT_ENTRIES)
def test_a_lost_lease_stops_the_turn_and_leaves_the_run_to_the_reaper(
    wire, user, entry, agents_file
):
    def lose_then_ask_to_write(request):
        take_over_the_lease(user)
        return call_reply("remember_memory", {"content": "written after"})

    wire.script = lose_then_ask_to_write
    answers = {
        "stream_chat": "the run was interrupted, try again",
        "astream_chat": "the run was interrupted, try again",
    }
    if entry in answers:
        assert chat_at(entry, user) == {
            "event": "error",
            "error": answers[entry],
            "status_code": 503,
        }
    else:
        with pytest.raises(CommandError if entry == "manage.py chat" else ChatRunLost):
            chat_at(entry, user)
    assert len(wire.requests) == 1  # no model call after the loss
    lease_lost_row(user, agents_file)


@pytest.mark.parametrize("entry", ["agent_run", "aagent_run"])
def test_a_lost_lease_in_a_teams_run_raises_at_its_end_and_leaves_it_to_the_reaper(
    user, entry, agents_file
):
    if entry == "agent_run":
        with pytest.raises(ChatRunLost), agent_run(user_id=user.pk, thread_id=None) as run:
            take_over_the_lease(user)
            assert run.lease_lost.is_set()
    else:

        async def team_loop() -> None:
            async with aagent_run(user_id=user.pk, thread_id=None) as run:
                await asyncio.to_thread(take_over_the_lease, user)
                assert run.lease_lost.is_set()

        with pytest.raises(ChatRunLost):
            asyncio.run(team_loop())
    lease_lost_row(user, agents_file)


# --- the model fails -----------------------------------------------------------------------


@pytest.mark.parametrize("entry", CHAT_ENTRIES)
def test_a_failed_model_call_fails_the_run_and_keeps_the_user_message(wire, user, entry):
    wire.script = lambda request: Reply(status=500)
    if entry in ("stream_chat", "astream_chat"):
        assert chat_at(entry, user) == {
            "event": "error",
            "error": "the model is unavailable, try again",
            "status_code": 502,
        }
    else:
        with pytest.raises(CommandError if entry == "manage.py chat" else ChatModelUnavailable):
            chat_at(entry, user)
    run = the_run(user)
    assert (run.status, run.worker_id) == ("failed", None)
    assert run.error.startswith("the model call to m at 127.0.0.1:")
    assert run.error.endswith(", HTTP 500)")
    assert stored(user) == ["user"]


@pytest.mark.parametrize("entry", ["agent_run", "aagent_run"])
def test_a_teams_failed_model_call_fails_its_run_and_propagates(wire, user, entry):
    wire.script = lambda request: Reply(status=500)
    model = ChatOpenAI(base_url=wire.url, api_key="local", model="m", max_retries=0)
    with pytest.raises(Exception) as raised:
        if entry == "agent_run":
            with agent_run(user_id=user.pk, thread_id=None):
                model.invoke("hi")
        else:

            async def team_loop() -> None:
                async with aagent_run(user_id=user.pk, thread_id=None):
                    await model.ainvoke("hi")

            asyncio.run(team_loop())
    assert isinstance(raised.value.__cause__ or raised.value, openai.InternalServerError)
    run = the_run(user)
    kind = type(raised.value).__name__
    assert (run.status, run.error, run.worker_id) == ("failed", f"internal error ({kind})", None)


# --- a tool raises -------------------------------------------------------------------------


class ToolBug(RuntimeError):
    """A tool's own bug, raised from inside its call."""


@pytest.fixture
def remember_raises(monkeypatch):
    def broken(self, arguments, ctx, **call):
        raise ToolBug("boom")

    monkeypatch.setattr(RememberMemoryTool, "_call", broken)


@pytest.mark.parametrize("entry", CHAT_ENTRIES)
def test_a_tool_that_raises_fails_the_run_and_stores_no_step_of_it(
    wire, user, entry, remember_raises, agents_file
):
    wire.script = lambda request: call_reply("remember_memory", {"content": "x"})
    if entry in ("stream_chat", "astream_chat"):
        assert chat_at(entry, user) == {
            "event": "error",
            "error": "internal error",
            "status_code": 500,
        }
    else:
        with pytest.raises(ToolBug):
            chat_at(entry, user)
    run = the_run(user)
    assert (run.status, run.error, run.worker_id) == ("failed", "internal error (ToolBug)", None)
    assert stored(user) == ["user"]
    assert not memory_written(agents_file, user)


@pytest.mark.parametrize("entry", ["agent_run", "aagent_run"])
def test_a_teams_tool_that_raises_fails_its_run_and_propagates(user, entry, remember_raises):
    def call_the_tool(run) -> None:
        remember = build_memory_tools(run.ctx)[0]
        remember.invoke({"content": "x"})

    with pytest.raises(ToolBug):
        if entry == "agent_run":
            with agent_run(user_id=user.pk, thread_id=None) as run:
                call_the_tool(run)
        else:

            async def team_loop() -> None:
                async with aagent_run(user_id=user.pk, thread_id=None) as run:
                    await asyncio.to_thread(call_the_tool, run)

            asyncio.run(team_loop())
    run = the_run(user)
    assert (run.status, run.error, run.worker_id) == ("failed", "internal error (ToolBug)", None)


class BusyWorkers:
    """The process's database worker threads, all kept busy on demand, so the next database
    hop of a turn waits in their queue."""

    def __init__(self) -> None:
        self.workers = _database_workers(os.getpid())
        self.release = threading.Event()
        self.occupied = threading.Event()

    def occupy(self) -> None:
        """Every worker thread waits on `release` once this returns, so a hop queued after it
        is one of the turn's (not one of these, still on their way to a thread)."""
        count = self.workers._max_workers
        started = threading.Semaphore(0)

        def hold() -> None:
            started.release()
            self.release.wait(10)

        for _ in range(count):
            self.workers.submit(hold)
        for _ in range(count):
            assert started.acquire(timeout=10), "a database worker thread stayed busy"
        self.occupied.set()

    async def cancel_once_queued(self, task: asyncio.Future) -> None:
        """Cancel `task` once a hop waits behind the threads `occupy` made busy (not one of
        the hops before, on its way to an idle thread), then free them; `task` ends
        cancelled."""
        deadline = time.monotonic() + 10
        while not self.occupied.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        while not self.workers._work_queue.qsize() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.sleep(0.05)
        self.release.set()
        with pytest.raises(asyncio.CancelledError):
            await task


@pytest.fixture
def busy_workers():
    busy = BusyWorkers()
    yield busy
    busy.release.set()


def test_a_teams_run_cancelled_while_its_finish_waits_for_a_worker_thread_is_still_finished(
    user, busy_workers
):
    """The caller's task is cancelled while the run's finish waits behind busy database
    worker threads: the finish still runs (the run is `succeeded`: its body had ended), then
    the cancellation propagates. Abandoned there, the finish would never run and the run would
    stay `running`, renewed by the lease keeper."""
    opened: list[str] = []

    async def team() -> None:
        async with aagent_run(user_id=user.pk, thread_id=None) as run:
            opened.append(run.run_id)
            busy_workers.occupy()
        raise AssertionError("the exit was not cancelled")

    async def scenario() -> None:
        await busy_workers.cancel_once_queued(asyncio.ensure_future(team()))

    asyncio.run(scenario())
    run = AgentRun.objects.get(run_id=opened[0])
    assert (run.status, run.worker_id) == ("succeeded", None)
    assert runs.lease_keeper().lost_event(run.run_id) is None  # no longer renewed


def test_a_turn_cancelled_while_its_close_waits_for_a_worker_thread_is_still_closed(
    user, busy_workers
):
    """`achat`'s task is cancelled once the agent has answered, while the turn's close waits
    behind busy database worker threads: the close still runs (`succeeded`, the reply stored),
    then the cancellation propagates."""
    model = RecordingModel(
        replies=[AIMessage("hello")], before_step=lambda step: busy_workers.occupy()
    )

    async def scenario() -> None:
        task = asyncio.ensure_future(achat(user_id=user.pk, message="hi", model=model))
        await busy_workers.cancel_once_queued(task)

    asyncio.run(scenario())
    run = AgentRun.objects.get(user=user)
    assert (run.status, run.worker_id, run.error) == ("succeeded", None, "")
    stored = Message.objects.filter(conversation=run.conversation).order_by("created_at", "id")
    assert list(stored.values_list("role", "content")) == [("user", "hi"), ("assistant", "hello")]
    assert runs.lease_keeper().lost_event(run.run_id) is None  # no longer renewed


# --- a team's run stopped after it opened, before it was handed over -------------------------


class BlockedApprovalCheck:
    """The run's approval check (after the open, before the run is handed to the team) held on
    its database thread until `release`d."""

    def __init__(self, monkeypatch) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        monkeypatch.setattr(team, "grant_memory_run", self.grant)

    def grant(self, ctx, *, lock):
        self.entered.set()
        assert self.release.wait(10)
        raise MemoryRunRefused("memory is off")


@pytest.fixture
def blocked_approval_check(monkeypatch):
    blocked = BlockedApprovalCheck(monkeypatch)
    yield blocked
    blocked.release.set()


def the_run_is_over(user) -> AgentRun:
    run = the_run(user)
    assert run.worker_id is None
    assert runs.lease_keeper().lost_event(str(run.run_id)) is None  # no longer renewed
    return run


def test_a_teams_run_cancelled_while_it_checks_for_approval_is_cancelled(
    user, blocked_approval_check
):
    """`aagent_run`'s caller is cancelled after the open, while the approval check runs: the
    run is cancelled (left there, it would stay `running`, renewed by the lease keeper)."""

    async def team_loop() -> None:
        async with aagent_run(user_id=user.pk, thread_id=None):
            raise AssertionError("the run was handed over")

    asyncio.run(cancelled_once(team_loop(), when=blocked_approval_check.entered))
    assert (the_run_is_over(user).status, the_run(user).error) == ("cancelled", BY_CALLER)


def test_a_teams_run_interrupted_while_it_checks_for_approval_is_cancelled(user, monkeypatch):
    """Ctrl-C reaches `agent_run`'s thread while it runs the approval check: the run is
    cancelled with the interruption as its reason, and the interruption propagates."""

    def interrupted(ctx, *, lock):
        raise KeyboardInterrupt

    monkeypatch.setattr(team, "grant_memory_run", interrupted)
    with pytest.raises(KeyboardInterrupt), agent_run(user_id=user.pk, thread_id=None):
        raise AssertionError("the run was handed over")
    run = the_run_is_over(user)
    assert (run.status, run.error) == ("cancelled", BY_KEYBOARD_INTERRUPT)


@pytest.mark.parametrize("where", ["the approval check", "the checkpointer"])
@pytest.mark.parametrize("entry", ["agent_run", "aagent_run"])
def test_a_database_failure_before_a_teams_run_is_handed_over_fails_it(
    user, monkeypatch, entry, where
):
    """The database fails after the open, before the run is handed to the team (its approval
    check, or the checkpointer a run with approval needs): the run is failed with the error,
    and the error propagates."""

    def fails(*args, **kwargs):
        raise DatabaseError("the database went away")

    async def afails(*args, **kwargs):
        fails()

    UserConfig.objects.filter(user=user).update(memory_write_approval=True)
    if where == "the approval check":
        monkeypatch.setattr(team, "grant_memory_run", fails)
    else:
        monkeypatch.setattr(checkpoints, "checkpointer", fails)
        monkeypatch.setattr(checkpoints, "async_checkpointer", afails)

    async def team_loop() -> None:
        async with aagent_run(user_id=user.pk, thread_id=None):
            raise AssertionError("the run was handed over")

    with pytest.raises(DatabaseError, match="went away"):
        if entry == "agent_run":
            with agent_run(user_id=user.pk, thread_id=None):
                raise AssertionError("the run was handed over")
        else:
            asyncio.run(team_loop())
    run = the_run_is_over(user)
    assert (run.status, run.error) == ("failed", "internal error (DatabaseError)")


def test_a_teams_run_opened_just_as_its_caller_is_cancelled_is_cancelled(user, monkeypatch):
    """The caller's task is cancelled once the open has returned on the process loop, before
    the caller took its run: too late to cancel the open, the run it opened is closed
    (cancelled) all the same, not left `running`."""
    opening, closing = team._aopen_agent_run, team._close_untaken
    returned = threading.Event()
    undone: list[str] = []

    async def opened(**arguments):
        result = await opening(**arguments)
        returned.set()
        return result

    def close_untaken(opened, stopped):
        undone.append(type(stopped).__name__)
        return closing(opened, stopped)

    monkeypatch.setattr(team, "_aopen_agent_run", opened)
    monkeypatch.setattr(team, "_close_untaken", close_untaken)

    async def cancel_as_the_open_returns() -> None:
        me, loop = asyncio.current_task(), asyncio.get_running_loop()

        def cancel_once_it_returned() -> None:
            assert returned.wait(10)  # the caller's loop is held while the open returns
            me.cancel()

        loop.call_soon(cancel_once_it_returned)
        async with aagent_run(user_id=user.pk, thread_id=None):
            raise AssertionError("the run was handed over")

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(cancel_as_the_open_returns())
    assert undone == ["CancelledError"]  # the open's result was undone, not cancelled
    run = the_run_is_over(user)
    assert (run.status, run.error) == ("cancelled", BY_CALLER)


# --- an interruption inside the close's own step ---------------------------------------------


def interrupted_once(close):
    """`close`, except that its first call is interrupted (Ctrl-C landing inside the step)."""
    calls: list[int] = []

    def step(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return close(*args, **kwargs)

    return step


@pytest.mark.parametrize("entry", ["chat", "agent_run"])
def test_a_sync_caller_interrupted_inside_the_close_cancels_the_run(user, monkeypatch, entry):
    """Ctrl-C lands inside the close's own step on the caller's thread (its transaction rolls
    back): the run is cancelled in its place, as for any interruption, not left for the
    reaper to fail once its lease expires."""
    with pytest.raises(KeyboardInterrupt):
        if entry == "chat":
            monkeypatch.setattr(service, "close_turn", interrupted_once(service.close_turn))
            chat(user_id=user.pk, message="hi")
        else:
            monkeypatch.setattr(team, "close_agent_run", interrupted_once(team.close_agent_run))
            with agent_run(user_id=user.pk, thread_id=None):
                pass
    run = the_run_is_over(user)
    assert (run.status, run.error) == ("cancelled", BY_KEYBOARD_INTERRUPT)
    assert stored(user) in (["user"], [])
