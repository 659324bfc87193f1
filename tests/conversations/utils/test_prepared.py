"""`PreparedQuery`: compiled once, it gives what its queryset gives for each call's values."""

from datetime import UTC, datetime

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db.models import Count, Exists, OuterRef

from conversations.models import Conversation, Message
from conversations.utils.prepared import PreparedQuery
from conversations.utils.statements import count_statements
from tests.factories import ConversationFactory, MessageFactory, UserFactory

pytestmark = pytest.mark.django_db


def threads_of(*, user_id: int, title: str):
    return (
        Conversation.objects.filter(user_id=user_id, title=title)
        .annotate(
            has_messages=Exists(Message.objects.filter(conversation=OuterRef("pk"))),
            message_count=Count("messages"),
        )
        .order_by("pk")
    )


def test_it_gives_the_instances_and_annotations_its_queryset_gives_for_each_calls_values():
    prepared = PreparedQuery(threads_of, user_id=-991, title="placeholder title")
    users = UserFactory.create_batch(2)
    for user in users:
        talked = ConversationFactory(user=user, title="Trip", metadata={"k": [1, "二"]})
        MessageFactory.create_batch(2, conversation=talked)
        ConversationFactory(user=user, title="Trip")
        ConversationFactory(user=user, title="Other")
    for user in users:
        expected = list(threads_of(user_id=user.pk, title="Trip"))
        got = prepared(user_id=user.pk, title="Trip")
        assert [c.pk for c in got] == [c.pk for c in expected]
        assert [(c.has_messages, c.message_count) for c in got] == [(True, 2), (False, 0)]
        # Fields go through their converters (JSON decoded), as the ORM's own rows do.
        assert [c.metadata for c in got] == [c.metadata for c in expected]
        assert got[0].metadata == {"k": [1, "二"]}
        assert isinstance(got[0], Conversation) and got[0]._state.adding is False
    assert prepared(user_id=users[0].pk, title="none such") == []


def test_values_querysets_give_dicts_and_a_placeholder_used_twice_takes_the_value_twice():
    conversation = ConversationFactory()
    messages = MessageFactory.create_batch(3, conversation=conversation)
    moment = messages[1].created_at

    def around(*, conversation_id: int, at: datetime):
        return (
            Message.objects.filter(conversation_id=conversation_id, created_at__lte=at)
            .exclude(created_at__gt=at)
            .order_by("id")
            .values("id", "content")
        )

    prepared = PreparedQuery(around, conversation_id=-992, at=datetime(1901, 1, 1, tzinfo=UTC))
    expected = list(around(conversation_id=conversation.pk, at=moment))
    assert prepared(conversation_id=conversation.pk, at=moment) == expected
    assert all(isinstance(row, dict) for row in expected) and expected


def test_it_compiles_once_and_sends_one_statement_per_call():
    prepared = PreparedQuery(threads_of, user_id=-993, title="placeholder title")
    user = UserFactory()
    prepared(user_id=user.pk, title="x")
    compiled = prepared._compiled
    with count_statements() as counted:
        prepared(user_id=user.pk, title="y")
    assert len(counted) == 1 and prepared._compiled is compiled


def test_a_placeholder_that_is_no_parameter_of_the_sql_is_refused():
    prepared = PreparedQuery(lambda *, limit: Conversation.objects.all()[:limit], limit=7_349_994)
    with pytest.raises(ImproperlyConfigured, match="limit"):
        prepared(limit=5)


def test_a_call_must_give_exactly_the_placeholders():
    prepared = PreparedQuery(threads_of, user_id=-995, title="placeholder title")
    with pytest.raises(TypeError):
        prepared(user_id=1)
