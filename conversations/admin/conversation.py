"""The staff page of threads: who owns each, whether history lookback sees it and why not,
its runs and sub-agent threads, and what the lookback tools return for it beside the record."""

import json
from datetime import datetime

from django.contrib import admin
from django.db.models import F, Q, QuerySet
from django.http import HttpRequest
from django.template.loader import render_to_string
from django.utils.html import format_html
from django.utils.safestring import SafeString

from conversations.admin.columns import (
    UserColumns,
    changelist_query_url,
    id_cell,
    list_excerpt,
    list_excerpt_annotations,
    related_list,
    run_label,
    time_cell,
)
from conversations.admin_base import (
    ReadOnlyAdmin,
    UserFilter,
    change_link,
    change_url,
    changelist_link,
    format_timestamp,
    render_text,
    user_name_lookup,
)
from conversations.models import HIDDEN_SOURCES, AgentRun, Conversation, Message, ToolCall
from conversations.repository import read_thread_messages
from conversations.repository.arguments import HistoryNotFound
from conversations.repository.budgets import READ_RESPONSE_MAX_BYTES
from conversations.repository.budgets import to_json as history_json
from conversations.selectors.staff import raw_messages_excerpt, thread_child_threads, thread_runs
from conversations.users import users_named


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
            .annotate(parent_thread_id=F("parent__thread_id"), **list_excerpt_annotations("title"))
        )

    def search_filter(self, term: str) -> Q:
        return Q(thread_id=term) | Q(user_id__in=users_named(term))

    @admin.display(description="thread", ordering="thread_id")
    def thread_column(self, obj: Conversation) -> SafeString:
        return id_cell(obj.thread_id)

    @admin.display(description="title")
    def title_column(self, obj: Conversation) -> SafeString:
        return format_html('<div class="yuxi-text">{}</div>', list_excerpt(obj, "title"))

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
        more_url = changelist_query_url(Conversation, {"q": obj.thread_id}) if related.rows else ""
        return related_list(
            related,
            [
                change_link(Conversation, child.pk, f"{child.thread_id} ({child.status})")
                for child in related.rows
            ],
            empty="none",
            more_url=more_url,
            more_text="more sub-agent threads: search for them by thread id",
        )

    @admin.display(description="runs")
    def runs(self, obj: Conversation) -> SafeString:
        related = thread_runs(conversation_id=obj.pk)
        return related_list(
            related,
            [change_link(AgentRun, run.pk, run_label(run)) for run in related.rows],
            empty="none",
            more_url=changelist_query_url(AgentRun, {"thread": obj.pk}),
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
            all_messages_url=changelist_query_url(Message, {"thread": obj.pk}),
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
