import pytest
from django.db import transaction

from conversations import services
from conversations.models import AgentRun, Conversation, Message, ToolCall
from conversations.services import THREAD_TITLE_MAX_BYTES
from conversations.utils.statements import count_statements
from tests.factories import (
    AgentRunFactory,
    ConversationFactory,
    MessageFactory,
    ToolCallFactory,
    UserFactory,
)

pytestmark = pytest.mark.django_db


def test_start_thread_titles_it_by_the_first_message_cut_at_a_utf8_boundary():
    user = UserFactory()
    thread = services.start_thread(user_id=user.pk, first_message="茶\n" * THREAD_TITLE_MAX_BYTES)
    assert len(thread.title.encode()) <= THREAD_TITLE_MAX_BYTES
    assert thread.title.startswith("茶 茶")
    assert (thread.status, thread.source, thread.parent_id) == ("active", "chat", None)


def test_start_thread_records_a_child_of_a_parent_thread():
    parent = ConversationFactory()
    child = services.start_thread(
        user_id=parent.user_id,
        first_message="task",
        source=Conversation.Source.AGENT_CALL,
        parent=parent,
    )
    assert (child.parent_id, child.source) == (parent.pk, "agent_call")
    assert child.thread_id != parent.thread_id


def test_a_started_thread_is_the_row_stored_in_one_statement():
    user = UserFactory()
    # Counted without Django's query log, so the statement runs prepared, as in production.
    with count_statements() as counted:
        thread = services.start_chat_thread(user_id=user.pk, first_message="hello")
    assert len(counted) == 1
    stored = Conversation.objects.get(pk=thread.pk)
    fields = [f.attname for f in Conversation._meta.concrete_fields]
    assert [getattr(thread, f) for f in fields] == [getattr(stored, f) for f in fields]
    assert (stored.user_id, stored.title, stored.metadata) == (user.pk, "hello", {})


def test_a_chat_thread_is_started_only_for_an_active_user():
    inactive = UserFactory(is_active=False)
    assert services.start_chat_thread(user_id=inactive.pk, first_message="hello") is None
    assert services.start_chat_thread(user_id=inactive.pk + 1000, first_message="hello") is None
    assert not Conversation.objects.exists()


def test_add_message_bumps_the_threads_updated_at():
    thread = ConversationFactory()
    before = Conversation.objects.get(pk=thread.pk).updated_at
    message = services.add_message(conversation=thread, role="user", content="hi")
    assert Conversation.objects.get(pk=thread.pk).updated_at == message.created_at > before


def test_an_untitled_thread_takes_its_first_user_text_message_as_title_and_keeps_it():
    thread = ConversationFactory(title="")
    services.add_message(conversation=thread, role="assistant", content="Hello!")
    services.add_message(
        conversation=thread, role="tool", content="{}", message_type=Message.Type.TOOL_RESULT
    )
    assert Conversation.objects.get(pk=thread.pk).title == ""
    services.add_message(conversation=thread, role="user", content=" book\n a   table ")
    services.add_message(conversation=thread, role="user", content="for two")
    assert Conversation.objects.get(pk=thread.pk).title == "book a table"
    titled = ConversationFactory(title="Trip")
    services.add_message(conversation=titled, role="user", content="hi")
    assert Conversation.objects.get(pk=titled.pk).title == "Trip"


def test_a_tool_call_moves_from_pending_to_success_or_error():
    issuer = MessageFactory(role=Message.Role.ASSISTANT, message_type=Message.Type.TOOL_CALL)
    ok = services.record_tool_call(message=issuer, tool_call_id="c1", name="t", arguments={"a": 1})
    bad = services.record_tool_call(message=issuer, tool_call_id="c2", name="t", arguments=None)
    assert (ok.status, bad.input) == (ToolCall.Status.PENDING, {})
    services.complete_tool_call(tool_call=ok, output='{"status": "added"}', error=None)
    services.complete_tool_call(tool_call=bad, output='{"status": "denied"}', error="no")
    stored = {c.tool_call_id: (c.status, c.error) for c in ToolCall.objects.all()}
    assert stored == {"c1": ("success", ""), "c2": ("error", "no")}


def test_a_runs_messages_and_tool_calls_are_one_statement_tagged_with_the_run():
    thread = ConversationFactory()
    messages = [
        services.RunMessage(
            role=Message.Role.ASSISTANT,
            content="",
            tool_calls=[
                services.RunToolCall(tool_call_id="c1", name="t", arguments={"a": 1}),
                services.RunToolCall(
                    tool_call_id="c2", name="t", arguments={}, status="error", error="no"
                ),
            ],
        ),
        services.RunMessage(
            role=Message.Role.TOOL,
            content="{}",
            message_type=Message.Type.TOOL_RESULT,
            metadata={"tool_call_id": "c1"},
        ),
        services.RunMessage(
            role=Message.Role.ASSISTANT,
            content="again",
            tool_calls=[services.RunToolCall(tool_call_id="c3", name="u", arguments=[1, "x"])],
        ),
        services.RunMessage(role=Message.Role.ASSISTANT, content="done"),
    ]
    # Counted without Django's query log, so the statement runs prepared, as in production.
    with count_statements() as counted:
        rows = services.record_run_messages(conversation=thread, run_id="r1", messages=messages)
    assert len(counted) == 1
    stored = list(thread.messages.values_list("pk", "role", "content", "metadata", "created_at"))
    assert stored == [(row.pk, row.role, row.content, row.metadata, row.created_at) for row in rows]
    assert [(role, content, metadata) for _, role, content, metadata, _ in stored] == [
        ("assistant", "", {"run_id": "r1"}),
        ("tool", "{}", {"run_id": "r1", "tool_call_id": "c1"}),
        ("assistant", "again", {"run_id": "r1"}),
        ("assistant", "done", {"run_id": "r1"}),
    ]
    calls = [
        (c.tool_call_id, c.message_id, c.input, c.status, c.error)
        for c in ToolCall.objects.order_by("created_at", "id")
    ]
    assert calls == [
        ("c1", rows[0].pk, {"a": 1}, "pending", ""),
        ("c2", rows[0].pk, {}, "error", "no"),
        ("c3", rows[2].pk, [1, "x"], "pending", ""),
    ]


def test_a_run_without_tool_calls_stores_its_messages_in_one_insert(django_assert_num_queries):
    thread = ConversationFactory()
    user = services.RunMessage(role=Message.Role.USER, content="hi")
    with django_assert_num_queries(1):
        services.record_run_messages(conversation=thread, run_id="r1", messages=[user])
    assert thread.messages.get().metadata == {"run_id": "r1"}


def test_delete_user_conversations_deletes_only_that_users_rows_by_table():
    call = ToolCallFactory()
    user_id = call.message.conversation.user_id
    AgentRunFactory(user_id=user_id, conversation=call.message.conversation)
    kept = ToolCallFactory()
    with transaction.atomic():
        counts = services.delete_user_conversations(user_id=user_id)
    assert counts == {"checkpoints": 0, "tool_calls": 1, "messages": 1, "runs": 1, "threads": 1}
    assert not Conversation.objects.filter(user_id=user_id).exists()
    assert not AgentRun.objects.filter(user_id=user_id).exists()
    assert ToolCall.objects.get() == kept
