"""The memory writes waiting for a user's approval, and the runs and calls they are made of.

An `interrupted` run stopped before a memory write; its one `pending` tool call is the write
the user is asked about. It is decided once a run `resumes` it; it is pending while it is
undecided and younger than `MEMORY_APPROVAL_TTL_SECONDS` (then the reaper declines it). The
one owner of that rule: the chat turn, the thread pages, the export, the writes that settle
a decision and the reaper all read it here.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import F, QuerySet, TextField
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast

from conversations.conf import setting
from conversations.models import AgentRun, Message, ToolCall
from conversations.utils.db_functions import ClockTimestamp


@dataclass(frozen=True)
class PendingApproval:
    """A memory write waiting for its user's decision: the interrupted run and its call."""

    thread_id: str
    run_id: str
    tool_call_id: str
    content: Any
    replaces: Any
    created_at: datetime

    def as_dict(self) -> dict[str, Any]:
        """What a client is shown: the call and the text it would write (and replace)."""
        return {
            "tool_call_id": self.tool_call_id,
            "content": self.content,
            "replaces": self.replaces,
        }

    def listed(self) -> dict[str, Any]:
        """What a thread list shows: the call, its text, which run waits and since when."""
        return {**self.as_dict(), "run_id": self.run_id, "created_at": self.created_at}


def _approval_cutoff() -> Any:
    seconds = setting("MEMORY_APPROVAL_TTL_SECONDS")
    if seconds <= 0:
        raise ValueError("MEMORY_APPROVAL_TTL_SECONDS must be positive")
    return ClockTimestamp() - timedelta(seconds=seconds)


def undecided_interrupts(**filters: Any) -> QuerySet:
    """Interrupted runs (matching `filters`) that no run resumes yet, whatever their age."""
    return AgentRun.objects.filter(
        status=AgentRun.Status.INTERRUPTED, resumed_by__isnull=True, **filters
    )


def expired_interrupts() -> QuerySet:
    """Undecided interrupted runs older than `MEMORY_APPROVAL_TTL_SECONDS`: no longer pending,
    still to be declined."""
    return undecided_interrupts(finished_at__lte=_approval_cutoff())


def run_pending_calls(runs: QuerySet) -> QuerySet:
    """The pending tool calls the runs of `runs` issued (a message carries its run's id): an
    interrupted run's is the write it waits for a decision about."""
    return run_calls(runs).filter(status=ToolCall.Status.PENDING)


def run_calls(runs: QuerySet) -> QuerySet:
    """The tool calls the runs of `runs` issued (a message carries its run's id)."""
    run_ids = runs.annotate(key=Cast("run_id", TextField())).values("key")
    return ToolCall.objects.annotate(
        issuing_run=KeyTextTransform("run_id", "message__metadata")
    ).filter(issuing_run__in=run_ids)


def decided_calls(*, interrupted: AgentRun, deciding: AgentRun) -> QuerySet:
    """The calls of the `interrupted` run that `deciding` (the run that resumes it) answered:
    the write put to the user, whose row holds the decision's outcome (status, output) and
    the text it would write. One query."""
    answered = Message.objects.filter(
        conversation_id=deciding.conversation_id,
        message_type=Message.Type.TOOL_RESULT,
        metadata__run_id=str(deciding.run_id),
    ).values(key=KeyTextTransform("tool_call_id", "metadata"))
    return (
        ToolCall.objects.annotate(issuing_run=KeyTextTransform("run_id", "message__metadata"))
        .filter(issuing_run=str(interrupted.run_id), tool_call_id__in=answered)
        .order_by("id")
    )


def pending_approvals(**run_filters: Any) -> QuerySet:
    """The pending approvals of the interrupted runs matching `run_filters` (e.g. `user_id`,
    `conversation_id__in`), as rows of `PendingApproval`'s fields, oldest first. One query."""
    runs = undecided_interrupts(finished_at__gt=_approval_cutoff(), **run_filters)
    return (
        run_pending_calls(runs)
        .annotate(
            thread_id=F("message__conversation__thread_id"),
            run_id=F("issuing_run"),
            content=KeyTextTransform("content", "input"),
            replaces=KeyTextTransform("replaces", "input"),
        )
        .values("thread_id", "run_id", "tool_call_id", "content", "replaces", "created_at")
        .order_by("created_at", "id")
    )


def list_user_pending_approvals(*, user_id: int) -> list[PendingApproval]:
    """Every memory write waiting for `user_id`'s decision, across their threads, oldest first
    (at most one per thread)."""
    return [PendingApproval(**row) for row in pending_approvals(user_id=user_id)]


def pending_approval(*, conversation_id: int) -> PendingApproval | None:
    """The thread's pending approval, if any (a thread has at most one)."""
    row = pending_approvals(conversation_id=conversation_id).last()
    return PendingApproval(**row) if row is not None else None


def is_released_call(*, run: AgentRun, tool_call_id: str | None) -> bool:
    """Whether `tool_call_id`, called in `run`, is the call a user's decision released: `run`
    is the `resume` run of an interrupted run whose pending call has that id."""
    if not tool_call_id or run.run_type != AgentRun.RunType.RESUME or run.resumes_id is None:
        return False
    interrupted = AgentRun.objects.filter(pk=run.resumes_id, status=AgentRun.Status.INTERRUPTED)
    return (
        run_pending_calls(interrupted)
        .filter(tool_call_id=tool_call_id, message__conversation_id=run.conversation_id)
        .exists()
    )
