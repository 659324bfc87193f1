"""The staff page of agent runs: the lease judged by the database clock, the run a sub-agent
run delegated from, and for an approval the run that decided it and what the decision did."""

import contextlib
import json
import uuid

from django.contrib import admin
from django.db.models import F, Q, QuerySet
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from conversations.admin.columns import (
    ThreadFilter,
    UserColumns,
    changelist_query_url,
    id_cell,
    list_excerpt,
    list_excerpt_annotations,
    related_list,
    run_label,
    thread_pks,
    time_cell,
)
from conversations.admin_base import (
    ReadOnlyAdmin,
    UserFilter,
    change_link,
    changelist_link,
    format_timestamp,
    user_name_lookup,
)
from conversations.models import AgentRun, Conversation, Message, ToolCall
from conversations.runs.leases import db_clock
from conversations.selectors.approvals import decided_calls
from conversations.selectors.staff import RELATED_ROWS_SHOWN, child_runs
from conversations.services import DECLINED
from conversations.users import users_named


def _decision_outcome(*, interrupted: AgentRun, deciding: AgentRun) -> SafeString:
    """What the user's decision did, in words, with the text the write proposed (or wrote)."""
    parts = []
    for call in decided_calls(interrupted=interrupted, deciding=deciding)[:RELATED_ROWS_SHOWN]:
        text = call.input.get("content") if isinstance(call.input, dict) else None
        replaces = call.input.get("replaces") if isinstance(call.input, dict) else None
        written = call.status == ToolCall.Status.SUCCESS
        if written:
            outcome = f"approved: written ({_result_status(call.output) or 'done'})"
        elif call.error == DECLINED:
            outcome = "declined: nothing written"
        elif call.status == ToolCall.Status.PENDING:
            outcome = "decided, but the write never finished"
        else:
            refusal = _result_status(call.output) or "error"
            outcome = f"approved, but refused when it ran ({refusal})"
        label = "text written" if written else "proposed text"
        parts.append(
            format_html(
                '<div class="yuxi-decision"><strong>{}</strong>{}{}</div>',
                outcome,
                format_html(" · {}: <q>{}</q>", label, text) if isinstance(text, str) else "",
                format_html(" · replacing: <q>{}</q>", replaces)
                if isinstance(replaces, str)
                else "",
            )
        )
    return format_html_join("", "{}", ((part,) for part in parts))


def _result_status(output: str) -> str | None:
    """The `status` of a tool's JSON result, if it has one."""
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        return str(json.loads(output)["status"])
    return None


