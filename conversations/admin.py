"""Read-only staff pages for conversations, messages, tool calls and runs."""

import json

from django.contrib import admin
from django.db.models import F, Model, QuerySet
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from conversations.models import AgentRun, Conversation, Message, ToolCall
from conversations.repository import READ_RESPONSE_MAX_BYTES, HistoryNotFound, read_thread_messages
from conversations.repository import to_json as history_json
from conversations.runs import db_clock
from conversations.selectors import raw_messages_excerpt
from memory_app.selectors import memory_write_refusal
from yuxi_site.admin import LIST_EXCERPT_BYTES, ReadOnlyAdmin, render_excerpt, render_text
from yuxi_site.utils.db_functions import byte_length, text_prefix


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
class ConversationAdmin(ReadOnlyAdmin):
    list_display = (
        "thread_id",
        "user",
        "title_column",
        "status",
        "source",
        "parent_thread",
        "lookback",
        "updated_at",
    )
    list_filter = ("status", "source")
    search_fields = ("thread_id", "title", "user__username")
    list_select_related = ("user",)
    heavy_fields = ("title", "metadata")
    fields = (
        "lookback_banner",
        "thread_id",
        "user",
        "title_excerpt",
        "status",
        "source",
        "parent_thread",
        "metadata_excerpt",
        "created_at",
        "updated_at",
        "history",
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return (
            super()
            .get_queryset(request)
            .with_lookback_visibility()
            .annotate(parent_thread_id=F("parent__thread_id"), **_list_excerpt_annotations("title"))
        )

    @admin.display(description="title")
    def title_column(self, obj: Conversation) -> SafeString:
        return _list_excerpt(obj, "title")

    @admin.display(description="parent thread")
    def parent_thread(self, obj: Conversation) -> str:
        return obj.parent_thread_id or "—"

    @admin.display(description="lookback", boolean=True)
    def lookback(self, obj: Conversation) -> bool:
        return not obj.lookback_hidden_reasons()

    @admin.display(description="history lookback")
    def lookback_banner(self, obj: Conversation) -> SafeString:
        reasons = obj.lookback_hidden_reasons()
        if not reasons:
            return format_html(
                '<p class="yuxi-banner yuxi-visible">{}</p>',
                "Visible to history lookback: the agent can search and read this thread.",
            )
        return format_html(
            '<div class="errornote yuxi-banner yuxi-hidden"><strong>{}</strong><ul>{}</ul></div>',
            "Not visible to history lookback, because:",
            format_html_join("", "<li>{}</li>", ((reason,) for reason in reasons)),
        )

    @admin.display(description="history")
    def history(self, obj: Conversation) -> SafeString:
        """What the lookback tools return for this thread, beside the record as stored."""
        return format_html(
            '<div class="yuxi-history" style="display:flex;flex-wrap:wrap;gap:2em">'
            '<section class="yuxi-agent-view" style="flex:1 1 30em"><h3>{}</h3>{}</section>'
            '<section class="yuxi-raw-view" style="flex:1 1 30em"><h3>{}</h3>{}</section>'
            "</div>",
            "As the agent sees it (read_thread_messages)",
            self._agent_view(obj),
            "Raw messages (as stored)",
            self._raw_messages(obj),
        )

    def _agent_view(self, obj: Conversation) -> SafeString:
        try:
            response = read_thread_messages(obj.user_id, obj.thread_id)
        except HistoryNotFound:
            return format_html(
                '<p class="errornote">{}</p>',
                "not_found: the lookback tools return nothing of this thread to the agent.",
            )
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    item["message_id"],
                    item["role"],
                    item["created_at"],
                    render_text(item["content"], cut=item["truncated"]),
                )
                for item in response["messages"]
            ),
        )
        return format_html(
            '<p class="yuxi-agent-summary">{} messages; {} of at most {} bytes serialized; '
            "has_more_before: {}; has_more_after: {}; truncated: {}</p>"
            '<table class="yuxi-agent"><thead><tr><th>id</th><th>role</th><th>created</th>'
            "<th>content</th></tr></thead><tbody>{}</tbody></table>"
            "<details><summary>{}</summary><pre>{}</pre></details>",
            len(response["messages"]),
            len(history_json(response).encode("utf-8")),
            READ_RESPONSE_MAX_BYTES,
            response["has_more_before"],
            response["has_more_after"],
            response["truncated"],
            rows,
            "the response as returned",
            json.dumps(response, ensure_ascii=False, indent=2),
        )

    def _raw_messages(self, obj: Conversation) -> SafeString:
        page = raw_messages_excerpt(conversation_id=obj.pk)
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    message.message_id,
                    message.role,
                    message.message_type,
                    message.created_at.isoformat(),
                    render_text(
                        message.content,
                        cut=message.truncated,
                        total_bytes=message.content_bytes,
                    ),
                )
                for message in page.messages
            ),
        )
        return format_html(
            '<p>{} earlier messages not shown.</p><table class="yuxi-raw"><thead><tr>'
            "<th>id</th><th>role</th><th>type</th><th>created</th><th>content</th>"
            "</tr></thead><tbody>{}</tbody></table>",
            page.earlier_count,
            rows,
        )


