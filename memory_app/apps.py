"""The memory app's configuration (label `memory_app`)."""

from django.apps import AppConfig


class MemoryAppConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "memory_app"
    verbose_name = "Memory"
