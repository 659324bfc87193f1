"""The runtime from async code: `achat`, `aagent_run`, the chatbot graph under `ainvoke` and
`astream`, the run guard's async hooks, and an event loop that a memory write never blocks."""

import asyncio
import contextvars
import json
import threading
import time
from pathlib import Path

import pytest
from django.db import connection
from django.test import AsyncRequestFactory
from langchain_core.messages import HumanMessage

from conversations import runs
from conversations.models import AgentRun, Message, ToolCall
from conversations.runs.keeper import LeaseKeeper
from conversations.utils.connections import direct_connection, in_worker_thread
from memory_app.llm import ScriptedChatModel
from memory_app.runtime import (
    ChatRunLost,
    ChatThreadNotFound,
    aagent_run,
    achat,
    build_chatbot_graph,
    chat,
)
from tests.factories import ConversationFactory, UserConfigFactory
from tests.memory_app.models import RecordingModel, tool_reply

# The turn's database work runs on worker threads, which cannot see a test's transaction.
pytestmark = pytest.mark.django_db(transaction=True)


def memory_user(enable_memory: bool = True):
    return UserConfigFactory(enable_memory=enable_memory).user


def memory_text(agents_file, user) -> str:
    path = agents_file(user.pk, "MEMORY.md")
    return path.read_text() if path.exists() else ""


# --- achat ----------------------------------------------------------------------------------


def test_achat_remembers_from_inside_asyncio_run(agents_file):
    user = memory_user()
    turn = asyncio.run(achat(user_id=user.pk, message="remember that I drink oolong tea"))
    assert (turn.status, turn.tool_calls) == (
        "succeeded",
        [{"name": "remember_memory", "status": "success"}],
    )
    assert memory_text(agents_file, user) == "I drink oolong tea\n"
    run = AgentRun.objects.get(run_id=turn.run_id)
    assert (run.status, run.worker_id, run.error) == ("succeeded", None, "")
    stored = Message.objects.filter(conversation__thread_id=turn.thread_id).order_by("id")
    assert [m.role for m in stored] == ["user", "assistant", "tool", "assistant"]
    assert stored.last().content == turn.reply
    assert ToolCall.objects.get(message__conversation__thread_id=turn.thread_id).status == (
        "success"
    )


def test_achat_answers_like_chat_in_the_same_thread(agents_file):
    user = memory_user()
    first = chat(user_id=user.pk, message="remember that I live in Lyon")
    turn = asyncio.run(
        achat(user_id=user.pk, message="what do you remember?", thread_id=first.thread_id)
    )
    assert turn.thread_id == first.thread_id
    assert turn.reply == "From memory:\nI live in Lyon"


def test_several_achat_calls_gathered_on_one_loop_all_succeed(agents_file):
    users = [memory_user() for _ in range(4)]
    # Two users send two facts each at once: their writes meet on the user's lock.
    jobs = [(user, f"remember that fact {i} of {user.pk}") for user in users for i in range(2)]

    async def everyone():
        return await asyncio.gather(
            *(achat(user_id=user.pk, message=message) for user, message in jobs)
        )

    turns = asyncio.run(everyone())
    assert [t.tool_calls for t in turns] == [[{"name": "remember_memory", "status": "success"}]] * 8
    statuses = AgentRun.objects.filter(run_id__in=[t.run_id for t in turns]).values_list(
        "status", flat=True
    )
    assert list(statuses) == ["succeeded"] * 8
    for user in users:
        lines = memory_text(agents_file, user).splitlines()
        assert sorted(lines) == [f"fact 0 of {user.pk}", f"fact 1 of {user.pk}"]


def test_achat_refuses_another_users_thread_before_any_run():
    user = memory_user()
    foreign = ConversationFactory(user=memory_user())
    with pytest.raises(ChatThreadNotFound):
        asyncio.run(achat(user_id=user.pk, message="hi", thread_id=foreign.thread_id))
    assert not AgentRun.objects.filter(user=user).exists()


def test_achat_cancelled_while_the_model_thinks_cancels_its_run():
    user = memory_user()
    thinking = threading.Event()

    class SlowModel(ScriptedChatModel):
        async def _agenerate(self, messages, stop=None, run_manager=None, **kwargs):
            thinking.set()
            await asyncio.sleep(30)

    async def cancelled_turn():
        task = asyncio.create_task(achat(user_id=user.pk, message="hello", model=SlowModel()))
        while not thinking.is_set():
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancelled_turn())
    run = AgentRun.objects.get(user=user)
    assert (run.status, run.worker_id) == ("cancelled", None)
    assert run.error == "cancelled: the caller stopped waiting for the turn"
    stored = Message.objects.filter(conversation=run.conversation)
    assert list(stored.values_list("role", "content")) == [("user", "hello")]


# --- a team's own graph under ainvoke / astream ---------------------------------------------


