"""The memory app's configuration (label `memory_app`)."""

from django.apps import AppConfig
from django.core.exceptions import ImproperlyConfigured

# The apps the memory app's models refer to: runs and threads, and the login sessions erasure
# deletes by key.
MODEL_APPS = ("conversations", "django.contrib.sessions")


class MemoryAppConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "memory_app"
    verbose_name = "Memory"

    def import_models(self) -> None:
        """Without an app its models refer to, Django would fail deep inside a model import (no
        system check runs before models load): say what the host must add instead."""
        missing = [name for name in MODEL_APPS if not self.apps.is_installed(name)]
        if missing:
            raise ImproperlyConfigured(
                f"memory_app needs {', '.join(map(repr, missing))} in INSTALLED_APPS (threads "
                "and runs; login sessions, which erasure deletes): INSTALLED_APPS += "
                "['django.contrib.sessions', 'ninja', 'conversations', 'memory_app']"
            )
        super().import_models()

    def ready(self) -> None:
        from django.conf import settings
        from django.contrib.auth.signals import user_logged_in
        from django.db.models.signals import post_delete, pre_delete

        from conversations.runs.reaping import answer_expired_approvals_with
        from memory_app import checks  # noqa: F401 - registers the host settings check
        from memory_app.login_sessions import recorded_on_login
        from memory_app.tool_results import DECLINED_RESULT
        from memory_app.user_data import (
            delete_checkpoints_of_deleted_user,
            remove_workspace_of_deleted_user,
        )

        # The conversations app's reaper declines memory writes whose approval expired; their
        # calls are answered as a declined write is (the text is this app's).
        answer_expired_approvals_with(DECLINED_RESULT)
        # Erasure deletes a user's sessions by the keys recorded at each login.
        user_logged_in.connect(recorded_on_login, dispatch_uid="memory_app.login_sessions")
        # Whatever deletes a user (the host's own admin, a script), nothing of their memory
        # outlives them: their checkpoints go with the delete, their workspace once it commits.
        user_model = settings.AUTH_USER_MODEL
        pre_delete.connect(
            delete_checkpoints_of_deleted_user,
            sender=user_model,
            dispatch_uid="memory_app.user_checkpoints",
        )
        post_delete.connect(
            remove_workspace_of_deleted_user,
            sender=user_model,
            dispatch_uid="memory_app.user_workspace",
        )