@admin.register(AgentRun)
class AgentRunAdmin(UserColumns, ReadOnlyAdmin):
    list_display = (
        "run_column",
        "user_column",
        "thread_column",
        "run_type",
        "status",
        "error_column",
        "created",
        "finished",
    )
    list_filter = (UserFilter, ThreadFilter, "status", "run_type")
    user_lookup = "user_id"
    thread_lookup = "conversation_id"
    search_fields = ("run_id", "conversation__thread_id", user_name_lookup("user"))
    search_help_text = "An exact run id, thread id or user name."
    list_select_related = ("user",)
    ordering = ("-id",)
    heavy_fields = ("error",)
    fields = (
        "run_id",
        "user_link",
        "thread_link",
        "request_id",
        "run_type",
        "parent_run_link",
        "child_run_list",
        "resumes_link",
        "status",
        "error_excerpt",
        "worker_id",
        "lease_expires",
        "lease_state",
        "created",
        "started",
        "finished",
    )
    help_texts = {
        "run_id": "The run's public id; the agent's tools carry it in their trusted context.",
        "request_id": "The id of the request (chat turn) that started the run.",
        "run_type": "chat or resume: a top-level run, which may use memory; subagent: a run "
        "a top-level run delegated to, which never gets memory or tools.",
        "parent_run_link": "For a sub-agent run: the run that delegated to it.",
        "child_run_list": "Sub-agent runs this run delegated to.",
        "resumes_link": "For a resume run: the interrupted run whose memory write it carries "
        "the user's decision about. For an interrupted run: the run that decided it.",
        "status": "pending, then running once a worker claims it; succeeded, failed, "
        "cancelled and interrupted (stopped before a memory write, waiting for the user's "
        "decision) are final.",
        "error_excerpt": "Why the run failed or was cancelled (empty otherwise).",
        "worker_id": "The worker process that holds the run's lease: only it may act for the "
        "run, and only while the lease lasts.",
        "lease_expires": "The worker renews its lease while it works; when the lease lapses "
        "the run's tools are refused and fail_expired_runs marks it failed.",
        "lease_state": "Judged now by PostgreSQL's clock, as every lease check is, never by "
        "an app host's clock.",
    }

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return (
            super()
            .get_queryset(request)
            .annotate(
                thread_id=F("conversation__thread_id"),
                parent_run_uuid=F("parent_run__run_id"),
                resumes_uuid=F("resumes__run_id"),
                resumed_by_id=F("resumed_by__id"),
                resumed_by_uuid=F("resumed_by__run_id"),
                **list_excerpt_annotations("error"),
            )
        )

    def search_filter(self, term: str) -> Q:
        condition = Q(conversation_id__in=thread_pks(term)) | Q(user_id__in=users_named(term))
        with contextlib.suppress(ValueError):
            condition |= Q(run_id=uuid.UUID(term))
        return condition

    @admin.display(description="run", ordering="run_id")
    def run_column(self, obj: AgentRun) -> SafeString:
        return id_cell(obj.run_id)

    @admin.display(description="thread", ordering="conversation__thread_id")
    def thread_column(self, obj: AgentRun) -> SafeString:
        return change_link(Conversation, obj.conversation_id, id_cell(obj.thread_id))

    @admin.display(description="error")
    def error_column(self, obj: AgentRun) -> SafeString | str:
        if not obj.error_bytes:
            return "—"
        return format_html('<div class="yuxi-text">{}</div>', list_excerpt(obj, "error"))

    @admin.display(description="created", ordering="created_at")
    def created(self, obj: AgentRun) -> SafeString:
        return time_cell(obj.created_at)

    @admin.display(description="started", ordering="started_at")
    def started(self, obj: AgentRun) -> SafeString:
        return time_cell(obj.started_at)

    @admin.display(description="finished", ordering="finished_at")
    def finished(self, obj: AgentRun) -> SafeString:
        return time_cell(obj.finished_at)

    @admin.display(description="lease expires at")
    def lease_expires(self, obj: AgentRun) -> SafeString:
        return time_cell(obj.lease_expires_at)

    @admin.display(description="thread")
    def thread_link(self, obj: AgentRun) -> SafeString:
        return format_html(
            "{} · {}",
            change_link(Conversation, obj.conversation_id, obj.thread_id),
            changelist_link(Message, {"thread": obj.conversation_id}, "its messages"),
        )

    @admin.display(description="parent run")
    def parent_run_link(self, obj: AgentRun) -> SafeString | str:
        if obj.parent_run_id is None:
            return "— (a top-level run)"
        return change_link(AgentRun, obj.parent_run_id, obj.parent_run_uuid)

    @admin.display(description="decision")
    def resumes_link(self, obj: AgentRun) -> SafeString | str:
        if obj.resumes_id is not None:
            interrupted = AgentRun(pk=obj.resumes_id, run_id=obj.resumes_uuid)
            return format_html(
                "resumes {}{}",
                change_link(AgentRun, obj.resumes_id, obj.resumes_uuid),
                _decision_outcome(interrupted=interrupted, deciding=obj),
            )
        if obj.resumed_by_id is not None:
            deciding = AgentRun(
                pk=obj.resumed_by_id,
                run_id=obj.resumed_by_uuid,
                conversation_id=obj.conversation_id,
            )
            return format_html(
                "decided by {}{}",
                change_link(AgentRun, obj.resumed_by_id, obj.resumed_by_uuid),
                _decision_outcome(interrupted=obj, deciding=deciding),
            )
        if obj.status == AgentRun.Status.INTERRUPTED:
            return "— (waiting for the user's decision)"
        return "—"

    @admin.display(description="sub-agent runs")
    def child_run_list(self, obj: AgentRun) -> SafeString:
        related = child_runs(run_id=obj.pk)
        return related_list(
            related,
            [change_link(AgentRun, run.pk, run_label(run)) for run in related.rows],
            empty="none",
            more_url=changelist_query_url(AgentRun, {"user": obj.user_id}) if related.rows else "",
            more_text="all runs of this user",
        )

    @admin.display(description="error")
    def error_excerpt(self, obj: AgentRun) -> SafeString | str:
        text, total = obj.admin_excerpts["error"]
        if not total:
            if obj.status in (AgentRun.Status.FAILED, AgentRun.Status.CANCELLED):
                return "— (no reason was recorded)"
            return "—"
        return format_html(
            '<div class="yuxi-banner yuxi-alert">{}</div>', self.field_excerpt(obj, "error")
        )

    @admin.display(description="lease (by the database clock)")
    def lease_state(self, obj: AgentRun) -> str:
        if obj.lease_expires_at is None:
            return "no lease: no worker holds this run"
        now = db_clock()
        seconds = (obj.lease_expires_at - now).total_seconds()
        if seconds > 0:
            return (
                f"held by {obj.worker_id}, {seconds:.0f} s left "
                f"(database time {format_timestamp(now)})"
            )
        return f"expired {-seconds:.0f} s ago (database time {format_timestamp(now)})"
