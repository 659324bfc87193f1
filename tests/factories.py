"""factory-boy factories for the user and all five models."""

import uuid
from datetime import timedelta

import factory
from django.contrib.auth import get_user_model

from conversations.models import AgentRun, Conversation, Message, ToolCall
from conversations.runs import ToolRuntimeContext
from conversations.runs.leases import db_clock
from memory_app.models import MemoryEvent, UserConfig


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    password = factory.django.Password("pw")


class UserConfigFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = UserConfig

    user = factory.SubFactory(UserFactory)
    enable_memory = True


class ConversationFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Conversation

    thread_id = factory.LazyFunction(lambda: f"thread-{uuid.uuid4().hex}")
    user = factory.SubFactory(UserFactory)
    title = factory.Sequence(lambda n: f"Conversation {n}")


class MessageFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Message

    conversation = factory.SubFactory(ConversationFactory)
    role = Message.Role.USER
    message_type = Message.Type.TEXT
    content = factory.Sequence(lambda n: f"message {n}")


class ToolCallFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ToolCall

    message = factory.SubFactory(MessageFactory, role=Message.Role.ASSISTANT)
    tool_call_id = factory.LazyFunction(lambda: f"call_{uuid.uuid4().hex[:12]}")
    name = "remember_memory"
    input = factory.LazyFunction(lambda: {"content": "a fact"})
    output = '{"status": "added"}'
    status = ToolCall.Status.SUCCESS


class AgentRunFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = AgentRun

    conversation = factory.SubFactory(ConversationFactory)
    user = factory.SelfAttribute("conversation.user")
    request_id = factory.LazyFunction(lambda: f"req-{uuid.uuid4().hex[:12]}")
    run_type = AgentRun.RunType.CHAT


class StaffUserFactory(UserFactory):
    """A staff superuser, as the demo's `admin`: may view every admin page."""

    is_staff = True
    is_superuser = True


class RunningAgentRunFactory(AgentRunFactory):
    """A top-level run a worker has claimed, with a lease well in the future."""

    status = AgentRun.Status.RUNNING
    worker_id = factory.Sequence(lambda n: f"worker-{n}")
    # Leases are judged by the database clock, so they are set from it too.
    started_at = factory.LazyFunction(db_clock)
    lease_expires_at = factory.LazyFunction(lambda: db_clock() + timedelta(minutes=10))


class MemoryEventFactory(factory.django.DjangoModelFactory):
    """An agent's memory change: a run of the user, hashes chained from the empty file."""

    class Meta:
        model = MemoryEvent

    user = factory.SubFactory(UserFactory)
    kind = MemoryEvent.Kind.AGENT_ADDED
    run = factory.SubFactory(
        AgentRunFactory,
        conversation=factory.SubFactory(ConversationFactory, user=factory.SelfAttribute("...user")),
    )
    before_sha256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    after_sha256 = factory.Sequence(lambda n: f"{n:064x}")
    size_bytes = 42


def memory_user(**kwargs: object) -> object:
    """A user whose memory switch is on."""
    return UserConfigFactory(**kwargs).user


def memory_run(**kwargs: object) -> AgentRun:
    """A running top-level chat run, leased to its worker, of a user whose memory is on."""
    return RunningAgentRunFactory(conversation=ConversationFactory(user=memory_user()), **kwargs)


def context_for(run: AgentRun, **overrides: str) -> ToolRuntimeContext:
    """The trusted context the Chat service would write for `run`, with fields overridden."""
    fields = {
        "uid": str(run.user_id),
        "thread_id": run.conversation.thread_id,
        "run_id": str(run.run_id),
        "request_id": run.request_id,
        "worker_id": run.worker_id,
    }
    fields.update(overrides)
    return ToolRuntimeContext(**fields)
