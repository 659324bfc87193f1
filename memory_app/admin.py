"""Read-only staff pages for the memory switch."""

from django.contrib import admin

from memory_app.models import UserConfig
from yuxi_site.admin import ReadOnlyAdmin


@admin.register(UserConfig)
class UserConfigAdmin(ReadOnlyAdmin):
    list_display = ("user", "enable_memory")
    list_filter = ("enable_memory",)
    search_fields = ("user__username",)
    list_select_related = ("user",)
