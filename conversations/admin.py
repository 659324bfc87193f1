"""Read-only staff pages for conversations, messages, tool calls and runs.

Every relation is a link, every page costs a fixed number of queries, and every search and
filter is one an index serves (see docs/admin.md).
"""

import contextlib
import json
import uuid
from datetime import datetime

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.db.models import F, Model, Q, QuerySet
from django.db.models.fields.json import KeyTextTransform
from django.http import HttpRequest
from django.template.loader import render_to_string
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode
from django.utils.safestring import SafeString

from conversations.admin_base import (
    LIST_EXCERPT_BYTES,
    ChosenRowFilter,
    ReadOnlyAdmin,
    UserFilter,
    change_link,
    change_url,
    changelist_link,
    changelist_url,
    format_timestamp,
    render_excerpt,
    render_text,
    user_link,
    user_name_lookup,
    users_named,
)
from conversations.models import (
    HIDDEN_SOURCES,
    AgentRun,
    Conversation,
    Message,
    ToolCall,
)
from conversations.repository import read_thread_messages
from conversations.repository.arguments import HistoryNotFound
from conversations.repository.budgets import READ_RESPONSE_MAX_BYTES
from conversations.repository.budgets import to_json as history_json
from conversations.runs import db_clock
from conversations.selectors.approvals import decided_calls
from conversations.selectors.staff import (
    RELATED_ROWS_SHOWN,
    RelatedRows,
    child_runs,
    message_tool_calls,
    raw_messages_excerpt,
    thread_child_threads,
    thread_runs,
)
from conversations.services import DECLINED
from conversations.utils.db_functions import byte_length, text_prefix

__all__ = [
    "AgentRunAdmin",
    "ConversationAdmin",
    "MessageAdmin",
    "ThreadFilter",
    "ToolCallAdmin",
    "UserColumns",
    "id_cell",
    "name_cell",
    "related_list",
    "run_label",
    "time_cell",
]

User = get_user_model()


class ThreadFilter(ChosenRowFilter):
    """Rows of one thread (`?thread=<conversation pk>`), through the admin's `thread_lookup`."""

    title = "thread"
    parameter_name = "thread"
    lookup_attr = "thread_lookup"

    def label(self, pk: int) -> str:
        thread_id = Conversation.objects.filter(pk=pk).values_list("thread_id", flat=True)
        return next(iter(thread_id), f"thread #{pk} (gone)")


def time_cell(value: datetime | None) -> SafeString:
    """A timestamp with seconds and time zone; it wraps only between date and clock time."""
    if value is None:
        return format_html('<span class="yuxi-time">{}</span>', "—")
    day, clock = format_timestamp(value).split(" ", 1)
    return format_html('<span class="yuxi-time"><span>{}</span> <span>{}</span></span>', day, clock)


def id_cell(value: object) -> SafeString:
    """A long id (64-character thread ids, UUIDs) that wraps inside a readable width."""
    return format_html('<span class="yuxi-id">{}</span>', value)


def name_cell(value: object) -> SafeString:
    """A name (usernames run long) that wraps inside a readable width."""
    return format_html('<span class="yuxi-name">{}</span>', value)


class UserColumns:
    """The columns naming a row's user (its `user` foreign key, which the page's queryset
    selects): `user_column`, the linked name in a list; `user_link`, the link on a row's page."""

    @admin.display(description="user", ordering=user_name_lookup("user"))
    def user_column(self, obj: Model) -> SafeString:
        return user_link(obj.user_id, name_cell(obj.user.get_username()))

    @admin.display(description="user")
    def user_link(self, obj: Model) -> SafeString:
        return user_link(obj.user_id, obj.user.get_username())


def run_label(run: AgentRun) -> str:
    """One line naming a run for lists of related runs."""
    return f"{run.run_id} · {run.run_type} · {run.status} · {format_timestamp(run.created_at)}"


def related_list(
    related: RelatedRows, links: list[SafeString], *, empty: str, more_url: str, more_text: str
) -> SafeString:
    """A bounded list of links to related rows, and one link on to all of them."""
    return render_to_string(
        "admin/yuxi_related.html",
        {
            "rows": links,
            "empty": empty,
            "more_url": more_url if related.has_more or not links else "",
            "more_text": more_text,
        },
    )


