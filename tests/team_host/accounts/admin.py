"""The team's own user admin: a plain ModelAdmin the apps must leave as it is."""

from django.contrib import admin

from accounts.models import EmailUser


@admin.register(EmailUser)
class EmailUserAdmin(admin.ModelAdmin):
    list_display = ("email", "is_staff")
    search_fields = ("email",)
    ordering = ("email",)
