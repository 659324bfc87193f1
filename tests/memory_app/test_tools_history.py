import json
from dataclasses import replace
from datetime import timedelta

import pytest
from django.db import OperationalError, connection
from langchain_core.utils.function_calling import convert_to_openai_tool

from conversations import runs
from conversations.models import AgentRun, Message, ToolCall
from conversations.repository import read_thread_messages, search_thread_messages
from conversations.repository.budgets import to_json
from conversations.runs import ToolRuntimeContext
from conversations.utils.db_functions import ClockTimestamp
from memory_app.llm import ScriptedChatModel
from memory_app.models import UserConfig
from memory_app.runtime import chat
from memory_app.tools import make_read_thread_messages_tool, make_search_thread_messages_tool
from tests.concurrency import row_locked_elsewhere
from tests.factories import (
    AgentRunFactory,
    ConversationFactory,
    MessageFactory,
    UserConfigFactory,
    UserFactory,
)

pytestmark = pytest.mark.django_db

FORBIDDEN_FIELDS = {"uid", "user", "user_id", "path", "worker_id", "run_id", "request_id"}
MAKERS = [make_search_thread_messages_tool, make_read_thread_messages_tool]


@pytest.fixture
def setup():
    """A running chat run of a user with memory on, and a past thread to look back at."""
    user = UserFactory()
    UserConfigFactory(user=user, enable_memory=True)
    past = ConversationFactory(user=user, title="trip plans")
    message = MessageFactory(conversation=past, content="we booked the Kyoto hotel")
    run = AgentRunFactory(conversation=ConversationFactory(user=user))
    run = runs.claim_run(worker_id="worker-1", run_id=run.run_id)
    ctx = ToolRuntimeContext(
        uid=str(user.pk),
        thread_id=run.conversation.thread_id,
        run_id=str(run.run_id),
        request_id=run.request_id,
        worker_id="worker-1",
    )
    return user, past, message, run, ctx


def _call(maker, ctx, arguments) -> dict:
    return json.loads(maker(ctx).invoke(arguments))


@pytest.mark.parametrize("maker", MAKERS)
def test_schemas_expose_no_identity_path_or_run_field(maker, setup):
    tool = maker(setup[4])
    schema = convert_to_openai_tool(tool)["function"]["parameters"]
    assert schema["additionalProperties"] is False
    assert not FORBIDDEN_FIELDS & set(schema["properties"])
    assert not FORBIDDEN_FIELDS & set(tool.args)
    assert tool.name == maker.__name__.removeprefix("make_").removesuffix("_tool")


def test_read_schema_takes_the_thread_to_read_and_the_window():
    tool = make_read_thread_messages_tool(ToolRuntimeContext("1", "t", "r", "q", "w"))
    schema = convert_to_openai_tool(tool)["function"]["parameters"]
    assert set(tool.args) == {"thread_id", "message_id", "limit", "include_tools"}
    assert set(schema["properties"]) == {"thread_id", "message_id", "limit", "include_tools"}
    assert schema["required"] == ["thread_id"]


def test_search_tool_returns_the_repository_response_as_it_is(setup):
    user, _, _, _, ctx = setup
    text = make_search_thread_messages_tool(ctx).invoke({"query": "kyoto", "limit": 3})
    assert text == to_json(search_thread_messages(user.pk, "kyoto", limit=3))
    assert json.loads(text)["results"][0]["snippet"] == "we booked the Kyoto hotel"


def test_search_tool_takes_time_bounds_and_tells_the_model_when_to_use_them(setup):
    user, past, message, _, ctx = setup
    tool = make_search_thread_messages_tool(ctx)
    schema = convert_to_openai_tool(tool)["function"]["parameters"]
    assert set(schema["properties"]) == {"query", "limit", "since", "until"}
    assert schema["required"] == ["query"]
    for words in ("distinctive words", "double quotes", "since", "until", "names a time"):
        assert words in tool.description
    day = message.created_at.date()
    found = json.loads(tool.invoke({"query": "kyoto", "since": day.isoformat()}))
    assert [h["message_id"] for h in found["results"]] == [message.pk]
    none = json.loads(tool.invoke({"query": "kyoto", "until": day.isoformat()}))
    assert none["results"] == []
    refused = json.loads(tool.invoke({"query": "kyoto", "since": "last week"}))
    assert refused["status"] == "rejected" and "ISO 8601" in refused["message"]


