"""Streamed turns: `stream_chat` and `astream_chat` give `run` first, tokens as the model
writes them, `tool_call` before `tool_result`, one `done` or `error` last; a consumer that
stops reading cancels the turn."""

import asyncio
import threading
from contextlib import aclosing, closing

import pytest

from conversations.models import AgentRun, Message, ToolCall
from memory_app.llm import ScriptedChatModel
from memory_app.runtime import ChatThreadNotFound, astream_chat, chat, stream_chat
from tests.factories import ConversationFactory, UserConfigFactory
from tests.memory_app.models import RecordingModel

# The turn's database work runs on worker threads, which cannot see a test's transaction.
pytestmark = pytest.mark.django_db(transaction=True)


def memory_user(enable_memory: bool = True):
    return UserConfigFactory(enable_memory=enable_memory).user


def collect_async(**arguments) -> list[dict]:
    async def events():
        return [event async for event in astream_chat(**arguments)]

    return asyncio.run(events())


def stored_assistant_texts(thread_id: str) -> list[str]:
    return list(
        Message.objects.filter(conversation__thread_id=thread_id, role="assistant")
        .order_by("id")
        .values_list("content", flat=True)
    )


@pytest.mark.parametrize("collect", [lambda **a: list(stream_chat(**a)), collect_async])
def test_a_streamed_turn_gives_run_first_tool_call_before_tool_result_and_one_done_last(
    collect, agents_file
):
    user = memory_user()
    events = collect(user_id=user.pk, message="remember that I like tea")
    kinds = [event["event"] for event in events]
    assert kinds[0] == "run" and kinds[-1] == "done" and kinds.count("done") == 1
    assert "error" not in kinds
    run = AgentRun.objects.get(run_id=events[0]["run_id"])
    assert run.conversation.thread_id == events[0]["thread_id"]
    assert run.status == "succeeded"
    [call] = [e for e in events if e["event"] == "tool_call"]
    [result] = [e for e in events if e["event"] == "tool_result"]
    assert kinds.index("tool_call") < kinds.index("tool_result")
    assert (call["name"], result["name"], result["id"]) == (
        "remember_memory",
        "remember_memory",
        call["id"],
    )
    assert result["status"] == "success"
    assert ToolCall.objects.get(tool_call_id=call["id"]).status == "success"
    done = events[-1]
    assert done == {
        "event": "done",
        "status": "succeeded",
        "reply": done["reply"],
        "tool_calls": [{"name": "remember_memory", "status": "success"}],
        "approval": None,
    }
    # The final model call's tokens, joined, are the stored reply, streamed in several chunks.
    final_tokens = [
        e["text"] for e in events[kinds.index("tool_result") + 1 :] if e["event"] == "token"
    ]
    assert len(final_tokens) > 1
    assert (
        "".join(final_tokens)
        == done["reply"]
        == stored_assistant_texts(run.conversation.thread_id)[-1]
    )
    assert agents_file(user.pk, "MEMORY.md").read_text() == "I like tea\n"


@pytest.mark.parametrize("collect", [lambda **a: list(stream_chat(**a)), collect_async])
def test_the_tokens_of_each_model_call_are_the_text_that_call_stored(collect):
    user = memory_user()
    first = chat(user_id=user.pk, message="hello")
    events = collect(
        user_id=user.pk, message="search my history for hello", thread_id=first.thread_id
    )
    assert [e["event"] for e in events if e["event"] != "token"] == [
        "run",
        "tool_call",
        "tool_result",
        "done",
    ]
    stored = stored_assistant_texts(first.thread_id)[1:]  # this turn's assistant messages
    assert stored[0] == ""  # the call asking for the tool wrote no text
    assert "".join(e["text"] for e in events if e["event"] == "token") == stored[1]


def test_a_sub_agent_streams_no_tokens_into_its_parents_stream():
    user = memory_user()
    events = list(stream_chat(user_id=user.pk, message="ask the subagent: say hi"))
    [call] = [e for e in events if e["event"] == "tool_call"]
    assert call["name"] == "delegate_to_subagent"
    tokens = "".join(e["text"] for e in events if e["event"] == "token")
    assert tokens == events[-1]["reply"]
    assert "You said: say hi" in tokens  # the parent reports the answer; it was not streamed twice
    assert tokens.count("You said: say hi") == 1