def _changelist_url(model: type[Model], query: dict[str, object]) -> str:
    return f"{changelist_url(model)}?{urlencode(query)}"


def _thread_pks(term: str) -> list[int]:
    return list(Conversation.objects.filter(thread_id=term).values_list("pk", flat=True))


def _list_excerpt(obj: Model, prefix: str) -> SafeString:
    return render_excerpt(
        getattr(obj, f"{prefix}_head"), getattr(obj, f"{prefix}_bytes"), LIST_EXCERPT_BYTES
    )


def _list_excerpt_annotations(field: str) -> dict:
    return {
        f"{field}_head": text_prefix(field, LIST_EXCERPT_BYTES),
        f"{field}_bytes": byte_length(field),
    }


@admin.register(Conversation)
class ConversationAdmin(UserColumns, ReadOnlyAdmin):
    list_display = (
        "thread_column",
        "user_column",
        "title_column",
        "status",
        "source",
        "parent_column",
        "lookback",
        "updated",
    )
    list_filter = (UserFilter, "status", "source")
    user_lookup = "user_id"
    search_fields = ("thread_id", user_name_lookup("user"))
    search_help_text = (
        "An exact thread id or user name (titles are not searched: no index serves that)."
    )
    list_select_related = ("user",)
    ordering = ("-id",)
    heavy_fields = ("title", "metadata")
    fields = (
        "lookback_banner",
        "thread_id",
        "user_link",
        "title_excerpt",
        "status",
        "source",
        "parent_link",
        "child_threads",
        "runs",
        "records",
        "metadata_excerpt",
        "created",
        "updated",
        "history",
    )
    help_texts = {
        "thread_id": "The thread's public id, used by the API and the lookback tools.",
        "status": "Only active threads are visible to history lookback; archived and deleted "
        "ones are kept but hidden.",
        "source": "Where the thread came from: chat and api are the user's own; agent_call "
        "(a sub-agent's thread) and agent_evaluation are agent traffic, never looked up.",
        "parent_link": "Set on a sub-agent's thread: the thread whose run delegated to it.",
        "child_threads": "Threads of the sub-agents this thread's runs delegated to.",
        "runs": "Agent runs that worked on this thread (one per chat turn), newest first.",
        "lookback_banner": "History lookback: the agent's tools search_thread_messages and "
        "read_thread_messages, which return only the user's own visible threads.",
        "updated": "Bumped by the database clock whenever a message is added.",
    }

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return (
            super()
            .get_queryset(request)
            .with_lookback_visibility()
            .annotate(parent_thread_id=F("parent__thread_id"), **_list_excerpt_annotations("title"))
        )

    def search_filter(self, term: str) -> Q:
        return Q(thread_id=term) | Q(user_id__in=users_named(term))

    @admin.display(description="thread", ordering="thread_id")
    def thread_column(self, obj: Conversation) -> SafeString:
        return id_cell(obj.thread_id)

    @admin.display(description="title")
    def title_column(self, obj: Conversation) -> SafeString:
        return format_html('<div class="yuxi-text">{}</div>', _list_excerpt(obj, "title"))

    @admin.display(description="parent thread")
    def parent_column(self, obj: Conversation) -> SafeString | str:
        if obj.parent_id is None:
            return "—"
        return change_link(Conversation, obj.parent_id, id_cell(obj.parent_thread_id))

    @admin.display(description="lookback")
    def lookback(self, obj: Conversation) -> SafeString:
        reasons = obj.lookback_hidden_reasons()
        if not reasons:
            return format_html('<span class="yuxi-lookback">{}</span>', "visible")
        return format_html(
            '<span class="yuxi-lookback" title="{}">{}</span>', "; ".join(reasons), "hidden"
        )

    @admin.display(description="updated", ordering="updated_at")
    def updated(self, obj: Conversation) -> SafeString:
        return time_cell(obj.updated_at)

    @admin.display(description="created")
    def created(self, obj: Conversation) -> SafeString:
        return time_cell(obj.created_at)

    @admin.display(description="title")
    def title_excerpt(self, obj: Conversation) -> SafeString:
        return self.field_excerpt(obj, "title")

    @admin.display(description="metadata")
    def metadata_excerpt(self, obj: Conversation) -> SafeString:
        return self.field_excerpt(obj, "metadata")

    @admin.display(description="parent thread")
    def parent_link(self, obj: Conversation) -> SafeString | str:
        if obj.parent_id is None:
            return "— (a top-level thread)"
        return change_link(Conversation, obj.parent_id, obj.parent_thread_id)

    @admin.display(description="sub-agent threads")
    def child_threads(self, obj: Conversation) -> SafeString:
        related = thread_child_threads(conversation_id=obj.pk)
        return related_list(
            related,
            [
                change_link(Conversation, child.pk, f"{child.thread_id} ({child.status})")
                for child in related.rows
            ],
            empty="none",
            more_url=_changelist_url(Conversation, {"q": obj.thread_id}) if related.rows else "",
            more_text="more sub-agent threads: search for them by thread id",
        )

    @admin.display(description="runs")
    def runs(self, obj: Conversation) -> SafeString:
        related = thread_runs(conversation_id=obj.pk)
        return related_list(
            related,
            [change_link(AgentRun, run.pk, run_label(run)) for run in related.rows],
            empty="none",
            more_url=_changelist_url(AgentRun, {"thread": obj.pk}),
            more_text="all runs of this thread",
        )

    @admin.display(description="messages and tool calls")
    def records(self, obj: Conversation) -> SafeString:
        return format_html(
            "{} · {}",
            changelist_link(Message, {"thread": obj.pk}, "messages of this thread"),
            changelist_link(ToolCall, {"thread": obj.pk}, "tool calls of this thread"),
        )

    @admin.display(description="history lookback")
    def lookback_banner(self, obj: Conversation) -> SafeString:
        reasons = obj.lookback_hidden_reasons()
        by_design = obj.parent_id is not None or obj.source in HIDDEN_SOURCES
        return render_to_string(
            "admin/conversations/conversation/lookback_banner.html",
            {"reasons": reasons, "by_design": by_design},
        )

    @admin.display(description="history")
    def history(self, obj: Conversation) -> SafeString:
        """What the lookback tools return for this thread, beside the record as stored."""
        context: dict[str, object] = {"hidden": True}
        try:
            response = read_thread_messages(obj.user_id, obj.thread_id)
        except HistoryNotFound:
            pass
        else:
            context = {
                "hidden": False,
                "agent": response,
                "agent_bytes": len(history_json(response).encode("utf-8")),
                "agent_max_bytes": READ_RESPONSE_MAX_BYTES,
                "agent_json": json.dumps(response, ensure_ascii=False, indent=2),
                "agent_rows": [
                    {
                        **item,
                        "url": change_url(Message, item["message_id"]),
                        "created": format_timestamp(datetime.fromisoformat(item["created_at"])),
                        "content": render_text(item["content"], cut=item["truncated"]),
                    }
                    for item in response["messages"]
                ],
            }
        raw = raw_messages_excerpt(conversation_id=obj.pk)
        context.update(
            raw=raw,
            all_messages_url=_changelist_url(Message, {"thread": obj.pk}),
            raw_rows=[
                {
                    "message": message,
                    "url": change_url(Message, message.message_id),
                    "created": format_timestamp(message.created_at),
                    "content": render_text(
                        message.content, cut=message.truncated, total_bytes=message.content_bytes
                    ),
                }
                for message in raw.messages
            ],
        )
        return render_to_string("admin/conversations/conversation/history.html", context)


