"""The data model: every model, field, kind, relation and enum value the contract lists."""

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model

from conversations import runs
from conversations.models import AgentRun, Conversation, Message, ToolCall
from memory_app.middleware import YuxiMemoryMiddleware
from memory_app.models import UserConfig
from memory_app.runtime import build_chatbot_graph
from tests.factories import ConversationFactory, MessageFactory, UserFactory, context_for


@pytest.mark.parametrize(
    ("model", "fields"),
    [
        (
            Conversation,
            "thread_id user title status source parent metadata created_at updated_at",
        ),
        (
            Message,
            "conversation role message_type content image_content attachments feedback "
            "metadata created_at",
        ),
        (
            ToolCall,
            "message tool_call_id name input output status error metadata created_at",
        ),
        (
            AgentRun,
            "run_id user conversation request_id run_type parent_run status worker_id "
            "lease_expires_at created_at started_at finished_at",
        ),
        (UserConfig, "user enable_memory"),
    ],
)
def test_every_model_has_the_fields_spec_lists(model, fields):
    names = {field.name for field in model._meta.get_fields()}
    assert set(fields.split()) <= names


TEXT, STRING, JSON, MOMENT = "TextField", "CharField", "JSONField", "DateTimeField"


@pytest.mark.parametrize(
    ("model", "types"),
    [
        (
            Conversation,
            {"thread_id": STRING, "title": TEXT, "metadata": JSON, "created_at": MOMENT},
        ),
        (
            Message,
            {
                "content": TEXT,
                "image_content": TEXT,
                "attachments": JSON,
                "feedback": JSON,
                "metadata": JSON,
            },
        ),
        (
            ToolCall,
            {"tool_call_id": STRING, "input": JSON, "output": TEXT, "error": TEXT},
        ),
        (
            AgentRun,
            {"request_id": STRING, "worker_id": STRING, "lease_expires_at": MOMENT},
        ),
        (UserConfig, {"enable_memory": "BooleanField"}),
    ],
)
def test_fields_have_the_spec_kinds(model, types):
    kinds = {name: model._meta.get_field(name).get_internal_type() for name in types}
    assert kinds == types


@pytest.mark.parametrize(
    ("model", "field", "target"),
    [
        (Conversation, "parent", Conversation),
        (Message, "conversation", Conversation),
        (ToolCall, "message", Message),
        (AgentRun, "conversation", Conversation),
        (AgentRun, "parent_run", AgentRun),
    ],
)
def test_relations_point_where_spec_says(model, field, target):
    assert model._meta.get_field(field).related_model is target


def test_users_are_the_auth_user_model():
    user_model = get_user_model()
    for model in (Conversation, AgentRun, UserConfig):
        assert model._meta.get_field("user").related_model is user_model


@pytest.mark.parametrize(
    ("model", "field", "values"),
    [
        (Conversation, "status", {"active", "archived", "deleted"}),
        (Message, "role", {"user", "assistant", "system", "tool"}),
        (ToolCall, "status", {"pending", "success", "error", "declined"}),
        (AgentRun, "run_type", {"chat", "resume", "subagent"}),
        (
            AgentRun,
            "status",
            {"pending", "running", "succeeded", "failed", "cancelled", "interrupted"},
        ),
    ],
)
def test_closed_enums_have_exactly_the_spec_values(model, field, values):
    assert {value for value, _ in model._meta.get_field(field).choices} == values


@pytest.mark.parametrize(
    ("model", "field", "values"),
    [
        (Conversation, "source", {"chat", "api", "agent_call", "agent_evaluation"}),
        (Message, "message_type", {"text", "tool_call", "tool_result"}),
    ],
)
def test_open_enums_have_at_least_the_spec_values(model, field, values):
    assert values <= {value for value, _ in model._meta.get_field(field).choices}


@pytest.mark.parametrize(
    ("model", "field"),
    [
        (Conversation, "parent"),
        (Message, "image_content"),
        (AgentRun, "parent_run"),
        (AgentRun, "worker_id"),
        (AgentRun, "lease_expires_at"),
    ],
)
def test_fields_spec_calls_nullable_are_nullable(model, field):
    assert model._meta.get_field(field).null is True


def test_thread_id_and_run_id_are_unique_and_run_id_is_a_uuid():
    assert Conversation._meta.get_field("thread_id").unique
    assert AgentRun._meta.get_field("run_id").unique
    assert AgentRun._meta.get_field("run_id").get_internal_type() == "UUIDField"
    assert UserConfig._meta.get_field("user").one_to_one


@pytest.mark.django_db
def test_messages_are_ordered_by_created_at_then_id():
    conversation = ConversationFactory()
    moment = conversation.created_at
    later = MessageFactory(conversation=conversation, created_at=moment + timedelta(seconds=1))
    first_tie = MessageFactory(conversation=conversation, created_at=moment)
    second_tie = MessageFactory(conversation=conversation, created_at=moment)
    assert list(Message.objects.filter(conversation=conversation)) == [
        first_tie,
        second_tie,
        later,
    ]


@pytest.mark.django_db
def test_user_config_defaults_to_off_and_no_row_means_off(run):
    user = UserFactory()
    assert UserConfig.objects.create(user=user).enable_memory is False
    UserConfig.objects.filter(user=run.user).delete()
    graph = build_chatbot_graph(context_for(run))
    assert graph.tools == []
    assert not any(isinstance(m, YuxiMemoryMiddleware) for m in graph.middleware if m)


@pytest.mark.django_db
def test_a_claim_leases_by_the_setting_and_finishing_clears_the_lease(settings):
    settings.AGENT_RUN_LEASE_SECONDS = 123
    conversation = ConversationFactory()
    pending = runs.create_run(
        user_id=conversation.user_id, conversation=conversation, request_id="req-1"
    )
    claimed = runs.claim_run(worker_id="worker-a", run_id=pending.run_id)
    assert (claimed.status, claimed.worker_id) == ("running", "worker-a")
    lease = claimed.lease_expires_at - claimed.started_at
    # Both ends are read from clock_timestamp() in one UPDATE, microseconds apart.
    assert abs(lease - timedelta(seconds=123)) < timedelta(seconds=1)
    finished = runs.finish_run(run_id=pending.run_id, worker_id="worker-a", status="succeeded")
    assert (finished.status, finished.worker_id, finished.lease_expires_at) == (
        "succeeded",
        None,
        None,
    )
    assert finished.finished_at is not None