def test_a_model_failure_ends_the_stream_with_an_error_event_and_fails_the_run():
    user = memory_user()

    class BrokenModel(ScriptedChatModel):
        async def _agenerate(self, messages, stop=None, run_manager=None, **kwargs):
            raise ConnectionError("the model is down")

    events = collect_async(user_id=user.pk, message="hello", model=BrokenModel())
    assert [e["event"] for e in events] == ["run", "error"]
    assert events[-1] == {
        "event": "error",
        "error": "the model is unavailable, try again",
        "status_code": 502,
    }
    run = AgentRun.objects.get(run_id=events[0]["run_id"])
    assert run.status == "failed" and "ConnectionError" in run.error


@pytest.mark.parametrize("streamer", [stream_chat, astream_chat])
def test_a_refusal_before_the_run_opens_is_raised_by_the_first_step(streamer):
    user = memory_user()
    foreign = ConversationFactory(user=memory_user())
    arguments = {"user_id": user.pk, "message": "hi", "thread_id": foreign.thread_id}
    with pytest.raises(ChatThreadNotFound):
        if streamer is stream_chat:
            next(stream_chat(**arguments))
        else:
            asyncio.run(anext(astream_chat(**arguments)))
    assert not AgentRun.objects.filter(user=user).exists()


# --- a consumer that stops reading ------------------------------------------------------------

CANCELLED = "cancelled: the consumer stopped reading the stream"


def first_events_then_close(streamer, count: int, **arguments) -> list[dict]:
    """Read `count` events, then close the stream as a disconnecting client would."""
    if streamer is stream_chat:
        with closing(stream_chat(**arguments)) as events:
            return [next(events) for _ in range(count)]

    async def read():
        async with aclosing(astream_chat(**arguments)) as events:
            return [await anext(events) for _ in range(count)]

    return asyncio.run(read())


@pytest.mark.parametrize("streamer", [stream_chat, astream_chat])
def test_a_stream_closed_after_its_first_event_leaves_no_run_running(streamer):
    user = memory_user()
    [first] = first_events_then_close(streamer, 1, user_id=user.pk, message="hello")
    assert first["event"] == "run"
    run = AgentRun.objects.get(run_id=first["run_id"])
    assert (run.status, run.worker_id, run.error) == ("cancelled", None, CANCELLED)
    stored = Message.objects.filter(conversation=run.conversation)
    assert list(stored.values_list("role", "content")) == [("user", "hello")]
    assert not AgentRun.objects.filter(status="running").exists()


@pytest.mark.parametrize("streamer", [stream_chat, astream_chat])
def test_a_stream_closed_after_a_tool_ran_keeps_what_the_tool_committed_and_nothing_else(
    streamer, agents_file
):
    user = memory_user()
    events = list(stream_chat(user_id=user.pk, message="remember that I like tea"))
    upto_result = [e["event"] for e in events].index("tool_result") + 1
    user_two = memory_user()
    # The reply after the tool result waits for the close: an async stream runs ahead of its
    # reader, and could otherwise end (and store) the whole turn before the close reached it.
    closed = threading.Event()
    model = RecordingModel(before_step=lambda step: step == 2 and closed.wait(10))
    try:
        read = first_events_then_close(
            streamer,
            upto_result,
            user_id=user_two.pk,
            message="remember that I like tea",
            model=model,
        )
    finally:
        closed.set()
    assert read[-1]["event"] == "tool_result" and read[-1]["status"] == "success"
    run = AgentRun.objects.get(run_id=read[0]["run_id"])
    assert (run.status, run.error) == ("cancelled", CANCELLED)
    assert agents_file(user_two.pk, "MEMORY.md").read_text() == "I like tea\n"
    stored = Message.objects.filter(conversation=run.conversation)
    assert list(stored.values_list("role", flat=True)) == ["user"]
    assert not ToolCall.objects.filter(message__conversation=run.conversation).exists()