@admin.register(Message)
class MessageAdmin(ReadOnlyAdmin):
    list_display = ("id", "thread", "role", "message_type", "content_column", "created_at")
    list_filter = ("role", "message_type")
    search_fields = ("conversation__thread_id", "content")
    list_select_related = ()
    heavy_fields = ("content", "image_content", "attachments", "feedback", "metadata")
    fields = (
        "id",
        "thread",
        "owner",
        "role",
        "message_type",
        "content_excerpt",
        "image_content_excerpt",
        "attachments_excerpt",
        "feedback_excerpt",
        "metadata_excerpt",
        "created_at",
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return (
            super()
            .get_queryset(request)
            .annotate(
                thread_id=F("conversation__thread_id"), **_list_excerpt_annotations("content")
            )
        )

    @admin.display(description="thread", ordering="conversation__thread_id")
    def thread(self, obj: Model) -> str:
        return obj.thread_id

    @admin.display(description="content")
    def content_column(self, obj: Message) -> SafeString:
        return _list_excerpt(obj, "content")


@admin.register(ToolCall)
class ToolCallAdmin(ReadOnlyAdmin):
    list_display = ("tool_call_id", "name", "status", "message_id", "thread", "created_at")
    list_filter = ("status", "name")
    search_fields = ("tool_call_id", "name")
    list_select_related = ()
    heavy_fields = ("input", "output", "error", "metadata")
    fields = (
        "tool_call_id",
        "name",
        "status",
        "message_id",
        "thread",
        "input_excerpt",
        "output_excerpt",
        "error_excerpt",
        "metadata_excerpt",
        "created_at",
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return (
            super().get_queryset(request).annotate(thread_id=F("message__conversation__thread_id"))
        )

    @admin.display(description="thread")
    def thread(self, obj: ToolCall) -> str:
        return obj.thread_id


@admin.register(AgentRun)
class AgentRunAdmin(ReadOnlyAdmin):
    list_display = (
        "run_id",
        "user",
        "thread",
        "run_type",
        "status",
        "worker_id",
        "lease_expires_at",
    )
    list_filter = ("status", "run_type")
    search_fields = ("run_id", "request_id", "worker_id")
    list_select_related = ("user",)
    fields = (
        "run_id",
        "user",
        "thread",
        "request_id",
        "run_type",
        "parent_run",
        "status",
        "worker_id",
        "lease_expires_at",
        "lease_state",
        "memory_write",
        "created_at",
        "started_at",
        "finished_at",
        "error",
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return super().get_queryset(request).annotate(thread_id=F("conversation__thread_id"))

    @admin.display(description="thread", ordering="conversation__thread_id")
    def thread(self, obj: AgentRun) -> str:
        return obj.thread_id

    @admin.display(description="lease (by the database clock)")
    def lease_state(self, obj: AgentRun) -> str:
        if obj.lease_expires_at is None:
            return "no lease"
        now = db_clock()
        seconds = (obj.lease_expires_at - now).total_seconds()
        if seconds > 0:
            return f"held by {obj.worker_id}, {seconds:.0f} s left (database time {now:%H:%M:%S})"
        return f"expired {-seconds:.0f} s ago (database time {now:%H:%M:%S})"

    @admin.display(description="memory write allowed now?")
    def memory_write(self, obj: AgentRun) -> SafeString:
        refusal = memory_write_refusal(obj)
        if refusal is None:
            return format_html("<strong>{}</strong>", "yes: its worker may write memory now")
        return format_html("<strong>{}</strong> {}", "no:", refusal)
