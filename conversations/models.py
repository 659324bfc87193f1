"""Conversations, their messages and tool calls, and the agent runs that work on them."""

import operator
import uuid
from dataclasses import dataclass
from functools import reduce

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex, OpClass
from django.contrib.postgres.search import SearchVectorField
from django.db import models
from django.db.models import BooleanField, Exists, ExpressionWrapper, F, OuterRef, Q
from django.db.models.functions import Upper

from conversations.utils.db_functions import ClockTimestamp
from conversations.utils.string_utils import truncate_utf8

__all__ = [
    "Conversation",
    "Message",
    "ToolCall",
    "AgentRun",
    "VISIBLE_THREAD",
]

# Most of a title that a conversation's name (`str()`) carries.
TITLE_IN_NAME_BYTES = 80


def _in_choices(field: str, choices: type[models.TextChoices]) -> Q:
    return Q(**{f"{field}__in": choices.values})


class ConversationStatus(models.TextChoices):
    ACTIVE = "active"
    ARCHIVED = "archived"
    DELETED = "deleted"


class ConversationSource(models.TextChoices):
    CHAT = "chat"
    API = "api"
    AGENT_CALL = "agent_call"
    AGENT_EVALUATION = "agent_evaluation"


class MessageRole(models.TextChoices):
    USER = "user"
    ASSISTANT = "assistant"
    SYSTEM = "system"
    TOOL = "tool"


class MessageType(models.TextChoices):
    TEXT = "text"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"


class ToolCallStatus(models.TextChoices):
    PENDING = "pending"
    SUCCESS = "success"
    ERROR = "error"
    # A memory write the user's decision (or a new message, or expiry) did not let run, or
    # whose resume run ended before it ran: nothing was written.
    DECLINED = "declined"


class AgentRunType(models.TextChoices):
    CHAT = "chat"
    RESUME = "resume"
    SUBAGENT = "subagent"


class AgentRunStatus(models.TextChoices):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    # Stopped before a memory write, waiting for the user's decision (a `resume` run's).
    INTERRUPTED = "interrupted"


# Sources whose threads are machine traffic, never shown to history lookback.
HIDDEN_SOURCES = (ConversationSource.AGENT_CALL, ConversationSource.AGENT_EVALUATION)


@dataclass(frozen=True)
class VisibilityTerm:
    """One condition a thread must meet to be visible to history lookback, and why it matters."""

    key: str
    condition: Q
    reason: str  # formatted with the conversation's fields when the condition fails


# Threads the history lookback may read: not a SubAgent child, active, ordinary source.
# Both `VISIBLE_THREAD` and the staff banner's reasons derive from these terms alone.
THREAD_VISIBILITY_TERMS = (
    VisibilityTerm(
        "top_level",
        Q(parent__isnull=True),
        "it is a persisted SubAgent child thread (it has a parent thread)",
    ),
    VisibilityTerm(
        "active",
        Q(status=ConversationStatus.ACTIVE),
        "its status is {status}; only active threads are visible",
    ),
    VisibilityTerm(
        "ordinary_source",
        ~Q(source__in=HIDDEN_SOURCES),
        "its source is {source}, which is agent traffic, never shown to lookback",
    ),
)
VISIBLE_THREAD = reduce(operator.and_, (term.condition for term in THREAD_VISIBILITY_TERMS))

_TERM_PREFIX = "lookback_term_"


# Messages the history lookback may read (an allowlist): user/assistant text, nothing else.
VISIBLE_MESSAGE = Q(
    role__in=(MessageRole.USER, MessageRole.ASSISTANT), message_type=MessageType.TEXT
)


class CjkBigrams(models.Func):
    """Distinct 2-character substrings of a text's runs of CJK-range characters (U+2E80 up).

    Backs the index that serves 2-character CJK queries, which trigrams cannot. The SQL
    function is created by migration 0002.
    """

    function = "yuxi_cjk_bigrams"
    output_field = ArrayField(models.TextField())


class ContentWords(models.Func):
    """The words of a text as PostgreSQL's `simple` text search configuration keeps them
    (lowercased, unstemmed), every run of letters or digits one word, of its first 100,000
    characters only (a tsvector holds at most 1 MB: a longer message could not be stored).

    Backs the index through which a rare word's own messages are found without walking the
    posting lists of its trigrams (each of those is in a large share of all messages). The SQL
    function is created by migration 0013.
    """

    function = "yuxi_words"
    output_field = SearchVectorField()


