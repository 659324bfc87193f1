"""History lookback: response shapes, visibility, CJK search and byte budgets."""

import json
import math
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from conversations.models import Conversation, Message, ToolCall
from conversations.repository import read_thread_messages, search_thread_messages
from conversations.repository.arguments import HistoryNotFound, HistoryQueryError
from tests.contract.helpers import (
    HIT_KEYS,
    KIB,
    MESSAGE_KEYS,
    READ_KEYS,
    TOOL_CALL_KEYS,
    call,
    serialized_bytes,
    tools_by_name,
)
from tests.factories import ConversationFactory, MessageFactory, ToolCallFactory, context_for


@pytest.fixture
def thread(run):
    """A visible thread of `run`'s user: 30 messages a second apart, a tool call on the 12th."""
    conversation = ConversationFactory(user=run.user, title="Trip planning")
    start = conversation.created_at
    messages = [
        MessageFactory(
            conversation=conversation,
            role="user" if i % 2 == 0 else "assistant",
            content=f"message number {i} about trains",
            created_at=start + timedelta(seconds=i),
        )
        for i in range(30)
    ]
    ToolCallFactory(message=messages[11], name="lookup", input={"q": "x"}, output="ok")
    return conversation


def messages_of(conversation: Conversation) -> list[Message]:
    """The thread's messages in their model order, (created_at, id)."""
    return list(Message.objects.filter(conversation=conversation))


@pytest.mark.django_db
def test_search_returns_exactly_the_spec_shape_newest_first(run, thread):
    response = search_thread_messages(str(run.user_id), "TRAINS", limit=3)
    assert set(response) == {"results", "truncated"}
    assert len(response["results"]) == 3
    for hit in response["results"]:
        assert set(hit) == HIT_KEYS
        assert hit["thread_id"] == thread.thread_id and hit["title"] == "Trip planning"
        assert len(hit["snippet"].encode()) <= 512
    ids = [hit["message_id"] for hit in response["results"]]
    assert ids == [m.pk for m in messages_of(thread)[:-4:-1]]
    assert search_thread_messages(run.user_id, "trains") == search_thread_messages(
        run.user_id, "trains", limit=5
    )
    assert serialized_bytes(response) <= 16 * KIB


@pytest.mark.django_db
@pytest.mark.parametrize("query", ["100%", "a_b", "back\\slash"])
def test_search_wildcards_in_the_query_are_literal(run, thread, query):
    literal = MessageFactory(conversation=thread, content=f"has {query} inside")
    MessageFactory(conversation=thread, content="has 100 percent, aXb and backXslash")
    hits = search_thread_messages(run.user_id, query)["results"]
    assert [hit["message_id"] for hit in hits] == [literal.pk]


@pytest.mark.django_db
def test_read_returns_exactly_the_spec_shape_and_tool_calls_only_on_request(run, thread):
    response = read_thread_messages(run.user_id, thread.thread_id)
    assert set(response) == READ_KEYS
    latest = [m.pk for m in messages_of(thread)[10:]]
    assert [m["message_id"] for m in response["messages"]] == latest
    assert (response["has_more_before"], response["has_more_after"]) == (True, False)
    for item in response["messages"]:
        assert set(item) == MESSAGE_KEYS
    with_tools = read_thread_messages(run.user_id, thread.thread_id, include_tools=True)
    assert set(with_tools) == set(response) | {"tool_calls"}
    [tool_call] = with_tools["tool_calls"]
    assert set(tool_call) == TOOL_CALL_KEYS
    assert tool_call["message_id"] == messages_of(thread)[11].pk
    assert (tool_call["name"], tool_call["input"], tool_call["output"]) == (
        "lookup",
        {"q": "x"},
        "ok",
    )


@pytest.mark.django_db
@pytest.mark.parametrize("limit", [1, 2, 7, 20])
def test_read_around_an_anchor_takes_ceil_half_up_to_it_and_the_rest_after(run, thread, limit):
    anchor = 15
    response = read_thread_messages(
        run.user_id, thread.thread_id, message_id=messages_of(thread)[anchor].pk, limit=limit
    )
    first = anchor - math.ceil(limit / 2) + 1
    expected = [m.pk for m in messages_of(thread)[first : first + limit]]
    assert [m["message_id"] for m in response["messages"]] == expected
    assert response["has_more_before"] is (first > 0)
    assert response["has_more_after"] is (first + limit < 30)


