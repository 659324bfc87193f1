"""The admin's User delete goes through `erase_user`: rows, ledger and workspace, set-wise.

Django's own delete walks and lists every related row (tens of seconds for a user with a long
history) and leaves MEMORY.md on disk; this confirmation page shows counts instead.

The auth User and Group pages are the only admin pages that change anything, and only a
superuser may use them to: another staff member, whatever permissions they were granted, only
views. Django's admin logs every add, change (a password included) and delete they make.
"""

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.db.models import QuerySet
from django.http import HttpRequest

from memory_app.services import erase_user
from memory_app.user_data import erasure_counts

__all__ = ["ErasingUserAdmin", "SuperuserGroupAdmin", "SuperuserWritesOnly"]

User = get_user_model()


class SuperuserWritesOnly:
    """Add, change and delete for superusers only; viewing keeps Django's permissions."""

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return request.user.is_superuser

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.is_superuser

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.is_superuser


class SuperuserGroupAdmin(SuperuserWritesOnly, GroupAdmin):
    """Django's Group admin, changed by superusers only."""


class ErasingUserAdmin(SuperuserWritesOnly, UserAdmin):
    """Django's UserAdmin whose delete (page and bulk action alike) erases the user's data."""

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