class ConversationQuerySet(models.QuerySet):
    def visible_to(self, uid: int | str) -> "ConversationQuerySet":
        """`uid`'s own threads that history lookback may read."""
        return self.filter(VISIBLE_THREAD, user_id=uid)

    def listed_to(self, uid: int | str) -> "ConversationQuerySet":
        """`uid`'s own threads their thread list may show, of any status: top-level threads of
        ordinary sources (never a SubAgent child or agent traffic) that hold a message, so a
        thread `agent_run` opened and the team's loop never wrote to stays out of the list."""
        return self.filter(
            ~Q(source__in=HIDDEN_SOURCES),
            Exists(Message.objects.filter(conversation=OuterRef("pk"))),
            user_id=uid,
            parent__isnull=True,
        )

    def with_lookback_visibility(self) -> "ConversationQuerySet":
        """Have the database judge each visibility term, so `lookback_hidden_reasons` is free."""
        return self.annotate(
            **{
                f"{_TERM_PREFIX}{term.key}": ExpressionWrapper(
                    term.condition, output_field=BooleanField()
                )
                for term in THREAD_VISIBILITY_TERMS
            }
        )


class Conversation(models.Model):
    Status = ConversationStatus
    Source = ConversationSource

    thread_id = models.CharField(max_length=64, unique=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="conversations"
    )
    title = models.TextField(blank=True, default="")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ACTIVE)
    source = models.CharField(max_length=32, choices=Source.choices, default=Source.CHAT)
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="children"
    )
    metadata = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(db_default=ClockTimestamp())
    # Set by the database clock on insert; writers bump it with `ClockTimestamp()` too.
    updated_at = models.DateTimeField(db_default=ClockTimestamp())

    objects = ConversationQuerySet.as_manager()

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=_in_choices("status", ConversationStatus),
                name="conversation_status_valid",
            ),
            models.CheckConstraint(
                condition=_in_choices("source", ConversationSource),
                name="conversation_source_valid",
            ),
        ]
        indexes = [
            models.Index(
                fields=["user", "-updated_at"],
                name="conversation_visible_idx",
                condition=VISIBLE_THREAD,
            ),
            models.Index(fields=["user", "status"], name="conversation_user_status_idx"),
        ]

    def __str__(self) -> str:
        if "title" in self.get_deferred_fields():
            # Naming a row must not load an unbounded column (admin pages defer it).
            return self.thread_id
        title, _ = truncate_utf8(self.title, TITLE_IN_NAME_BYTES)
        return f"{self.thread_id} ({title or 'untitled'})"

    def lookback_hidden_reasons(self) -> list[str]:
        """Why history lookback cannot see this thread; empty when it can.

        Needs a row loaded through `with_lookback_visibility()`: the database, not Python,
        evaluates the same conditions that make up `VISIBLE_THREAD`.
        """
        return [
            term.reason.format(status=self.status, source=self.source)
            for term in THREAD_VISIBILITY_TERMS
            if not getattr(self, f"{_TERM_PREFIX}{term.key}")
        ]


class Message(models.Model):
    Role = MessageRole
    Type = MessageType
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="messages"
    )
    role = models.CharField(max_length=16, choices=Role.choices)
    message_type = models.CharField(max_length=16, choices=Type.choices, default=Type.TEXT)
    content = models.TextField(blank=True, default="")
    image_content = models.TextField(null=True, blank=True)
    attachments = models.JSONField(default=list, blank=True)
    feedback = models.JSONField(default=dict, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(db_default=ClockTimestamp())
    # Denormalized conversation owner, so search indexes can be per user. A database trigger
    # (migration 0002) fills it on every insert and update; Python never sets it, and no
    # visibility rule relies on it (searches still join the visible conversation).
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        editable=False,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        related_name="+",
    )

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.CheckConstraint(
                condition=_in_choices("role", MessageRole), name="message_role_valid"
            ),
            models.CheckConstraint(
                condition=_in_choices("message_type", MessageType),
                name="message_type_valid",
            ),
        ]
        indexes = [
            models.Index(
                fields=["conversation", "created_at", "id"],
                name="message_thread_order_idx",
            ),
            # The model's own ordering, so a staff changelist pages without sorting the table.
            models.Index(fields=["created_at", "id"], name="message_order_idx"),
            # Staff changelists of one user's messages, or of one role, newest first: no sort,
            # and a rare role is found (and counted) without reading every message.
            models.Index(fields=["owner", "created_at", "id"], name="message_owner_order_idx"),
            models.Index(fields=["role", "created_at", "id"], name="message_role_order_idx"),
            # History search: a user's visible messages newest first (frequent terms stop
            # early), a trigram index (3+ characters) and a CJK bigram index (2 characters).
            models.Index(
                fields=["owner", "-created_at", "-id"],
                name="message_owner_recent_idx",
                condition=VISIBLE_MESSAGE,
            ),
            GinIndex(
                F("owner"),
                OpClass(Upper("content"), name="gin_trgm_ops"),
                name="message_owner_trgm_idx",
                condition=VISIBLE_MESSAGE,
            ),
            GinIndex(
                F("owner"),
                CjkBigrams(Upper("content")),
                name="message_owner_bigram_idx",
                condition=VISIBLE_MESSAGE,
            ),
            GinIndex(
                F("owner"),
                ContentWords("content"),
                name="message_owner_words_idx",
                condition=VISIBLE_MESSAGE,
            ),
        ]

    def __str__(self) -> str:
        return f"{self.role}/{self.message_type} #{self.pk}"


