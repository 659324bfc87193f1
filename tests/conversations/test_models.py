import random
import re

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.models import F
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from conversations.models import AgentRun, CjkBigrams, Conversation, Message, ToolCall
from tests.factories import (
    AgentRunFactory,
    ConversationFactory,
    MessageFactory,
    ToolCallFactory,
    UserFactory,
)

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


def _every_kind_of_thread(user):
    root = ConversationFactory(user=user)
    threads = [root]
    for status in Conversation.Status.values:
        for source in Conversation.Source.values:
            for parent in (None, root):
                threads.append(
                    ConversationFactory(user=user, status=status, source=source, parent=parent)
                )
    return threads


def test_hidden_reasons_are_empty_exactly_for_threads_lookback_can_see():
    user = UserFactory()
    threads = _every_kind_of_thread(user)
    visible = set(Conversation.objects.visible_to(user.pk))
    annotated = Conversation.objects.with_lookback_visibility().filter(user=user)
    assert len(annotated) == len(threads)
    for thread in annotated:
        assert (thread.lookback_hidden_reasons() == []) == (thread in visible)


def test_hidden_reasons_name_every_failed_condition():
    root = ConversationFactory()
    child = ConversationFactory(
        user=root.user,
        parent=root,
        status=Conversation.Status.ARCHIVED,
        source=Conversation.Source.AGENT_EVALUATION,
    )
    reasons = Conversation.objects.with_lookback_visibility().get(pk=child.pk)
    reasons = reasons.lookback_hidden_reasons()
    assert len(reasons) == 3
    assert any("SubAgent child" in reason for reason in reasons)
    assert any("archived" in reason for reason in reasons)
    assert any("agent_evaluation" in reason for reason in reasons)


def test_hidden_reasons_cost_no_query_once_annotated(django_assert_num_queries):
    thread = ConversationFactory(status=Conversation.Status.DELETED)
    with django_assert_num_queries(1):
        loaded = Conversation.objects.with_lookback_visibility().get(pk=thread.pk)
        assert loaded.lookback_hidden_reasons() == [
            "its status is deleted; only active threads are visible"
        ]


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


def _python_cjk_bigrams(text: str) -> set[str]:
    runs = re.split("[\x01-\u2e7f]+", text)
    return {run[i : i + 2] for run in runs for i in range(len(run) - 1)}


@given(
    text=st.text(
        alphabet=st.sampled_from(["中", "文", "字", "😀", "a", " ", "\n", "ん", "語"]), max_size=60
    )
)
@hypothesis_settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_cjk_bigrams_match_a_plain_pair_scan_at_every_offset(text):
    with connection.cursor() as cursor:
        cursor.execute("SELECT yuxi_cjk_bigrams(%s)", [text])
        assert set(cursor.fetchone()[0]) == _python_cjk_bigrams(text)


def test_cjk_bigrams_of_a_long_message_are_all_found():
    rng = random.Random(7)
    text = "".join(chr(0x4E00 + rng.randrange(2500)) for _ in range(50_000)) + "龍鳳"
    message = MessageFactory(content=text)
    value = Message.objects.annotate(b=CjkBigrams(F("content"))).values_list("b", flat=True)
    assert set(value.get(pk=message.pk)) == _python_cjk_bigrams(text)
