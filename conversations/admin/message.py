"""The staff page of messages: each with its thread, its user and the run that stored it, its
large columns cut by the database, and the tool calls an assistant message issued."""

from django.contrib import admin
from django.db.models import F, Q, QuerySet
from django.db.models.fields.json import KeyTextTransform
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString

from conversations.admin.columns import (
    ThreadFilter,
    changelist_query_url,
    id_cell,
    list_excerpt,
    list_excerpt_annotations,
    related_list,
    thread_pks,
    time_cell,
)
from conversations.admin_base import (
    ReadOnlyAdmin,
    UserFilter,
    change_link,
    changelist_link,
    user_link,
    user_name_lookup,
)
from conversations.models import AgentRun, Conversation, Message, ToolCall
from conversations.selectors.staff import message_tool_calls
from conversations.users import users_named


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
            .annotate(thread_id=F("conversation__thread_id"), **list_excerpt_annotations("content"))
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
        condition = Q(conversation_id__in=thread_pks(term)) | Q(owner_id__in=users_named(term))
        if term.isdigit() and int(term) < 2**63:
            condition |= Q(pk=int(term))
        return condition

    @admin.display(description="thread", ordering="conversation__thread_id")
    def thread_column(self, obj: Message) -> SafeString:
        return change_link(Conversation, obj.conversation_id, id_cell(obj.thread_id))

    @admin.display(description="content")
    def content_column(self, obj: Message) -> SafeString:
        return format_html('<div class="yuxi-text">{}</div>', list_excerpt(obj, "content"))

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
            more_url=changelist_query_url(ToolCall, {"thread": obj.conversation_id}),
            more_text="all tool calls of this thread",
        )
