from django.apps import AppConfig


class MemoryAppConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "memory_app"
    verbose_name = "Memory"

    def ready(self) -> None:
        # After the admin's autodiscover (an earlier app): replace the User admin with one
        # whose delete erases the user's data.
        from memory_app import user_admin  # noqa: F401
