"""Writes of conversations: threads, messages and tool calls as an agent run produces them."""

import uuid
from typing import Any

from django.db.models import Case, F, Value, When

from conversations.models import Conversation, Message, ToolCall
from yuxi_site.utils.db_functions import ClockTimestamp
from yuxi_site.utils.string_utils import is_storable_text, truncate_utf8

# A thread's title is its first message, cut to this many bytes.
THREAD_TITLE_MAX_BYTES = 256


def _title(message: str) -> str:
    """A thread's title from its first message: whitespace runs made one space, cut."""
    title, _ = truncate_utf8(" ".join(message.split()), THREAD_TITLE_MAX_BYTES)
    return title


def start_thread(
    *,
    user_id: int,
    first_message: str,
    source: str = Conversation.Source.CHAT,
    parent: Conversation | None = None,
) -> Conversation:
    """A new active thread of `user_id`, titled by its first message."""
    return Conversation.objects.create(
        thread_id=f"thread-{uuid.uuid4().hex}",
        user_id=user_id,
        title=_title(first_message),
        source=source,
        parent=parent,
    )


def add_message(
    *,
    conversation: Conversation,
    role: str,
    content: str,
    message_type: str = Message.Type.TEXT,
    metadata: dict[str, Any] | None = None,
) -> Message:
    """Append one message to a thread and mark the thread updated at the message's time.

    Both are the database clock's (`created_at` is its `clock_timestamp()`, returned by the
    insert), so several app hosts with skewed clocks still order one thread consistently. An
    untitled thread (one `agent_run` opened) takes its first user text message as its title,
    as a chat thread does, in the same UPDATE.
    """
    message = Message.objects.create(
        conversation=conversation,
        role=role,
        message_type=message_type,
        content=content,
        metadata=metadata or {},
    )
    changes: dict[str, Any] = {"updated_at": message.created_at}
    if role == Message.Role.USER and message_type == Message.Type.TEXT:
        changes["title"] = Case(
            When(title="", then=Value(_title(content))),
            default=F("title"),
            output_field=Conversation._meta.get_field("title"),
        )
    Conversation.objects.filter(pk=conversation.pk).update(**changes)
    return message


def record_tool_call(
    *, message: Message, tool_call_id: str, name: str, arguments: dict[str, Any] | None
) -> ToolCall:
    """A pending tool call issued by the assistant `message`."""
    return ToolCall.objects.create(
        message=message,
        tool_call_id=tool_call_id,
        name=name,
        input=arguments if arguments is not None else {},
    )


def complete_tool_call(*, tool_call: ToolCall, output: str, error: str | None) -> ToolCall:
    """Store a tool call's result: `success`, or `error` with the refusal's message."""
    tool_call.output = output
    tool_call.status = ToolCall.Status.ERROR if error is not None else ToolCall.Status.SUCCESS
    tool_call.error = error or ""
    tool_call.save(update_fields=["output", "status", "error"])
    return tool_call


class ThreadNotFound(Exception):
    """No thread with that id belongs to the user (another user's thread looks the same)."""


def set_thread_status(*, user_id: int, thread_id: str, status: str) -> Conversation:
    """Archive, delete or restore one of `user_id`'s threads (what history lookback may see).

    Only a thread their thread list can show: a SubAgent child or agent traffic is not the
    user's to restore into lookback, so it is `ThreadNotFound` like another user's thread.
    """
    if status not in Conversation.Status.values:
        raise ValueError(f"{status!r} is not a thread status")
    if not is_storable_text(thread_id):
        raise ThreadNotFound(thread_id)
    threads = Conversation.objects.listed_to(user_id).filter(thread_id=thread_id)
    if not threads.update(status=status, updated_at=ClockTimestamp()):
        raise ThreadNotFound(thread_id)
    return threads.get()
