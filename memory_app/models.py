"""Per-user memory settings."""

from django.conf import settings
from django.db import models


class UserConfig(models.Model):
    """The one switch for the memory capability; no row means memory is off."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memory_config"
    )
    enable_memory = models.BooleanField(default=False)

    class Meta:
        verbose_name = "user config"

    def __str__(self) -> str:
        return f"config of user {self.user_id} (memory {'on' if self.enable_memory else 'off'})"