class ToolCall(models.Model):
    Status = ToolCallStatus
    # No index of its own: `toolcall_msg_idx` leads with the message and serves every lookup
    # by it (and the cascade from Message).
    message = models.ForeignKey(
        Message, on_delete=models.CASCADE, related_name="tool_calls", db_index=False
    )
    tool_call_id = models.CharField(max_length=128)
    name = models.CharField(max_length=128)
    input = models.JSONField(default=dict, blank=True)
    output = models.TextField(blank=True, default="")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    error = models.TextField(blank=True, default="")
    metadata = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(db_default=ClockTimestamp())

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.CheckConstraint(
                condition=_in_choices("status", ToolCallStatus),
                name="toolcall_status_valid",
            ),
        ]
        indexes = [
            models.Index(fields=["message", "created_at", "id"], name="toolcall_msg_idx"),
            # The model's own ordering, so a staff changelist pages without sorting the table.
            models.Index(fields=["created_at", "id"], name="toolcall_order_idx"),
            # Staff search by the model's call id, and the status filter (errors are rare).
            models.Index(fields=["tool_call_id"], name="toolcall_call_id_idx"),
            models.Index(fields=["status", "created_at", "id"], name="toolcall_status_order_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.tool_call_id})"


class AgentRun(models.Model):
    RunType = AgentRunType
    Status = AgentRunStatus
    TERMINAL_STATUSES = (Status.SUCCEEDED, Status.FAILED, Status.CANCELLED, Status.INTERRUPTED)

    run_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="agent_runs"
    )
    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="runs")
    request_id = models.CharField(max_length=128)
    run_type = models.CharField(max_length=16, choices=RunType.choices, default=RunType.CHAT)
    parent_run = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="child_runs",
    )
    # On a `resume` run: the interrupted run whose pending decision it carries. Unique, so
    # one decision settles an interrupted run: of two racing decisions exactly one applies.
    resumes = models.OneToOneField(
        "self",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="resumed_by",
        help_text="The interrupted run this resume run continues (its decision).",
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    worker_id = models.CharField(max_length=128, null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=ClockTimestamp())
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Why the run failed or was cancelled, for staff; never a secret. Empty otherwise.
    error = models.TextField(blank=True, default="", db_default="")

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=_in_choices("run_type", AgentRunType),
                name="agentrun_type_valid",
            ),
            models.CheckConstraint(
                condition=_in_choices("status", AgentRunStatus),
                name="agentrun_status_valid",
            ),
        ]
        indexes = [
            models.Index(
                fields=["created_at", "id"],
                name="agentrun_pending_idx",
                condition=Q(status=AgentRunStatus.PENDING),
            ),
            # Interrupted runs by thread (the pending approval of a thread) and by age (expiry).
            models.Index(
                fields=["conversation", "finished_at"],
                name="agentrun_interrupted_idx",
                condition=Q(status=AgentRunStatus.INTERRUPTED),
            ),
            models.Index(
                fields=["finished_at"],
                name="agentrun_interrupted_age_idx",
                condition=Q(status=AgentRunStatus.INTERRUPTED),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.run_type} run {self.run_id} ({self.status})"


class ErasureFence(models.Model):
    """An erasure of this user has begun: the user counts as inactive from its first commit
    (no new thread, run or memory write) until the erasure deletes the user, and this row with
    it. The apps' own row, so a user model without `is_active` is fenced all the same."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        primary_key=True,
        related_name="erasure_fence",
    )
    created_at = models.DateTimeField(db_default=ClockTimestamp())

    def __str__(self) -> str:
        return f"erasure of user #{self.user_id}"
