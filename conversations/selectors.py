"""Reads of a thread outside history lookback (which lives in repository.py): the thread a
user chats in and its recent dialogue, and bounded excerpts of the stored record for staff."""

import base64
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Q

from conversations.models import HIDDEN_SOURCES, VISIBLE_MESSAGE, Conversation, Message
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


# Threads a page of the user's thread list holds at most.
THREAD_PAGE_MAX = 100


class InvalidCursor(ValueError):
    """A thread-list cursor this module did not make."""


@dataclass(frozen=True)
class ThreadPage:
    """One page of a user's threads, newest first, and the cursor of the next (None at the end)."""

    threads: list[Conversation]
    next_cursor: str | None


def _encode_cursor(thread: Conversation) -> str:
    raw = f"{thread.updated_at.isoformat()}|{thread.pk}".encode()
    return base64.urlsafe_b64encode(raw).decode()


def _decode_cursor(cursor: str) -> Q:
    try:
        stamp, pk = base64.urlsafe_b64decode(cursor.encode("ascii")).decode().split("|")
        updated_at, pk = datetime.fromisoformat(stamp), int(pk)
    except (ValueError, UnicodeError) as exc:
        raise InvalidCursor("not a cursor of this list") from exc
    if updated_at.tzinfo is None:
        raise InvalidCursor("not a cursor of this list")
    return Q(updated_at__lt=updated_at) | Q(updated_at=updated_at, pk__lt=pk)


def list_user_threads(
    *, user_id: int, status: str | None = None, cursor: str | None = None, limit: int = 20
) -> ThreadPage:
    """The user's own top-level threads of ordinary sources, most recently updated first.

    Without `status`, the threads history lookback may see (active ones); with it, those of
    that status, so archived or deleted threads can be found and restored. Keyset-paginated on
    `(updated_at, id)`, so a page costs the same however deep it is.
    """
    if not 1 <= limit <= THREAD_PAGE_MAX:
        raise ValueError(f"limit must be between 1 and {THREAD_PAGE_MAX}")
    if status is None:
        threads = Conversation.objects.visible_to(user_id)
    else:
        threads = Conversation.objects.filter(
            ~Q(source__in=HIDDEN_SOURCES), user_id=user_id, parent__isnull=True, status=status
        )
    if cursor is not None:
        threads = threads.filter(_decode_cursor(cursor))
    rows = list(threads.order_by("-updated_at", "-id")[: limit + 1])
    more = len(rows) > limit
    rows = rows[:limit]
    return ThreadPage(threads=rows, next_cursor=_encode_cursor(rows[-1]) if more else None)
