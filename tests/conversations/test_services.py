import pytest

from conversations import services
from conversations.models import Conversation, Message, ToolCall
from conversations.services import THREAD_TITLE_MAX_BYTES
from tests.factories import ConversationFactory, MessageFactory, UserFactory

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
