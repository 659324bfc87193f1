from django.contrib import admin

from conversations.models import AgentRun, Conversation, Message, ToolCall
from yuxi_site.admin import ReadOnlyAdmin


@admin.register(Conversation)
class ConversationAdmin(ReadOnlyAdmin):
    list_display = (
        "thread_id",
        "user",
        "title",
        "status",
        "source",
        "parent",
        "updated_at",
    )
    list_filter = ("status", "source")
    search_fields = ("thread_id", "title")
    list_select_related = ("user", "parent")


@admin.register(Message)
class MessageAdmin(ReadOnlyAdmin):
    list_display = ("id", "conversation", "role", "message_type", "created_at")
    list_filter = ("role", "message_type")
    search_fields = ("conversation__thread_id",)
    list_select_related = ("conversation",)


@admin.register(ToolCall)
class ToolCallAdmin(ReadOnlyAdmin):
    list_display = ("tool_call_id", "name", "status", "message", "created_at")
    list_filter = ("status", "name")
    search_fields = ("tool_call_id", "name")
    list_select_related = ("message",)


@admin.register(AgentRun)
class AgentRunAdmin(ReadOnlyAdmin):
    list_display = ("run_id", "user", "conversation", "run_type", "status", "worker_id")
    list_filter = ("status", "run_type")
    search_fields = ("run_id", "request_id", "worker_id")
    list_select_related = ("user", "conversation")