@pytest.mark.django_db
def test_every_invisible_or_unknown_thread_is_the_same_not_found(run, thread):
    other_users = ConversationFactory()
    hidden = [
        ConversationFactory(user=run.user, status="archived"),
        ConversationFactory(user=run.user, status="deleted"),
        ConversationFactory(user=run.user, source="agent_call"),
        ConversationFactory(user=run.user, source="agent_evaluation"),
        ConversationFactory(user=run.user, parent=thread),
        other_users,
    ]
    for conversation in hidden:
        MessageFactory(conversation=conversation, content="hidden trains")
    messages = []
    for thread_id in [c.thread_id for c in hidden] + ["no-such-thread"]:
        with pytest.raises(HistoryNotFound) as raised:
            read_thread_messages(run.user_id, thread_id)
        messages.append(str(raised.value))
    assert len(set(messages)) == 1
    assert "hidden" not in json.dumps(search_thread_messages(run.user_id, "hidden"))
    tool = tools_by_name(context_for(run))["read_thread_messages"]
    assert call(tool, {"thread_id": other_users.thread_id})["status"] == "not_found"


@pytest.mark.django_db
def test_only_user_and_assistant_text_is_visible(run, thread):
    # Newer than the fixture's messages, so all of them fall within the latest 20.
    later = thread.created_at + timedelta(minutes=1)
    for role, message_type in [
        ("system", "text"),
        ("tool", "text"),
        ("assistant", "tool_call"),
        ("tool", "tool_result"),
    ]:
        MessageFactory(
            conversation=thread,
            role=role,
            message_type=message_type,
            content="secret trains",
            created_at=later,
        )
    MessageFactory(
        conversation=thread,
        created_at=later,
        content="visible trains",
        image_content="secret-image",
        attachments=[{"name": "secret-attachment"}],
        feedback={"note": "secret-feedback"},
        metadata={"note": "secret-metadata"},
    )
    thread.metadata = {"note": "secret-thread-metadata"}
    thread.save()
    assert search_thread_messages(run.user_id, "secret")["results"] == []
    searched = search_thread_messages(run.user_id, "visible trains", limit=10)
    response = read_thread_messages(run.user_id, thread.thread_id, limit=20)
    assert "visible trains" in json.dumps(response, ensure_ascii=False)
    assert "secret" not in json.dumps(response) + json.dumps(searched)
    assert {m["role"] for m in response["messages"]} == {"user", "assistant"}


@pytest.mark.django_db
@pytest.mark.parametrize("query", ["東京", "京", "東京タワー", "école", "ÉCOLE"])
def test_search_matches_cjk_and_non_ascii_case_insensitively(run, query):
    conversation = ConversationFactory(user=run.user)
    hit = MessageFactory(conversation=conversation, content="Une école près de 東京タワー")
    MessageFactory(conversation=conversation, content="nothing related")
    assert [h["message_id"] for h in search_thread_messages(run.user_id, query)["results"]] == [
        hit.pk
    ]


@pytest.mark.django_db
def test_search_keeps_the_newest_hits_that_fit_16_kib_of_escaped_json(run):
    conversation = ConversationFactory(user=run.user, title="\x01" * 300)
    start = conversation.created_at
    messages = [
        MessageFactory(
            conversation=conversation,
            content="\x01" * 1000 + "needle" + "\x01" * 1000,
            created_at=start + timedelta(seconds=i),
        )
        for i in range(10)
    ]
    response = search_thread_messages(run.user_id, "needle", limit=10)
    assert serialized_bytes(response) <= 16 * KIB
    assert response["truncated"] is True
    ids = [hit["message_id"] for hit in response["results"]]
    assert 0 < len(ids) < 10
    assert ids == [m.pk for m in messages[::-1][: len(ids)]]
    for hit in response["results"]:
        assert "needle" in hit["snippet"]
        assert len(hit["snippet"].encode()) <= 512 and len(hit["title"].encode()) <= 256
        assert hit["truncated"] is True


