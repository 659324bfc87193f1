from datetime import timedelta

import pytest

from conversations.models import VISIBLE_MESSAGE, Conversation, Message
from conversations.selectors.dialogue import (
    DIALOGUE_CONTENT_MAX_BYTES,
    DIALOGUE_MAX_MESSAGES,
    chat_thread_entry,
    recent_dialogue,
)
from conversations.selectors.export import count_user_conversations
from conversations.selectors.staff import (
    RAW_CONTENT_BYTES,
    RAW_MESSAGES_SHOWN,
    raw_messages_excerpt,
)
from conversations.selectors.stated_messages import STATED_MESSAGES_MAX, user_messages_containing
from tests.factories import AgentRunFactory, ConversationFactory, MessageFactory, ToolCallFactory

pytestmark = pytest.mark.django_db


def test_the_chat_thread_entry_finds_only_the_users_visible_thread():
    thread = ConversationFactory()
    child = ConversationFactory(user=thread.user, parent=thread)
    archived = ConversationFactory(user=thread.user, status=Conversation.Status.ARCHIVED)
    found, _ = chat_thread_entry(user_id=thread.user_id, thread_id=thread.thread_id)
    assert found == thread
    other, _ = chat_thread_entry(user_id=thread.user_id + 1, thread_id=thread.thread_id)
    assert other is None
    for hidden in (child, archived):
        entry = chat_thread_entry(user_id=thread.user_id, thread_id=hidden.thread_id)
        assert entry[0] is None


def test_recent_dialogue_is_the_latest_user_and_assistant_text_before_the_anchor():
    thread = ConversationFactory()
    texts = [MessageFactory(conversation=thread) for _ in range(DIALOGUE_MAX_MESSAGES + 2)]
    MessageFactory(conversation=thread, role=Message.Role.TOOL, message_type="tool_result")
    MessageFactory(conversation=thread, role=Message.Role.ASSISTANT, message_type="tool_call")
    MessageFactory(conversation=thread, role=Message.Role.SYSTEM)
    MessageFactory(conversation=ConversationFactory(user=thread.user))
    anchor = MessageFactory(conversation=thread)
    MessageFactory(conversation=thread)
    dialogue = recent_dialogue(conversation=thread, before=anchor)
    assert [(turn.role, turn.content) for turn in dialogue] == [
        (m.role, m.content) for m in texts[-DIALOGUE_MAX_MESSAGES:]
    ]


def test_recent_dialogue_admits_exactly_what_the_lookback_message_rule_admits():
    thread = ConversationFactory()
    every_kind = [
        MessageFactory(conversation=thread, role=role, message_type=message_type)
        for role in Message.Role.values
        for message_type in Message.Type.values
    ]
    anchor = MessageFactory(conversation=thread)
    dialogue = recent_dialogue(conversation=thread, before=anchor)
    visible = Message.objects.filter(VISIBLE_MESSAGE, pk__in=[m.pk for m in every_kind])
    assert [turn.content for turn in dialogue] == [m.content for m in visible.order_by("id")]
    assert {(m.role, m.message_type) for m in visible} == {("user", "text"), ("assistant", "text")}


def test_recent_dialogue_cuts_off_at_the_anchor_in_created_at_then_id_order():
    thread = ConversationFactory()
    at = thread.created_at
    tied_before = MessageFactory(conversation=thread, content="tied, lower id", created_at=at)
    later_but_lower_id = MessageFactory(
        conversation=thread, content="later, lower id", created_at=at + timedelta(seconds=1)
    )
    anchor = MessageFactory(conversation=thread, created_at=at)
    earlier_but_higher_id = MessageFactory(
        conversation=thread, content="earlier, higher id", created_at=at - timedelta(seconds=1)
    )
    MessageFactory(conversation=thread, content="tied, higher id", created_at=at)
    assert tied_before.pk < later_but_lower_id.pk < anchor.pk < earlier_but_higher_id.pk
    dialogue = recent_dialogue(conversation=thread, before=anchor)
    assert [turn.content for turn in dialogue] == ["earlier, higher id", "tied, lower id"]


