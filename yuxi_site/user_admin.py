"""The reference site's own User and Group admins (a host's choice, not the apps'): Django's,
changed by superusers only, with the User delete going through `erase_user` (the apps'
`ErasingUserAdminMixin`) and the User page showing what staff changed on it.

The auth User and Group pages are the only admin pages here that change anything, and only a
superuser may use them to: another staff member, whatever permissions they were granted, only
views. Django's admin logs every add, change (a password included) and delete they make.
"""

from typing import Any

from django.contrib import admin
from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.contrib.admin.templatetags.admin_urls import admin_urlname
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group
from django.contrib.contenttypes.models import ContentType
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from conversations.admin.columns import related_list
from conversations.admin_base import format_timestamp
from conversations.selectors.staff import first_related
from memory_app.user_admin import ErasingUserAdminMixin

__all__ = ["SiteGroupAdmin", "SiteUserAdmin", "SuperuserWritesOnly"]

User = get_user_model()

# How the admin log names each kind of change.
_LOG_ACTIONS = {ADDITION: "added", CHANGE: "changed", DELETION: "deleted"}


class SuperuserWritesOnly:
    """Add, change and delete for superusers only; viewing keeps Django's permissions."""

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return request.user.is_superuser

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.is_superuser

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.is_superuser


class SiteGroupAdmin(SuperuserWritesOnly, GroupAdmin):
    """Django's Group admin, changed by superusers only."""


class SiteUserAdmin(ErasingUserAdminMixin, SuperuserWritesOnly, UserAdmin):
    """Django's UserAdmin: superuser writes, deleting erases the user's data, and the page
    links to the user's memory and history and lists staff changes to it."""

    list_per_page = 50
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER

    class Media:
        css = {"all": ("yuxi/admin.css",)}

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        fields = super().get_readonly_fields(request, obj)
        return [*fields, "admin_log"] if obj is not None else fields

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> list:
        fieldsets = super().get_fieldsets(request, obj)
        if obj is None:
            return fieldsets
        # The mixin put "Memory and history" second.
        return [*fieldsets[:2], ("Changes by staff", {"fields": ("admin_log",)}), *fieldsets[2:]]

    @admin.display(description="admin log")
    def admin_log(self, obj: Any) -> SafeString:
        """The latest changes staff made to this user in the admin, newest first."""
        entries = LogEntry.objects.filter(
            content_type=ContentType.objects.get_for_model(User), object_id=str(obj.pk)
        ).select_related("user")
        related = first_related(entries.order_by("-action_time", "-id"))
        return related_list(
            related,
            [
                format_html(
                    "{} · {} · {}: {}",
                    format_timestamp(entry.action_time),
                    entry.user.get_username(),
                    _LOG_ACTIONS[entry.action_flag],
                    entry.get_change_message() or "no fields changed",
                )
                for entry in related.rows
            ],
            empty="none: no staff member has changed this user in the admin",
            more_url=reverse(admin_urlname(User._meta, "history"), args=[obj.pk]),
            more_text="the whole admin log of this user",
        )


def register() -> None:
    """Replace Django's own User and Group admins with the site's (the site's choice, made in
    its URLconf: the apps never touch another app's admin)."""
    for model, model_admin in ((Group, SiteGroupAdmin), (User, SiteUserAdmin)):
        if admin.site.is_registered(model):
            admin.site.unregister(model)
        admin.site.register(model, model_admin)