@pytest.mark.django_db
def test_tool_calls_are_at_most_ten_of_4_kib_within_16_kib_and_cut_inputs_become_text(run):
    conversation = ConversationFactory(user=run.user)
    issuer = MessageFactory(conversation=conversation, role="assistant", content="calling")
    calls = [
        ToolCallFactory(
            message=issuer,
            tool_call_id=f"call-{i}",
            input={"blob": "字" * 3000},
            output="o" * 10_000,
        )
        for i in range(12)
    ]
    response = read_thread_messages(run.user_id, conversation.thread_id, include_tools=True)
    items = response["tool_calls"]
    assert 0 < len(items) <= 10
    assert serialized_bytes(items) <= 16 * KIB
    assert response["truncated"] is True
    for item, expected in zip(items, calls, strict=False):
        assert serialized_bytes(item) <= 4 * KIB
        assert item["id"] == expected.tool_call_id
        assert item["truncated"] is True
        assert isinstance(item["input"], str) and item["input"].startswith('{"blob"')


@pytest.mark.django_db
def test_search_and_a_default_read_send_no_query_to_the_tool_call_table(run, thread):
    table = ToolCall._meta.db_table
    with CaptureQueriesContext(connection) as searched:
        search_thread_messages(run.user_id, "trains")
    with CaptureQueriesContext(connection) as read:
        read_thread_messages(run.user_id, thread.thread_id)
    with CaptureQueriesContext(connection) as read_with_tools:
        read_thread_messages(run.user_id, thread.thread_id, include_tools=True)
    assert not [q for q in searched.captured_queries + read.captured_queries if table in q["sql"]]
    assert len([q for q in read_with_tools.captured_queries if table in q["sql"]]) == 1


@pytest.mark.django_db
def test_an_anchor_outside_the_thread_or_invisible_is_the_same_not_found(run, thread):
    elsewhere = MessageFactory(conversation=ConversationFactory(user=run.user))
    system = MessageFactory(conversation=thread, role="system", content="rules")
    for message_id in (elsewhere.pk, system.pk, 2**62):
        with pytest.raises(HistoryNotFound):
            read_thread_messages(run.user_id, thread.thread_id, message_id=message_id)
    tool = tools_by_name(context_for(run))["read_thread_messages"]
    arguments = {"thread_id": thread.thread_id, "message_id": elsewhere.pk}
    assert call(tool, arguments)["status"] == "not_found"


def test_history_query_error_is_a_value_error():
    assert issubclass(HistoryQueryError, ValueError)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("function", "kwargs"),
    [
        (search_thread_messages, {"query": ""}),
        (search_thread_messages, {"query": "x" * 257}),
        (search_thread_messages, {"query": "a\x00"}),
        (search_thread_messages, {"query": "a", "limit": 0}),
        (search_thread_messages, {"query": "a", "limit": 11}),
        (read_thread_messages, {"thread_id": "t", "limit": 0}),
        (read_thread_messages, {"thread_id": "t", "limit": 21}),
    ],
)
def test_out_of_range_arguments_raise_history_query_error_and_the_tool_rejects(
    run, function, kwargs
):
    with pytest.raises(HistoryQueryError):
        function(run.user_id, **kwargs)
    tool = tools_by_name(context_for(run))[function.__name__]
    assert call(tool, kwargs)["status"] == "rejected"


@pytest.mark.django_db
def test_history_tools_return_the_repository_response_as_it_is(run, thread):
    tools = tools_by_name(context_for(run))
    assert call(tools["search_thread_messages"], {"query": "trains", "limit": 2}) == (
        search_thread_messages(run.user_id, "trains", limit=2)
    )
    read = call(tools["read_thread_messages"], {"thread_id": thread.thread_id, "limit": 3})
    assert read == read_thread_messages(run.user_id, thread.thread_id, limit=3)


@pytest.mark.django_db
def test_read_budgets_hold_for_huge_escaped_contents(run):
    conversation = ConversationFactory(user=run.user, title="标" * 200)
    for _ in range(20):
        MessageFactory(conversation=conversation, content='"\x01' * 10_000)
    response = read_thread_messages(run.user_id, conversation.thread_id)
    assert response["truncated"] is True
    assert len(response["title"].encode()) <= 256
    contents = [len(m["content"].encode()) for m in response["messages"]]
    assert max(contents) <= 8 * KIB and sum(contents) <= 32 * KIB
    assert all(m["truncated"] for m in response["messages"])
    assert serialized_bytes(response) <= 64 * KIB
    assert response["has_more_before"] is True
