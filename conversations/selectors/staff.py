"""Bounded excerpts of the stored record for the staff pages: a thread's latest raw messages,
the first rows of a related table, and the tool calls each run issued.

Every read is cut by the database (a row more than shown says whether more exist; nothing is
counted, no large column read), so a staff page costs the same for the largest thread.
"""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import F, Q, QuerySet
from django.db.models.fields.json import KeyTextTransform

from conversations.models import AgentRun, Conversation, Message, ToolCall
from conversations.utils.db_functions import byte_length, text_prefix
from conversations.utils.string_utils import truncate_utf8

# How many of a thread's latest messages a raw preview lists.
RAW_MESSAGES_SHOWN = 50
# Most of one message's content that a raw preview shows.
RAW_CONTENT_BYTES = 2048


@dataclass(frozen=True)
class RawMessage:
    """One stored message, content cut to `RAW_CONTENT_BYTES`."""

    message_id: int
    role: str
    message_type: str
    created_at: datetime
    content: str
    content_bytes: int
    truncated: bool


@dataclass(frozen=True)
class RawMessagesPage:
    """A thread's latest messages in `(created_at, id)` order, and whether earlier ones exist."""

    messages: list[RawMessage]
    has_earlier: bool


def raw_messages_excerpt(*, conversation_id: int) -> RawMessagesPage:
    """The latest `RAW_MESSAGES_SHOWN` messages of a thread, every field cut by the database.

    One query whatever the thread's size (one row more than shown says whether earlier ones
    exist; nothing counts the thread); no image, attachment, feedback or metadata is read.
    """
    rows = list(
        Message.objects.filter(conversation_id=conversation_id)
        .order_by("-created_at", "-id")
        .values("id", "role", "message_type", "created_at")
        .annotate(
            head=text_prefix("content", RAW_CONTENT_BYTES),
            size=byte_length("content"),
        )[: RAW_MESSAGES_SHOWN + 1]
    )
    has_earlier = len(rows) > RAW_MESSAGES_SHOWN
    messages = []
    for row in reversed(rows[:RAW_MESSAGES_SHOWN]):
        content, cut = truncate_utf8(row["head"], RAW_CONTENT_BYTES)
        messages.append(
            RawMessage(
                message_id=row["id"],
                role=row["role"],
                message_type=row["message_type"],
                created_at=row["created_at"],
                content=content,
                content_bytes=row["size"],
                truncated=cut,
            )
        )
    return RawMessagesPage(messages=messages, has_earlier=has_earlier)


# How many related rows (child threads, runs, tool calls) a staff page lists before linking on.
RELATED_ROWS_SHOWN = 20


@dataclass(frozen=True)
class RelatedRows:
    """The first rows of a relation as a staff page lists them, and whether more exist."""

    rows: list[Any]
    has_more: bool


def first_related(queryset: QuerySet, *, limit: int = RELATED_ROWS_SHOWN) -> RelatedRows:
    """At most `limit` rows in one query (one extra row says "more"); never a count."""
    rows = list(queryset[: limit + 1])
    return RelatedRows(rows=rows[:limit], has_more=len(rows) > limit)


def thread_child_threads(*, conversation_id: int) -> RelatedRows:
    """A thread's persisted SubAgent child threads, newest first, bounded."""
    return first_related(
        Conversation.objects.filter(parent_id=conversation_id)
        .only("id", "thread_id", "status", "source", "created_at")
        .order_by("-id")
    )


def _listed_runs(**filters: int) -> RelatedRows:
    """Runs as a staff page lists them (the columns it shows), newest first, bounded."""
    return first_related(
        AgentRun.objects.filter(**filters)
        .only("id", "run_id", "run_type", "status", "created_at")
        .order_by("-id")
    )


def thread_runs(*, conversation_id: int) -> RelatedRows:
    """The runs that worked on a thread, newest first, bounded."""
    return _listed_runs(conversation_id=conversation_id)


def child_runs(*, run_id: int) -> RelatedRows:
    """The sub-agent runs a run started, newest first, bounded."""
    return _listed_runs(parent_run_id=run_id)


def message_tool_calls(*, message_id: int) -> RelatedRows:
    """The tool calls an assistant message issued, in order, bounded; no input or output read."""
    return first_related(
        ToolCall.objects.filter(message_id=message_id)
        .only("id", "tool_call_id", "name", "status", "created_at")
        .order_by("created_at", "id")
    )


def tool_calls_during_runs(*, runs: list[AgentRun], name: str) -> dict[int, list[ToolCall]]:
    """Per run (by pk), the `name` tool calls it issued, in order.

    Tool calls carry no run. The Chat service marks every message it stores with its run
    (`metadata.run_id`), and stores them as the run finishes, so after `finished_at`; a message
    without that mark (imported or demo data) counts for the run of its thread that was open
    when the call was created (a thread runs one turn at a time). One query for all `runs`,
    each bounded by `RELATED_ROWS_SHOWN`; no input or output read.
    """
    if not runs:
        return {}
    windows = Q()
    for run in runs:
        window = Q(created_at__gte=run.created_at, message__metadata__run_id__isnull=True)
        if run.finished_at is not None:
            window &= Q(created_at__lte=run.finished_at)
        marked = Q(message__metadata__run_id=str(run.run_id))
        windows |= Q(message__conversation_id=run.conversation_id) & (marked | window)
    calls = (
        ToolCall.objects.filter(windows, name=name)
        .annotate(
            conversation_id=F("message__conversation_id"),
            issuing_run=KeyTextTransform("run_id", "message__metadata"),
        )
        .only("id", "tool_call_id", "name", "status", "created_at", "message_id")
        .order_by("created_at", "id")[: RELATED_ROWS_SHOWN * len(runs)]
    )
    found: dict[int, list[ToolCall]] = {run.pk: [] for run in runs}
    for call in calls:
        for run in runs:
            if call.conversation_id != run.conversation_id:
                continue
            if call.issuing_run is not None:
                issued = call.issuing_run == str(run.run_id)
            else:
                ended = run.finished_at is None or call.created_at <= run.finished_at
                issued = call.created_at >= run.created_at and ended
            if issued:
                found[run.pk].append(call)
    return found