# The chat's tools may run on other threads, which cannot see a test's transaction.
@pytest.mark.django_db(transaction=True)
def test_a_chat_turns_lookback_output_is_never_read_back_through_include_tools(setup):
    user, _, _, _, _ = setup

    class SearchingWithText(ScriptedChatModel):
        """Says what it does while it calls the tool, so the call's message is visible text
        (a reply that only calls tools is a hidden `tool_call` message)."""

        def reply(self, messages):
            scripted = super().reply(messages)
            return scripted.model_copy(update={"content": scripted.text or "Searching."})

    turn = chat(user_id=user.pk, message="search my history for kyoto", model=SearchingWithText())
    recorded = ToolCall.objects.get(message__conversation__thread_id=turn.thread_id)
    assert recorded.name == "search_thread_messages" and "Kyoto hotel" in recorded.output
    response = read_thread_messages(user.pk, turn.thread_id, include_tools=True)
    [call] = response["tool_calls"]
    assert (call["name"], call["input"], call["output"]) == (
        "search_thread_messages",
        {"query": "kyoto"},
        None,
    )


def test_read_tool_returns_the_repository_response_as_it_is(setup):
    user, past, message, _, ctx = setup
    arguments = {"thread_id": past.thread_id, "message_id": message.pk, "include_tools": True}
    text = make_read_thread_messages_tool(ctx).invoke(arguments)
    assert text == to_json(read_thread_messages(user.pk, **arguments))
    assert json.loads(text)["messages"][0]["content"] == "we booked the Kyoto hotel"


def _expire(run: AgentRun) -> None:
    AgentRun.objects.filter(pk=run.pk).update(
        lease_expires_at=ClockTimestamp() - timedelta(seconds=1)
    )


def _subagent(run: AgentRun) -> None:
    AgentRun.objects.filter(pk=run.pk).update(
        run_type=AgentRun.RunType.SUBAGENT, parent_run=AgentRunFactory()
    )


def _finished(run: AgentRun) -> None:
    runs.finish_run(run_id=run.run_id, worker_id="worker-1", status=AgentRun.Status.SUCCEEDED)


def _arguments(maker, past) -> dict:
    if maker is make_search_thread_messages_tool:
        return {"query": "kyoto"}
    return {"thread_id": past.thread_id}


def _assert_denied(text: str, user) -> None:
    assert json.loads(text)["status"] == "denied"
    assert "Kyoto" not in text and str(user.pk) not in text


@pytest.mark.parametrize("maker", MAKERS)
@pytest.mark.parametrize(
    "change",
    [
        {"worker_id": "worker-2"},
        {"uid": ""},
        {"uid": "not-a-number"},
        {"thread_id": "other"},
        {"request_id": "other"},
        {"run_id": "not-a-uuid"},
        {"run_id": "00000000-0000-0000-0000-000000000000"},
    ],
)
def test_tools_refuse_a_context_that_does_not_match_the_run(maker, change, setup):
    user, past, _, _, ctx = setup
    _assert_denied(maker(replace(ctx, **change)).invoke(_arguments(maker, past)), user)


def test_tools_refuse_another_users_identity(setup):
    user, past, _, _, ctx = setup
    intruder = UserFactory()
    UserConfigFactory(user=intruder, enable_memory=True)
    for maker in MAKERS:
        text = maker(replace(ctx, uid=str(intruder.pk))).invoke(_arguments(maker, past))
        _assert_denied(text, user)


def _expire(run: AgentRun, user) -> None:
    AgentRun.objects.filter(pk=run.pk).update(
        lease_expires_at=ClockTimestamp() - timedelta(seconds=1)
    )


def _make_subagent(run: AgentRun, user) -> None:
    AgentRun.objects.filter(pk=run.pk).update(
        run_type=AgentRun.RunType.SUBAGENT, parent_run=AgentRunFactory(user=user)
    )


def _finish(run: AgentRun, user) -> None:
    runs.finish_run(run_id=run.run_id, worker_id="worker-1", status=AgentRun.Status.SUCCEEDED)


def _switch_off(run: AgentRun, user) -> None:
    UserConfig.objects.filter(user=user).update(enable_memory=False)


def _drop_config(run: AgentRun, user) -> None:
    UserConfig.objects.filter(user=user).delete()


@pytest.mark.parametrize("maker", MAKERS)
@pytest.mark.parametrize("spoil", [_expire, _make_subagent, _finish, _switch_off, _drop_config])
def test_tools_recheck_the_run_and_the_switch_at_call_time(maker, spoil, setup):
    user, past, _, run, ctx = setup
    tool = maker(ctx)  # built while everything was valid
    assert "Kyoto" in tool.invoke(_arguments(maker, past))
    spoil(run, user)
    _assert_denied(tool.invoke(_arguments(maker, past)), user)


