"""The staff page of tool calls: each with the message that issued it, its thread and user, and
its arguments, result and error as stored; one thread's calls listed in an order its indexes
serve."""

from django.contrib import admin
from django.db.models import F, Q, QuerySet
from django.http import HttpRequest
from django.utils.safestring import SafeString

from conversations.admin.columns import ThreadFilter, id_cell, time_cell
from conversations.admin_base import (
    ReadOnlyAdmin,
    UserFilter,
    change_link,
    user_link,
    user_name_lookup,
)
from conversations.models import Conversation, Message, ToolCall


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