@admin.register(Message)
class MessageAdmin(ReadOnlyAdmin):
    list_display = ("id", "thread_column", "role", "message_type", "content_column", "created")
    list_filter = (UserFilter, ThreadFilter, "role", "message_type")
    user_lookup = "owner_id"
    thread_lookup = "conversation_id"
    search_fields = ("id", "conversation__thread_id", user_name_lookup("owner"))
    search_help_text = (
        "An exact message id, thread id or user name. Message text is not searched here: "
        "no index serves a substring of every message (a thread's page shows what history "
        "lookback returns)."
    )
    list_select_related = ()
    ordering = ("-created_at", "-id")
    heavy_fields = ("content", "image_content", "attachments", "feedback", "metadata")
    fields = (
        "id",
        "thread_link",
        "owner_link",
        "run_link",
        "role",
        "message_type",
        "content_excerpt",
        "image_content_excerpt",
        "attachments_excerpt",
        "feedback_excerpt",
        "metadata_excerpt",
        "tool_calls",
        "created",
    )
    help_texts = {
        "role": "user and assistant text is what history lookback may return; system and "
        "tool messages never reach it.",
        "message_type": "text, or the model's tool call and the tool's result.",
        "owner_link": "The thread's user (the database keeps a copy on each message, so "
        "per-user indexes can serve search).",
        "run_link": "The agent run that stored this message, when one did.",
        "tool_calls": "Tool calls this assistant message issued.",
        "content_excerpt": "Cut by the database; the page never loads a whole large value.",
    }

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return (
            super()
            .get_queryset(request)
            .annotate(
                thread_id=F("conversation__thread_id"), **_list_excerpt_annotations("content")
            )
        )

    def get_object(
        self, request: HttpRequest, object_id: str, from_field: str | None = None
    ) -> Message | None:
        """The row and its excerpts, plus its user's name and the run id the runtime noted."""
        obj = super().get_object(request, object_id, from_field)
        if obj is not None:
            obj.run_uuid, obj.owner_username = (
                Message.objects.filter(pk=obj.pk)
                .values_list(KeyTextTransform("run_id", "metadata"), user_name_lookup("owner"))
                .get()
            )
        return obj

    def search_filter(self, term: str) -> Q:
        condition = Q(conversation_id__in=_thread_pks(term)) | Q(owner_id__in=users_named(term))
        if term.isdigit() and int(term) < 2**63:
            condition |= Q(pk=int(term))
        return condition

    @admin.display(description="thread", ordering="conversation__thread_id")
    def thread_column(self, obj: Message) -> SafeString:
        return change_link(Conversation, obj.conversation_id, id_cell(obj.thread_id))

    @admin.display(description="content")
    def content_column(self, obj: Message) -> SafeString:
        return format_html('<div class="yuxi-text">{}</div>', _list_excerpt(obj, "content"))

    @admin.display(description="created", ordering="created_at")
    def created(self, obj: Message) -> SafeString:
        return time_cell(obj.created_at)

    @admin.display(description="thread")
    def thread_link(self, obj: Message) -> SafeString:
        return change_link(Conversation, obj.conversation_id, obj.thread_id)

    @admin.display(description="user")
    def owner_link(self, obj: Message) -> SafeString | str:
        if obj.owner_id is None:
            return "—"
        return user_link(obj.owner_id, obj.owner_username or f"user #{obj.owner_id}")

    @admin.display(description="run")
    def run_link(self, obj: Message) -> SafeString | str:
        if not obj.run_uuid:
            return "—"
        return changelist_link(AgentRun, {"q": obj.run_uuid}, obj.run_uuid)

    @admin.display(description="content")
    def content_excerpt(self, obj: Message) -> SafeString:
        return self.field_excerpt(obj, "content")

    @admin.display(description="image content")
    def image_content_excerpt(self, obj: Message) -> SafeString:
        return self.field_excerpt(obj, "image_content")

    @admin.display(description="attachments")
    def attachments_excerpt(self, obj: Message) -> SafeString:
        return self.field_excerpt(obj, "attachments")

    @admin.display(description="feedback")
    def feedback_excerpt(self, obj: Message) -> SafeString:
        return self.field_excerpt(obj, "feedback")

    @admin.display(description="metadata")
    def metadata_excerpt(self, obj: Message) -> SafeString:
        return self.field_excerpt(obj, "metadata")

    @admin.display(description="tool calls")
    def tool_calls(self, obj: Message) -> SafeString:
        related = message_tool_calls(message_id=obj.pk)
        return related_list(
            related,
            [
                change_link(ToolCall, call.pk, f"{call.name} ({call.tool_call_id}) · {call.status}")
                for call in related.rows
            ],
            empty="none",
            more_url=_changelist_url(ToolCall, {"thread": obj.conversation_id}),
            more_text="all tool calls of this thread",
        )


