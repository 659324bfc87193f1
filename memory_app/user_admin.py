"""What a host may add to its own user admin: `ErasingUserAdminMixin`.

The apps never register, unregister or replace another app's `ModelAdmin` (the host's user
model, `Group`): a host that wants its user admin's delete to erase the user's memory and
history the way `erase_user` does (rows, ledger, checkpoints and workspace, set-wise, with a
confirmation page of counts instead of Django's list of every related row), and a link to the
apps' per-user staff page on each user's page, adds this mixin in front of its own admin class:

    @admin.register(MyUser)
    class MyUserAdmin(ErasingUserAdminMixin, admin.ModelAdmin):
        ...

Without it, deleting a user elsewhere still removes the user's rows (foreign keys cascade) and,
once that commits, the workspace (the memory app's `post_delete` handler).
"""

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.loader import render_to_string
from django.utils.safestring import SafeString

from conversations.admin_base import changelist_url, user_url
from conversations.models import AgentRun, Conversation, Message, ToolCall
from memory_app.models import MemoryEvent
from memory_app.services import erase_user
from memory_app.user_data import erasure_counts

__all__ = [
    "ErasingUserAdminMixin",
]

# The read-only field the mixin adds to a user's change page.
MEMORY_FIELD = "memory_and_history"


def user_records(*, user_id: Any, name: str) -> SafeString:
    """Links to the user's staff page and to their threads, runs, ledger, messages and tool
    calls in the apps' admin."""
    query = f"user={user_id}"
    return render_to_string(
        "admin/memory_app/user_links.html",
        {
            "username": name,
            "page_url": user_url(user_id),
            "lists": [
                ("threads", f"{changelist_url(Conversation)}?{query}"),
                ("runs", f"{changelist_url(AgentRun)}?{query}"),
                ("memory events", f"{changelist_url(MemoryEvent)}?{query}"),
                ("messages", f"{changelist_url(Message)}?{query}"),
                ("tool calls", f"{changelist_url(ToolCall)}?{query}"),
            ],
        },
    )


class ErasingUserAdminMixin:
    """A host's user admin whose delete (the page and the bulk action alike) goes through
    `erase_user`, and whose change page links to the user's memory and history."""

    def get_deleted_objects(
        self, objs: Any, request: HttpRequest
    ) -> tuple[list[Any], dict[str, int], set[str], list[Any]]:
        users = list(objs)
        counts = erasure_counts(user_ids=[user.pk for user in users])
        summary = {kind.replace("_", " "): count for kind, count in counts.items() if count}
        perms_needed = set() if self.has_delete_permission(request) else {"user"}
        return [str(user) for user in users], summary, perms_needed, []

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        erase_user(user=obj, actor=request.user)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet) -> None:
        for user in queryset:
            erase_user(user=user, actor=request.user)

    @admin.display(description="links")
    def memory_and_history(self, obj: Any) -> SafeString:
        return user_records(user_id=obj.pk, name=obj.get_username())

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        fields = list(super().get_readonly_fields(request, obj))
        return [*fields, MEMORY_FIELD] if obj is not None else fields

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> list:
        fieldsets = list(super().get_fieldsets(request, obj))
        shown = {name for _, options in fieldsets for name in _flat(options.get("fields", ()))}
        if obj is None or MEMORY_FIELD in shown:
            return fieldsets
        return [
            *fieldsets[:1],
            ("Memory and history", {"fields": (MEMORY_FIELD,)}),
            *fieldsets[1:],
        ]


def _flat(fields: Any) -> list[str]:
    names = []
    for field in fields:
        names.extend(field if isinstance(field, list | tuple) else [field])
    return names