@pytest.mark.parametrize(
    ("maker", "arguments"),
    [
        (make_search_thread_messages_tool, {"query": ""}),
        (make_search_thread_messages_tool, {"query": "x", "limit": 50}),
        (make_search_thread_messages_tool, {"query": "x", "uid": "1"}),
        (make_search_thread_messages_tool, {}),
        (make_search_thread_messages_tool, ["kyoto"]),
        (make_read_thread_messages_tool, {"thread_id": "t", "limit": 0}),
        (make_read_thread_messages_tool, {"thread_id": "t", "path": "/etc"}),
        (make_read_thread_messages_tool, {"message_id": 1}),
        # Wrong JSON types, bools for ints, null, floats and text no database can store.
        (make_search_thread_messages_tool, {"query": None}),
        (make_search_thread_messages_tool, {"query": ["kyoto"]}),
        (make_search_thread_messages_tool, {"query": "x", "limit": True}),
        (make_search_thread_messages_tool, {"query": "x", "limit": 5.0}),
        (make_search_thread_messages_tool, {"query": "x", "limit": 10**100}),
        (make_search_thread_messages_tool, {"query": "kyoto\x00"}),
        (make_search_thread_messages_tool, {"query": "\ud800"}),
        (make_read_thread_messages_tool, {"thread_id": None}),
        (make_read_thread_messages_tool, {"thread_id": 7}),
        (make_read_thread_messages_tool, {"thread_id": "t", "message_id": True}),
        (make_read_thread_messages_tool, {"thread_id": "t", "message_id": "1"}),
        (make_read_thread_messages_tool, {"thread_id": "t", "include_tools": "yes"}),
        (make_read_thread_messages_tool, {"thread_id": "\udc00"}),
        (make_search_thread_messages_tool, {"query": "x", "limit": "7"}),
        (make_search_thread_messages_tool, {"query": "x", "limit": float("nan")}),
        (make_read_thread_messages_tool, {"thread_id": "t", "limit": 1e999}),
        (make_search_thread_messages_tool, {"query": "x", "limit": "7"}),
        (make_search_thread_messages_tool, {"query": "x", "limit": float("nan")}),
        (make_read_thread_messages_tool, {"thread_id": "t", "limit": 1e999}),
    ],
)
def test_bad_arguments_are_rejected(maker, arguments, setup):
    result = _call(maker, setup[4], arguments)
    assert result["status"] == "rejected" and result["message"]


def test_an_unknown_or_invisible_thread_or_anchor_is_not_found(setup):
    user, past, message, _, ctx = setup
    hidden = MessageFactory(conversation=past, role=Message.Role.SYSTEM)
    other = ConversationFactory()
    answers = [
        _call(make_read_thread_messages_tool, ctx, arguments)
        for arguments in [
            {"thread_id": "thread-unknown"},
            {"thread_id": other.thread_id},
            {"thread_id": past.thread_id, "message_id": hidden.pk},
        ]
    ]
    assert answers[0]["status"] == "not_found"
    assert answers[1:] == answers[:1] * 2


@pytest.mark.django_db(transaction=True)
def test_a_history_read_neither_waits_on_nor_blocks_a_locked_run_row(setup):
    user, past, _, run, ctx = setup
    try:
        with row_locked_elsewhere(run):
            # Any wait on a lock would fail fast as `unavailable`.
            with connection.cursor() as cursor:
                cursor.execute("SET lock_timeout = '50ms'")
            text = make_search_thread_messages_tool(ctx).invoke({"query": "kyoto"})
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET lock_timeout")
    assert [hit["thread_id"] for hit in json.loads(text)["results"]] == [past.thread_id]


def test_a_database_failure_while_checking_the_run_is_unavailable_not_a_traceback(setup):
    user, past, _, run, ctx = setup

    def failing_run_query(execute, sql, params, many, context):
        if "conversations_agentrun" in sql:
            raise OperationalError("server closed the connection unexpectedly")
        return execute(sql, params, many, context)

    with connection.execute_wrapper(failing_run_query):
        text = make_search_thread_messages_tool(ctx).invoke({"query": "kyoto"})
    assert json.loads(text)["status"] == "unavailable"
    assert "Kyoto" not in text and "server closed" not in text