def test_recent_dialogue_cuts_each_content_in_the_database(django_assert_max_num_queries):
    thread = ConversationFactory()
    huge = MessageFactory(conversation=thread, role=Message.Role.ASSISTANT, content="é" * 10**6)
    short = MessageFactory(conversation=thread, content="short")
    anchor = MessageFactory(conversation=thread)
    with django_assert_max_num_queries(1) as captured:
        dialogue = recent_dialogue(conversation=thread, before=anchor)
    assert [turn.role for turn in dialogue] == [huge.role, short.role]
    cut = dialogue[0].content
    assert len(cut.encode("utf-8")) == DIALOGUE_CONTENT_MAX_BYTES and dialogue[0].truncated
    assert huge.content.startswith(cut)
    assert (dialogue[1].content, dialogue[1].truncated) == ("short", False)
    assert "LEFT(" in captured[0]["sql"]
    assert '"conversations_message"."content",' not in captured[0]["sql"]


def test_the_chat_thread_entry_of_an_id_no_database_can_store_is_none_without_a_query(
    django_assert_num_queries,
):
    thread = ConversationFactory()
    with django_assert_num_queries(0):
        for thread_id in (thread.thread_id + "\x00", "\ud800"):
            found, _ = chat_thread_entry(user_id=thread.user_id, thread_id=thread_id)
            assert found is None


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
    assert page.has_earlier  # said without counting the thread


def test_raw_excerpt_of_a_short_thread_says_nothing_is_earlier():
    thread = ConversationFactory()
    MessageFactory.create_batch(RAW_MESSAGES_SHOWN, conversation=thread)
    page = raw_messages_excerpt(conversation_id=thread.pk)
    assert len(page.messages) == RAW_MESSAGES_SHOWN
    assert not page.has_earlier


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


def test_raw_excerpt_flags_an_ascii_content_one_byte_over_the_cap_as_cut():
    message = MessageFactory(content="a" * (RAW_CONTENT_BYTES + 1))
    (raw,) = raw_messages_excerpt(conversation_id=message.conversation_id).messages
    assert (raw.content, raw.truncated) == ("a" * RAW_CONTENT_BYTES, True)


def test_count_user_conversations_counts_each_kind_for_the_given_users_only():
    first = MessageFactory()
    second = MessageFactory(conversation=ConversationFactory(user=first.conversation.user))
    ToolCallFactory(message=second)
    AgentRunFactory(user=first.conversation.user, conversation=first.conversation)
    MessageFactory()  # another user's
    counts = count_user_conversations(user_ids=[first.conversation.user_id])
    assert counts == {"threads": 2, "messages": 2, "tool_calls": 1, "runs": 1}
    assert count_user_conversations(user_ids=[]) == dict.fromkeys(counts, 0)


# --- the user's own recent messages a memory write is checked against -------------------------


def test_user_messages_containing_reads_the_newest_own_user_messages_of_any_thread():
    thread = ConversationFactory()
    other = ConversationFactory(user=thread.user)
    MessageFactory(conversation=thread, content="My PIN is 4821")
    MessageFactory(conversation=other, content="pin 4821 again")
    MessageFactory(conversation=thread, role=Message.Role.ASSISTANT, content="4821 noted")
    MessageFactory(conversation=ConversationFactory(), content="someone else's 4821")
    MessageFactory(conversation=thread, content="nothing here")
    found = user_messages_containing(user_id=thread.user_id, needles=["4821"])
    assert sorted(found) == ["My PIN is 4821", "pin 4821 again"]
    assert user_messages_containing(user_id=thread.user_id, needles=[]) == []


def test_user_messages_containing_takes_needles_literally_and_ignores_case():
    thread = ConversationFactory()
    MessageFactory(conversation=thread, content="axxb and Tr0ub4dor")
    assert user_messages_containing(user_id=thread.user_id, needles=["a%b", "a_xb"]) == []
    assert user_messages_containing(user_id=thread.user_id, needles=["TR0UB4DOR"]) == [
        "axxb and Tr0ub4dor"
    ]


def test_user_messages_containing_reads_only_the_last_30_days_and_newest_1000():
    thread = ConversationFactory()
    old = MessageFactory(conversation=thread, content="old 4821")
    Message.objects.filter(pk=old.pk).update(created_at=old.created_at - timedelta(days=31))
    assert user_messages_containing(user_id=thread.user_id, needles=["4821"]) == []
    Message.objects.filter(pk=old.pk).update(created_at=old.created_at)
    Message.objects.bulk_create(
        Message(conversation=thread, role=Message.Role.USER, content=f"later {n}")
        for n in range(STATED_MESSAGES_MAX)
    )
    assert user_messages_containing(user_id=thread.user_id, needles=["4821"]) == []
