"""Reads of a thread outside history lookback (which lives in repository.py): the thread a
user chats in and its recent dialogue, and bounded excerpts of the stored record for staff."""

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Q

from conversations.models import VISIBLE_MESSAGE, Conversation, Message
from yuxi_site.utils.db_functions import byte_length, text_prefix
from yuxi_site.utils.string_utils import is_storable_text, truncate_utf8

# How many earlier user/assistant text messages of the thread the model is shown.
DIALOGUE_MAX_MESSAGES = 20
# Most of one earlier message's content that the model is shown.
DIALOGUE_CONTENT_MAX_BYTES = 16384


def get_chat_thread(*, user_id: int | str, thread_id: str) -> Conversation | None:
    """`user_id`'s own visible thread with that id; None for any other (no existence oracle)."""
    if not is_storable_text(thread_id):
        return None  # no thread can have this id
    return Conversation.objects.visible_to(user_id).filter(thread_id=thread_id).first()


@dataclass(frozen=True)
class DialogueTurn:
    """One earlier message of the thread as the model is shown it."""

    role: str
    content: str
    truncated: bool


def recent_dialogue(*, conversation: Conversation, before: Message) -> list[DialogueTurn]:
    """The latest visible messages (`VISIBLE_MESSAGE`, the lookback rule) of the thread before
    `before`, oldest first, each content cut to `DIALOGUE_CONTENT_MAX_BYTES` by the database."""
    # Strictly before `before` in the order itself, `(created_at, id)`: ids need not follow time.
    earlier = Q(created_at__lt=before.created_at) | Q(
        created_at=before.created_at, id__lt=before.id
    )
    rows = (
        Message.objects.filter(VISIBLE_MESSAGE, earlier, conversation=conversation)
        .order_by("-created_at", "-id")
        .values("role")
        .annotate(head=text_prefix("content", DIALOGUE_CONTENT_MAX_BYTES))[:DIALOGUE_MAX_MESSAGES]
    )
    turns = []
    for row in reversed(rows):
        content, cut = truncate_utf8(row["head"], DIALOGUE_CONTENT_MAX_BYTES)
        turns.append(DialogueTurn(role=row["role"], content=content, truncated=cut))
    return turns


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
