"""Bounded reads of raw conversation records for staff previews (history lookback is in
`conversations.repository`; this shows the record as stored, not as the agent sees it)."""

from dataclasses import dataclass
from datetime import datetime

from conversations.models import Message
from yuxi_site.utils.db_functions import byte_length, text_prefix
from yuxi_site.utils.string_utils import truncate_utf8

# How many of a thread's latest messages a raw preview lists.
RAW_MESSAGES_SHOWN = 50
# Most of one message's content that a raw preview shows.
RAW_CONTENT_BYTES = 2048


@dataclass(frozen=True)
class RawMessage:
    """One stored message, content cut to `RAW_CONTENT_BYTES`."""

    message_id: int
    role: str
    message_type: str
    created_at: datetime
    content: str
    content_bytes: int
    truncated: bool


@dataclass(frozen=True)
class RawMessagesPage:
    """A thread's latest messages in `(created_at, id)` order, and how many earlier ones exist."""

    messages: list[RawMessage]
    earlier_count: int


def raw_messages_excerpt(*, conversation_id: int) -> RawMessagesPage:
    """The latest `RAW_MESSAGES_SHOWN` messages of a thread, every field cut by the database.

    Two queries whatever the thread's size; no image, attachment, feedback or metadata is read.
    """
    rows = list(
        Message.objects.filter(conversation_id=conversation_id)
        .order_by("-created_at", "-id")
        .values("id", "role", "message_type", "created_at")
        .annotate(
            head=text_prefix("content", RAW_CONTENT_BYTES),
            size=byte_length("content"),
        )[:RAW_MESSAGES_SHOWN]
    )
    total = Message.objects.filter(conversation_id=conversation_id).count()
    messages = []
    for row in reversed(rows):
        content, cut = truncate_utf8(row["head"], RAW_CONTENT_BYTES)
        messages.append(
            RawMessage(
                message_id=row["id"],
                role=row["role"],
                message_type=row["message_type"],
                created_at=row["created_at"],
                content=content,
                content_bytes=row["size"],
                truncated=cut,
            )
        )
    return RawMessagesPage(messages=messages, earlier_count=total - len(messages))