def test_the_chatbot_graph_under_ainvoke_writes_memory_and_its_run_succeeds(agents_file):
    user = memory_user()

    async def team_turn():
        async with aagent_run(user_id=user.pk, thread_id=None) as run:
            graph = await in_worker_thread(build_chatbot_graph)(run.ctx, model=ScriptedChatModel())
            result = await graph.agent.ainvoke(
                {"messages": [HumanMessage("remember that I live in Lyon")]},
                context=run.ctx,
                config={"max_concurrency": 1},
            )
        return run, result

    run, result = asyncio.run(team_turn())
    assert json.loads(result["messages"][2].text)["status"] == "added"
    assert result["messages"][-1].text == "Saved to memory."
    assert memory_text(agents_file, user) == "I live in Lyon\n"
    finished = AgentRun.objects.get(run_id=run.run_id)
    assert (finished.status, finished.error) == ("succeeded", "")


def test_the_chatbot_graph_gives_the_same_messages_under_invoke_ainvoke_and_astream():
    user = memory_user()
    chat(user_id=user.pk, message="remember that I like tea")
    question = {"messages": [HumanMessage("what do you remember?")]}

    async def all_three():
        async with aagent_run(user_id=user.pk, thread_id=None) as run:
            graph = await in_worker_thread(build_chatbot_graph)(run.ctx, model=ScriptedChatModel())
            synced = await in_worker_thread(graph.agent.invoke)(question, context=run.ctx)
            invoked = await graph.agent.ainvoke(question, context=run.ctx)
            states = graph.agent.astream(question, context=run.ctx, stream_mode="values")
            streamed = [state async for state in states]
        return synced, invoked, streamed[-1]

    synced, invoked, streamed = asyncio.run(all_three())
    texts = [[m.text for m in result["messages"]] for result in (synced, invoked, streamed)]
    assert texts == [["what do you remember?", "From memory:\nI like tea"]] * 3


def test_a_lease_lost_mid_run_stops_an_async_turn_before_its_next_model_call(
    monkeypatch, agents_file
):
    user = memory_user()

    def renewal_fails(keeper, held):
        return set(), set()  # nothing renewed, nothing busy: every held lease is lost

    def lose_the_lease(step):
        run = AgentRun.objects.get(run_type="chat")
        lost = runs.lease_keeper().lost_event(str(run.run_id))
        monkeypatch.setattr(LeaseKeeper, "_renew", renewal_fails)
        runs.lease_keeper()._wake.set()  # beat now rather than a third of a lease from now
        assert lost.wait(60)

    reply = tool_reply(("c1", "remember_memory", {"content": "written after the loss"}))
    model = RecordingModel(replies=[reply], before_step=lose_the_lease)
    with pytest.raises(ChatRunLost):
        asyncio.run(achat(user_id=user.pk, message="remember it", model=model))
    # The guard's async hooks: the tool was refused, and no model call followed the loss.
    assert len(model.calls) == 1
    assert not agents_file(user.pk, "MEMORY.md").exists()
    assert list(Message.objects.values_list("role", flat=True)) == ["user"]


def test_aagent_run_fails_the_run_on_an_exception_and_re_raises_it():
    user = memory_user()

    async def failing():
        async with aagent_run(user_id=user.pk, thread_id=None) as run:
            raise KeyError("boom")
        return run  # pragma: no cover

    with pytest.raises(KeyError):
        asyncio.run(failing())
    run = AgentRun.objects.get(user=user)
    assert (run.status, run.worker_id, run.error) == ("failed", None, "internal error (KeyError)")


def test_the_async_runtime_uses_no_django_connection_on_the_event_loop(agents_file):
    user = memory_user()
    connection.close()  # the test thread (the loop's thread below) starts with none

    async def turn_and_check():
        await achat(user_id=user.pk, message="remember that I like tea")
        return connection.connection

    assert asyncio.run(turn_and_check()) is None


# --- the event loop and the memory lock -----------------------------------------------------

WAITING_ON_AN_ADVISORY_LOCK = (
    "SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
    "WHERE l.locktype = 'advisory' AND NOT l.granted AND a.datname = current_database())"
)


