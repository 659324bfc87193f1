import pytest
from django.db import IntegrityError, transaction
from django.db.models import F

from conversations.models import AgentRun, CjkBigrams, Conversation, Message, ToolCall
from tests.factories import AgentRunFactory, ConversationFactory, MessageFactory, ToolCallFactory

pytestmark = pytest.mark.django_db

ENUM_FIELDS = [
    (ConversationFactory, Conversation, "status"),
    (ConversationFactory, Conversation, "source"),
    (MessageFactory, Message, "role"),
    (MessageFactory, Message, "message_type"),
    (ToolCallFactory, ToolCall, "status"),
    (AgentRunFactory, AgentRun, "run_type"),
    (AgentRunFactory, AgentRun, "status"),
]


@pytest.mark.parametrize(("factory", "model", "field"), ENUM_FIELDS)
def test_database_rejects_a_value_outside_the_enum(factory, model, field):
    obj = factory()
    with pytest.raises(IntegrityError), transaction.atomic():
        model.objects.filter(pk=obj.pk).update(**{field: "bogus"})


@pytest.mark.parametrize(("factory", "model", "field"), ENUM_FIELDS)
def test_database_accepts_every_enum_value(factory, model, field):
    obj = factory()
    for value in model._meta.get_field(field).choices:
        model.objects.filter(pk=obj.pk).update(**{field: value[0]})
        assert model.objects.filter(pk=obj.pk, **{field: value[0]}).exists()


def test_visible_to_keeps_only_own_active_ordinary_top_level_threads():
    mine = ConversationFactory()
    user = mine.user
    api = ConversationFactory(user=user, source=Conversation.Source.API)
    ConversationFactory(user=user, status=Conversation.Status.ARCHIVED)
    ConversationFactory(user=user, status=Conversation.Status.DELETED)
    ConversationFactory(user=user, source=Conversation.Source.AGENT_CALL)
    ConversationFactory(user=user, source=Conversation.Source.AGENT_EVALUATION)
    ConversationFactory(user=user, parent=mine)
    ConversationFactory()
    assert set(Conversation.objects.visible_to(user.pk)) == {mine, api}
    assert set(Conversation.objects.visible_to(str(user.pk))) == {mine, api}


def test_messages_are_ordered_by_created_at_then_id():
    first = MessageFactory()
    same_time = MessageFactory(conversation=first.conversation, created_at=first.created_at)
    assert list(Message.objects.filter(conversation=first.conversation)) == [first, same_time]


@pytest.mark.parametrize(
    ("text", "bigrams"),
    [
        ("你好世界", ["世界", "你好", "好世"]),
        ("ab 你好 cd 你好", ["你好"]),
        ("日本語です", ["です", "日本", "本語", "語で"]),
        ("你 好", []),
        ("plain ascii", []),
        ("", []),
    ],
)
def test_cjk_bigrams_are_the_distinct_pairs_within_cjk_runs(text, bigrams):
    MessageFactory(content=text)
    value = Message.objects.annotate(b=CjkBigrams(F("content"))).values_list("b", flat=True).get()
    assert sorted(value) == sorted(bigrams)
