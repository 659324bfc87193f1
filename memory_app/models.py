"""Per-user memory settings, the content-free audit ledger of memory changes, and the record
of each user's login sessions (so erasure can delete them)."""

from django.conf import settings
from django.db import models
from django.db.models import Q

from conversations.utils.db_functions import ClockTimestamp

__all__ = [
    "UserConfig",
    "MemoryEvent",
]


class UserConfig(models.Model):
    """The one switch for the memory capability; no row means memory is off."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memory_config"
    )
    enable_memory = models.BooleanField(default=False)
    # Off: the agent writes memory directly (one confirmation fewer). On: each write waits for
    # the user's decision (approve, edit or reject) in a `resume` run.
    memory_write_approval = models.BooleanField(
        default=False, help_text="Whether each memory write waits for the user's approval."
    )

    class Meta:
        verbose_name = "user config"

    def __str__(self) -> str:
        # Staff pages title it by username; they load the user with the row.
        return f"{self.user.get_username()} (memory {'on' if self.enable_memory else 'off'})"


class MemoryEventKind(models.TextChoices):
    AGENT_ADDED = "agent_added"
    AGENT_REPLACED = "agent_replaced"
    USER_EDITED = "user_edited"
    USER_CLEARED = "user_cleared"
    SWITCH_ON = "switch_on"
    SWITCH_OFF = "switch_off"
    APPROVAL_ON = "approval_on"
    APPROVAL_OFF = "approval_off"
    USER_RESTORED = "user_restored"
    VERSIONS_FORGOTTEN = "versions_forgotten"


class MemoryEvent(models.Model):
    """One change of a user's memory or switch: who, which run, the file's hashes; never text.

    MEMORY.md stays the single source of truth. Each row is written in the same transaction as
    the change it records, as the last statement before the file is renamed into place, so a
    writer whose database session died can never publish (the row is its liveness check).
    """

    Kind = MemoryEventKind

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memory_events"
    )
    kind = models.CharField(max_length=32, choices=Kind.choices)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="Who made the change: the user or a staff member; empty when the agent wrote.",
    )
    run = models.ForeignKey(
        "conversations.AgentRun",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="memory_events",
        help_text="The agent run that wrote, for agent changes.",
    )
    before_sha256 = models.CharField(
        max_length=64, help_text="SHA-256 (hex) of MEMORY.md's bytes before the change."
    )
    after_sha256 = models.CharField(
        max_length=64, help_text="SHA-256 (hex) of MEMORY.md's bytes after the change."
    )
    size_bytes = models.PositiveIntegerField(help_text="Size of MEMORY.md after the change.")
    created_at = models.DateTimeField(db_default=ClockTimestamp())

    class Meta:
        ordering = ["id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(kind__in=MemoryEventKind.values), name="memoryevent_kind_valid"
            ),
        ]
        indexes = [models.Index(fields=["user", "-id"], name="memoryevent_user_recent_idx")]

    def __str__(self) -> str:
        return f"{self.user.get_username()}: {self.kind} #{self.pk}"


class LoginSession(models.Model):
    """One login's session, recorded at login, so erasure deletes the user's sessions by key
    without scanning the session table. Deleting the session (logout, a key cycled at the next
    login, `clearsessions`) deletes this row with it."""

    session = models.OneToOneField(
        "sessions.Session", on_delete=models.CASCADE, primary_key=True, related_name="+"
    )
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField(db_default=ClockTimestamp())

    def __str__(self) -> str:
        return f"session of user #{self.user_id}"
