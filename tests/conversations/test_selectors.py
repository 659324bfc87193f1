from datetime import timedelta

import pytest

from conversations.selectors import RAW_CONTENT_BYTES, RAW_MESSAGES_SHOWN, raw_messages_excerpt
from tests.factories import ConversationFactory, MessageFactory

pytestmark = pytest.mark.django_db


def test_raw_excerpt_keeps_the_latest_messages_in_thread_order():
    thread = ConversationFactory()
    first = MessageFactory(conversation=thread)
    messages = [
        MessageFactory(conversation=thread, created_at=first.created_at + timedelta(seconds=i))
        for i in range(1, RAW_MESSAGES_SHOWN + 3)
    ]
    MessageFactory()  # another thread's message is never counted
    page = raw_messages_excerpt(conversation_id=thread.pk)
    assert [m.message_id for m in page.messages] == [m.pk for m in messages[-RAW_MESSAGES_SHOWN:]]
    assert page.earlier_count == 3


def test_raw_excerpt_cuts_content_at_a_utf8_boundary_and_reports_its_size():
    content = "é" * RAW_CONTENT_BYTES
    message = MessageFactory(content=content)
    (raw,) = raw_messages_excerpt(conversation_id=message.conversation_id).messages
    assert raw.truncated
    assert raw.content == "é" * (RAW_CONTENT_BYTES // 2)
    assert raw.content_bytes == 2 * RAW_CONTENT_BYTES


def test_raw_excerpt_keeps_short_content_whole():
    message = MessageFactory(content="short 内容")
    (raw,) = raw_messages_excerpt(conversation_id=message.conversation_id).messages
    assert (raw.content, raw.truncated, raw.content_bytes) == ("short 内容", False, 12)
