import pytest

from conversations import selectors
from conversations.models import Conversation, Message
from conversations.selectors import DIALOGUE_MAX_MESSAGES
from tests.factories import ConversationFactory, MessageFactory

pytestmark = pytest.mark.django_db


def test_get_chat_thread_finds_only_the_users_visible_thread():
    thread = ConversationFactory()
    child = ConversationFactory(user=thread.user, parent=thread)
    archived = ConversationFactory(user=thread.user, status=Conversation.Status.ARCHIVED)
    found = selectors.get_chat_thread(user_id=thread.user_id, thread_id=thread.thread_id)
    assert found == thread
    assert selectors.get_chat_thread(user_id=thread.user_id + 1, thread_id=thread.thread_id) is None
    for hidden in (child, archived):
        assert selectors.get_chat_thread(user_id=thread.user_id, thread_id=hidden.thread_id) is None


def test_recent_dialogue_is_the_latest_user_and_assistant_text_before_the_anchor():
    thread = ConversationFactory()
    texts = [MessageFactory(conversation=thread) for _ in range(DIALOGUE_MAX_MESSAGES + 2)]
    MessageFactory(conversation=thread, role=Message.Role.TOOL, message_type="tool_result")
    MessageFactory(conversation=thread, role=Message.Role.ASSISTANT, message_type="tool_call")
    MessageFactory(conversation=thread, role=Message.Role.SYSTEM)
    MessageFactory(conversation=ConversationFactory(user=thread.user))
    anchor = MessageFactory(conversation=thread)
    MessageFactory(conversation=thread)
    dialogue = selectors.recent_dialogue(conversation=thread, before=anchor)
    assert dialogue == texts[-DIALOGUE_MAX_MESSAGES:]