@admin.register(ToolCall)
class ToolCallAdmin(ReadOnlyAdmin):
    list_display = (
        "tool_call_column",
        "name",
        "status",
        "message_column",
        "thread_column",
        "created",
    )
    list_filter = (UserFilter, ThreadFilter, "status")
    user_lookup = "message__owner_id"
    thread_lookup = "message__conversation_id"
    search_fields = ("tool_call_id",)
    search_help_text = "An exact tool call id (the tool's name is a filter: ?name=remember_memory)."
    list_select_related = ()
    ordering = ("-created_at", "-id")
    # One thread's calls, newest message first: PostgreSQL walks the thread's messages backwards
    # on their (conversation, created_at, id) index and each message's calls on theirs, so a
    # page stops after its rows. The table-wide (created_at, id) order would walk every thread's
    # calls and drop the rest.
    thread_ordering = ("-message__created_at", "-message_id", "-created_at", "-id")
    heavy_fields = ("input", "output", "error", "metadata")
    fields = (
        "tool_call_id",
        "name",
        "status",
        "message_link",
        "thread_link",
        "user_link",
        "input_excerpt",
        "output_excerpt",
        "error_excerpt",
        "metadata_excerpt",
        "created",
    )
    help_texts = {
        "tool_call_id": "The id the model gave the call; the tool's result message names it.",
        "status": "pending while the tool runs; success, or error when the tool refused or "
        "failed (the error says why).",
        "message_link": "The assistant message that issued the call.",
        "input_excerpt": "The arguments the model passed, as stored.",
        "output_excerpt": "The JSON result the tool returned to the model.",
    }

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return (
            super()
            .get_queryset(request)
            .annotate(
                thread_pk=F("message__conversation_id"),
                thread_id=F("message__conversation__thread_id"),
                owner_id=F("message__owner_id"),
                owner_username=F(user_name_lookup("message__owner")),
            )
        )

    def get_ordering(self, request: HttpRequest) -> tuple[str, ...]:
        if request.GET.get(ThreadFilter.parameter_name):
            return self.thread_ordering
        return super().get_ordering(request)

    def search_filter(self, term: str) -> Q:
        return Q(tool_call_id=term)

    @admin.display(description="tool call", ordering="tool_call_id")
    def tool_call_column(self, obj: ToolCall) -> SafeString:
        return id_cell(obj.tool_call_id)

    @admin.display(description="message", ordering="message_id")
    def message_column(self, obj: ToolCall) -> SafeString:
        return change_link(Message, obj.message_id, obj.message_id)

    @admin.display(description="thread")
    def thread_column(self, obj: ToolCall) -> SafeString:
        return change_link(Conversation, obj.thread_pk, id_cell(obj.thread_id))

    @admin.display(description="created", ordering="created_at")
    def created(self, obj: ToolCall) -> SafeString:
        return time_cell(obj.created_at)

    @admin.display(description="message")
    def message_link(self, obj: ToolCall) -> SafeString:
        return change_link(Message, obj.message_id, f"message {obj.message_id}")

    @admin.display(description="thread")
    def thread_link(self, obj: ToolCall) -> SafeString:
        return change_link(Conversation, obj.thread_pk, obj.thread_id)

    @admin.display(description="user")
    def user_link(self, obj: ToolCall) -> SafeString | str:
        if obj.owner_id is None:
            return "—"
        return user_link(obj.owner_id, obj.owner_username or f"user #{obj.owner_id}")

    @admin.display(description="input")
    def input_excerpt(self, obj: ToolCall) -> SafeString:
        return self.field_excerpt(obj, "input")

    @admin.display(description="output")
    def output_excerpt(self, obj: ToolCall) -> SafeString:
        return self.field_excerpt(obj, "output")

    @admin.display(description="error")
    def error_excerpt(self, obj: ToolCall) -> SafeString:
        return self.field_excerpt(obj, "error")

    @admin.display(description="metadata")
    def metadata_excerpt(self, obj: ToolCall) -> SafeString:
        return self.field_excerpt(obj, "metadata")


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
                **_list_excerpt_annotations("error"),
            )
        )

    def search_filter(self, term: str) -> Q:
        condition = Q(conversation_id__in=_thread_pks(term)) | Q(user_id__in=users_named(term))
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
        return format_html('<div class="yuxi-text">{}</div>', _list_excerpt(obj, "error"))

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
            more_url=_changelist_url(AgentRun, {"user": obj.user_id}) if related.rows else "",
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
