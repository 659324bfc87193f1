"""The memory ledger's staff pages: the list and page of `MemoryEvent` rows, and how one
change is told wherever staff see it (its kind in words, who made it, the run, thread and
tool call behind it, whether it only flipped a setting).

Its own module because the user config page and the run page show ledger entries too: they
import these cells from here, so a change reads the same on every page.
"""

import uuid

from django.contrib import admin
from django.db.models import Q, QuerySet
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from conversations.admin.columns import ThreadFilter, UserColumns, id_cell, name_cell, time_cell
from conversations.admin_base import (
    ReadOnlyAdmin,
    UserFilter,
    change_link,
    changelist_link,
    changelist_url,
    user_link,
    user_name_lookup,
)
from conversations.models import AgentRun, Conversation, ToolCall
from conversations.users import users_named
from memory_app.models import MemoryEvent, MemoryEventKind
from memory_app.selectors import ledger_events, remember_calls_for
from memory_app.versions import INITIAL_VERSION_KIND


def ledger_url(query: str) -> str:
    """The memory events' list narrowed by `query` (a URL query string)."""
    return f"{changelist_url(MemoryEvent)}?{query}"


def event_provenance(event: MemoryEvent, calls: list[ToolCall]) -> SafeString | str:
    """The run, thread and remember_memory call(s) behind an event, as links."""
    if event.run is None:
        return "— (not an agent run)" if event.actor_id else "— (its run is gone)"
    parts = [
        change_link(AgentRun, event.run.pk, f"run {event.run.run_id}"),
        change_link(Conversation, event.run.conversation_id, event.run.conversation.thread_id),
    ]
    if len(calls) == 1:
        parts.append(change_link(ToolCall, calls[0].pk, f"{calls[0].name} call"))
    elif calls:
        parts.append(
            changelist_link(
                ToolCall,
                {"thread": event.run.conversation_id, "q": calls[0].name},
                f"one of {len(calls)} {calls[0].name} calls of this run",
            )
        )
    return format_html_join(" · ", "{}", ((part,) for part in parts))


def event_actor(event: MemoryEvent) -> SafeString | str:
    if event.actor_id is None:
        return "the agent" if event.run_id else "—"
    return user_link(event.actor_id, name_cell(event.actor.get_username()))


# The ledger kinds that only flip a setting (the memory switch, approval of each write).
TOGGLE_KINDS = (
    MemoryEventKind.SWITCH_ON,
    MemoryEventKind.SWITCH_OFF,
    MemoryEventKind.APPROVAL_ON,
    MemoryEventKind.APPROVAL_OFF,
)


def kind_label(kind: str) -> str:
    """A ledger kind (or a version's `initial`) in words, as staff read it."""
    if kind == INITIAL_VERSION_KIND:
        return "Initial (no recorded change wrote it)"
    try:
        return str(MemoryEventKind(kind).label)
    except ValueError:
        return kind


class ChangeFilter(admin.SimpleListFilter):
    """Memory events by what they changed: the file, or only a setting."""

    title = "what changed"
    parameter_name = "change"
    FILE = "file"
    SETTING = "setting"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list:
        return [
            (self.FILE, "the file (switch and approval toggles hidden)"),
            (self.SETTING, "switch and approval toggles only"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if self.value() == self.FILE:
            return queryset.exclude(kind__in=TOGGLE_KINDS)
        if self.value() == self.SETTING:
            return queryset.filter(kind__in=TOGGLE_KINDS)
        return queryset


def _is_uuid(term: str) -> bool:
    try:
        uuid.UUID(term)
    except ValueError:
        return False
    return True


@admin.register(MemoryEvent)
class MemoryEventAdmin(UserColumns, ReadOnlyAdmin):
    list_display = (
        "event_column",
        "created",
        "user_column",
        "kind_column",
        "actor_column",
        "run_column",
        "thread_column",
        "size_bytes",
        "hashes",
    )
    list_filter = (UserFilter, ThreadFilter, ChangeFilter, "kind")
    user_lookup = "user_id"
    thread_lookup = "run__conversation_id"
    search_fields = (user_name_lookup("user"), "run__run_id")
    search_help_text = "An exact user name or run id."
    ordering = ("-id",)
    fields = (
        "id",
        "user_link",
        "kind",
        "actor_link",
        "provenance",
        "before_sha256",
        "after_sha256",
        "size_bytes",
        "created",
    )
    help_texts = {
        "kind": "agent_added / agent_replaced: the agent's remember_memory; user_edited / "
        "user_cleared: the user or staff through the memory API; switch_on / switch_off: the "
        "memory switch.",
        "actor_link": "Who made the change; empty when the agent wrote.",
        "provenance": "The agent run behind the change, its thread, and its remember_memory "
        "tool call when it can be told apart.",
        "before_sha256": "SHA-256 of MEMORY.md before the change; it equals the previous "
        "event's after hash unless the file changed without a recorded event.",
        "after_sha256": "SHA-256 of MEMORY.md after the change (switch events: the file as "
        "it was).",
        "size_bytes": "Size of MEMORY.md after the change, in bytes.",
    }

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return ledger_events()

    def search_filter(self, term: str) -> Q:
        runs = AgentRun.objects.filter(run_id=term) if _is_uuid(term) else AgentRun.objects.none()
        return Q(user_id__in=users_named(term)) | Q(run_id__in=list(runs.values_list("pk")))

    @admin.display(description="event", ordering="id")
    def event_column(self, obj: MemoryEvent) -> str:
        return f"#{obj.pk}"

    @admin.display(description="change", ordering="kind")
    def kind_column(self, obj: MemoryEvent) -> str:
        return kind_label(obj.kind)

    @admin.display(description="when", ordering="id")
    def created(self, obj: MemoryEvent) -> SafeString:
        return time_cell(obj.created_at)

    @admin.display(description="by")
    def actor_column(self, obj: MemoryEvent) -> SafeString | str:
        return event_actor(obj)

    @admin.display(description="run")
    def run_column(self, obj: MemoryEvent) -> SafeString | str:
        if obj.run is None:
            return "—"
        return change_link(AgentRun, obj.run.pk, id_cell(obj.run.run_id))

    @admin.display(description="thread")
    def thread_column(self, obj: MemoryEvent) -> SafeString | str:
        if obj.run is None:
            return "—"
        return change_link(
            Conversation, obj.run.conversation_id, id_cell(obj.run.conversation.thread_id)
        )

    @admin.display(description="hash before → after")
    def hashes(self, obj: MemoryEvent) -> SafeString:
        """The start of each SHA-256, one per line (the whole hashes in the tooltip)."""
        return format_html(
            '<span class="yuxi-hash" title="{} → {}">{}…<br>→ {}…</span>',
            obj.before_sha256,
            obj.after_sha256,
            obj.before_sha256[:12],
            obj.after_sha256[:12],
        )

    @admin.display(description="by")
    def actor_link(self, obj: MemoryEvent) -> SafeString | str:
        return event_actor(obj)

    @admin.display(description="run · thread · tool call")
    def provenance(self, obj: MemoryEvent) -> SafeString | str:
        return event_provenance(obj, remember_calls_for([obj]).get(obj.pk, []))
