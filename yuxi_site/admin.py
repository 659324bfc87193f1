"""Shared admin base: staff may look, never touch."""

from django.contrib import admin
from django.http import HttpRequest


class ReadOnlyAdmin(admin.ModelAdmin):
    """No add, change or delete anywhere, and no bulk actions."""

    actions = None

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def get_readonly_fields(self, request: HttpRequest, obj: object = None) -> list[str]:
        own = [field.name for field in self.model._meta.fields]
        return own + [name for name in self.readonly_fields if name not in own]
