"""The memory app's configuration (label `memory_app`)."""

from django.apps import AppConfig


class MemoryAppConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "memory_app"
    verbose_name = "Memory"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_logged_in

        from memory_app import checks  # noqa: F401 - registers the host settings check
        from memory_app.login_sessions import recorded_on_login

        # Erasure deletes a user's sessions by the keys recorded at each login.
        user_logged_in.connect(recorded_on_login, dispatch_uid="memory_app.login_sessions")
