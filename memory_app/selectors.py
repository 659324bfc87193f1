"""Reads of memory settings."""

from memory_app.models import UserConfig


def memory_enabled(uid: int | str) -> bool:
    """Current value of the switch, read fresh from the database (no row means off)."""
    return UserConfig.objects.filter(user_id=uid, enable_memory=True).exists()