def test_a_memory_write_waiting_on_the_advisory_lock_never_blocks_the_event_loop(
    settings, agents_file
):
    settings.MEMORY_LOCK_TIMEOUT_MS = 20_000
    user = memory_user()
    holder = direct_connection(autocommit=True)
    probe = direct_connection(autocommit=True)
    holder.execute(
        "SELECT pg_advisory_lock(hashtextextended('yuxi-memory:' || %s, 0))", [str(user.pk)]
    )
    ticks = [0]

    def writer_is_waiting() -> bool:
        for _ in range(2000):
            if probe.execute(WAITING_ON_AN_ADVISORY_LOCK).fetchone()[0]:
                return True
            threading.Event().wait(0.01)
        return False

    async def ticker(stop: asyncio.Event) -> None:
        while not stop.is_set():
            ticks[0] += 1
            await asyncio.sleep(0.005)

    async def scenario():
        stop = asyncio.Event()
        ticking = asyncio.create_task(ticker(stop))
        turn = asyncio.create_task(achat(user_id=user.pk, message="remember that I like tea"))
        assert await asyncio.to_thread(writer_is_waiting)
        before = ticks[0]
        await asyncio.sleep(0.3)  # the write still waits on the lock all this time
        during = ticks[0] - before
        still_waiting = not turn.done()
        await asyncio.to_thread(
            holder.execute,
            "SELECT pg_advisory_unlock(hashtextextended('yuxi-memory:' || %s, 0))",
            [str(user.pk)],
        )
        result = await turn
        stop.set()
        await ticking
        return during, still_waiting, result

    try:
        during, still_waiting, result = asyncio.run(scenario())
    finally:
        holder.close()
        probe.close()
    assert still_waiting
    assert during >= 10  # the loop ran the ticker while the write waited
    assert result.tool_calls == [{"name": "remember_memory", "status": "success"}]
    assert memory_text(agents_file, user) == "I like tea\n"


def test_in_worker_thread_runs_off_the_loop_and_hands_its_connection_back():
    loop_thread = threading.get_ident()

    def query() -> tuple[int, bool]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return threading.get_ident(), connection.connection is not None

    async def main():
        return await in_worker_thread(query)()

    worker, had_connection = asyncio.run(main())
    assert worker != loop_thread and had_connection
    pool = connection.pool
    stats = pool.get_stats()
    assert stats["pool_size"] - stats["pool_available"] <= 1  # only this test thread's, if any


REQUEST_TAG = contextvars.ContextVar("request_tag", default="none")


def test_in_worker_thread_runs_in_a_copy_of_the_callers_context_variables():
    def tag() -> str:
        seen = REQUEST_TAG.get()
        REQUEST_TAG.set("changed in the worker")
        return seen

    async def main() -> tuple[str, str]:
        REQUEST_TAG.set("the caller's")
        return await in_worker_thread(tag)(), REQUEST_TAG.get()

    assert asyncio.run(main()) == ("the caller's", "the caller's")


def test_a_caller_cancelled_while_in_worker_thread_waits_stops_at_once_and_the_call_ends():
    started, release, ended = threading.Event(), threading.Event(), threading.Event()

    def slow() -> None:
        started.set()
        release.wait(10)
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        ended.set()

    async def main() -> None:
        waiting = asyncio.ensure_future(in_worker_thread(slow)())
        await asyncio.to_thread(started.wait, 10)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert not ended.is_set()  # cancelled at once, not when the call ended

    asyncio.run(main())
    release.set()
    assert ended.wait(10)  # the call ran to its end, on its thread
    deadline = time.monotonic() + 10
    while (
        connection.pool.get_stats()["pool_available"] < connection.pool.get_stats()["pool_size"] - 1
        and time.monotonic() < deadline
    ):
        time.sleep(0.01)
    stats = connection.pool.get_stats()
    assert stats["pool_size"] - stats["pool_available"] <= 1  # its connection handed back


# --- the documented example ---------------------------------------------------------------

DOCS = Path(__file__).resolve().parents[2] / "docs" / "python-api.md"


def documented_async_example() -> dict:
    """The functions of the async example in docs/python-api.md, defined as the doc shows."""
    text = DOCS.read_text()
    start = text.index(
        "```python", text.index("Example (run by `tests/memory_app/test_runtime_async.py`)")
    )
    code = text[start + len("```python") : text.index("```", start + 1)]
    namespace: dict = {}
    exec(compile(code, str(DOCS), "exec"), namespace)
    return namespace


def test_the_async_example_in_the_python_api_docs_runs(agents_file):
    example = documented_async_example()
    user = memory_user()
    recalled = asyncio.run(example["remember_then_recall"](user.pk))
    assert recalled == "From memory:\nI take the 8:10 train"
    answer = asyncio.run(example["team_graph_turn"](user.pk, "what do you remember?"))
    assert answer == "From memory:\nI take the 8:10 train"

    async def view_frames():
        request = AsyncRequestFactory().post(
            "/team/chat/", data={"message": "hello"}, content_type="application/json"
        )

        async def auser():
            return user

        request.auser = auser
        response = await example["team_chat_view"](request)
        return response["Content-Type"], [frame async for frame in response.streaming_content]

    content_type, frames = asyncio.run(view_frames())
    events = [json.loads(frame.decode().removeprefix("data: ")) for frame in frames]
    assert content_type == "text/event-stream"
    assert events[0]["event"] == "run" and events[-1]["event"] == "done"
    assert events[-1]["reply"] == "You said: hello"
    assert AgentRun.objects.filter(user=user).exclude(status="succeeded").count() == 0
