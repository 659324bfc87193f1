"""A user's own threads and a thread's messages, a page at a time, as the page and the API
list them.

Keyset pagination on `(updated_at, id)` and `(created_at, id)`, so a page costs the same however
deep it is; the cursors are signed for their user (and thread), so a forged or borrowed one is
refused before any value reaches the database.
"""

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.core import signing
from django.db.models import Q

from conversations.models import VISIBLE_MESSAGE, Conversation, Message, ToolCall
from conversations.selectors.approvals import PendingApproval, pending_approvals
from conversations.utils.string_utils import is_storable_text

# Threads a page of the user's thread list holds at most.
THREAD_PAGE_MAX = 100


# Keeps thread-list cursors apart from every other value the site signs with SECRET_KEY (the
# salt names the module these reads had before they were split: cursors already handed out
# stay valid).
_CURSOR_SALT = "conversations.selectors.thread-cursor"


class InvalidCursor(ValueError):
    """A thread-list or message-page cursor this module did not make."""


@dataclass(frozen=True)
class ThreadPage:
    """One page of a user's threads, newest first, and the cursor of the next (None at the end),
    with the pending approvals of the page's threads by thread id."""

    threads: list[Conversation]
    next_cursor: str | None
    pending_approvals: dict[str, PendingApproval] = field(default_factory=dict)


def _encode_cursor(thread: Conversation, *, user_id: int) -> str:
    """The page's last thread, signed for `user_id`: only this module's own cursors are read."""
    return signing.dumps([user_id, thread.updated_at.isoformat(), thread.pk], salt=_CURSOR_SALT)


def _decode_cursor(cursor: str, *, user_id: int) -> Q:
    """The keyset condition of a cursor this module signed for `user_id`; anything else (forged,
    altered, another user's) is an `InvalidCursor` before any value reaches the database."""
    try:
        owner, stamp, pk = signing.loads(cursor, salt=_CURSOR_SALT)
        updated_at = datetime.fromisoformat(stamp)
    except (signing.BadSignature, ValueError, TypeError) as exc:
        raise InvalidCursor("not a cursor of this list") from exc
    if owner != user_id:
        raise InvalidCursor("not a cursor of this list")
    return Q(updated_at__lt=updated_at) | Q(updated_at=updated_at, pk__lt=pk)


def list_user_threads(
    *, user_id: int, status: str | None = None, cursor: str | None = None, limit: int = 20
) -> ThreadPage:
    """The user's own top-level threads of ordinary sources that hold a message, most recently
    updated first.

    Without `status`, the active ones (those history lookback may see); with it, those of
    that status, so archived or deleted threads can be found and restored. Keyset-paginated on
    `(updated_at, id)`, so a page costs the same however deep it is.
    """
    if not 1 <= limit <= THREAD_PAGE_MAX:
        raise ValueError(f"limit must be between 1 and {THREAD_PAGE_MAX}")
    threads = Conversation.objects.listed_to(user_id).filter(
        status=status or Conversation.Status.ACTIVE
    )
    if cursor is not None:
        threads = threads.filter(_decode_cursor(cursor, user_id=user_id))
    rows = list(threads.order_by("-updated_at", "-id")[: limit + 1])
    more = len(rows) > limit
    rows = rows[:limit]
    pending = {}
    if rows:
        approvals = pending_approvals(conversation_id__in=[row.pk for row in rows])
        pending = {row["thread_id"]: PendingApproval(**row) for row in approvals}
    return ThreadPage(
        threads=rows,
        next_cursor=_encode_cursor(rows[-1], user_id=user_id) if more else None,
        pending_approvals=pending,
    )


# Messages a page of a thread's messages holds at most.
MESSAGE_PAGE_MAX = 100

# Keeps message-page cursors apart from thread-list cursors and every other signed value.
_MESSAGE_CURSOR_SALT = "conversations.selectors.message-cursor"


def get_listed_thread(*, user_id: int, thread_id: str) -> Conversation | None:
    """`user_id`'s own thread with that id if their thread list may show it (any status); None
    for another user's, an unknown one, a sub-agent's or agent traffic (no existence oracle)."""
    if not is_storable_text(thread_id):
        return None
    return Conversation.objects.listed_to(user_id).filter(thread_id=thread_id).first()


@dataclass(frozen=True)
class ThreadMessage:
    """A user or assistant text message as its owner reads it, with the tool calls (name and
    status) its turn made before an assistant reply."""

    id: int
    role: str
    content: str
    created_at: datetime
    tool_calls: list[dict[str, str]]


@dataclass(frozen=True)
class MessagePage:
    """Messages oldest first, and the cursor of the older page before them (None: the first)."""

    messages: list[ThreadMessage]
    next_cursor: str | None


def _encode_message_cursor(message: dict[str, Any], *, user_id: int, thread_id: str) -> str:
    """The page's oldest message, signed for this user and thread."""
    return signing.dumps(
        [user_id, thread_id, message["created_at"].isoformat(), message["id"]],
        salt=_MESSAGE_CURSOR_SALT,
    )


def _decode_message_cursor(cursor: str, *, user_id: int, thread_id: str) -> Q:
    """Messages older than the cursor's; anything this module did not sign for this user and
    thread is an `InvalidCursor` before any value reaches the database."""
    try:
        owner, thread, stamp, pk = signing.loads(cursor, salt=_MESSAGE_CURSOR_SALT)
        created_at = datetime.fromisoformat(stamp)
    except (signing.BadSignature, ValueError, TypeError) as exc:
        raise InvalidCursor("not a cursor of this thread") from exc
    if owner != user_id or thread != thread_id:
        raise InvalidCursor("not a cursor of this thread")
    # Strictly before it in the thread's order, `(created_at, id)`: ids need not follow time.
    return Q(created_at__lt=created_at) | Q(created_at=created_at, id__lt=pk)


def list_thread_messages(
    *, user_id: int, conversation: Conversation, cursor: str | None = None, limit: int = 50
) -> MessagePage:
    """A page of the thread's user and assistant text messages (`VISIBLE_MESSAGE`), the newest
    first read and returned oldest first; `cursor` pages back towards the thread's start.

    Each assistant message carries the calls stored after the previous text message and up to
    it (its own, and those of tool-only replies of its turn). Two queries whatever the page's
    depth: the page with one older row (which says whether there is more and bounds the first
    message's calls), then those calls.
    """
    if not 1 <= limit <= MESSAGE_PAGE_MAX:
        raise ValueError(f"limit must be between 1 and {MESSAGE_PAGE_MAX}")
    thread_id = conversation.thread_id
    messages = Message.objects.filter(VISIBLE_MESSAGE, conversation=conversation)
    if cursor is not None:
        messages = messages.filter(
            _decode_message_cursor(cursor, user_id=user_id, thread_id=thread_id)
        )
    rows = list(
        messages.order_by("-created_at", "-id").values("id", "role", "content", "created_at")[
            : limit + 1
        ]
    )
    older = rows[limit] if len(rows) > limit else None
    rows = rows[:limit][::-1]
    if not rows:
        return MessagePage(messages=[], next_cursor=None)
    newest = rows[-1]
    window = Q(message__created_at__lt=newest["created_at"]) | Q(
        message__created_at=newest["created_at"], message_id__lte=newest["id"]
    )
    if older is not None:
        window &= Q(message__created_at__gt=older["created_at"]) | Q(
            message__created_at=older["created_at"], message_id__gt=older["id"]
        )
    calls = (
        ToolCall.objects.filter(window, message__conversation=conversation)
        .order_by("message__created_at", "message_id", "created_at", "id")
        .values_list("message__created_at", "message_id", "name", "status")
    )
    found: list[ThreadMessage] = []
    pending = iter(calls)
    call = next(pending, None)
    for row in rows:
        made = []
        while call is not None and (call[0], call[1]) <= (row["created_at"], row["id"]):
            made.append({"name": call[2], "status": call[3]})
            call = next(pending, None)
        found.append(
            ThreadMessage(
                id=row["id"],
                role=row["role"],
                content=row["content"],
                created_at=row["created_at"],
                tool_calls=made if row["role"] == Message.Role.ASSISTANT else [],
            )
        )
    return MessagePage(
        messages=found,
        next_cursor=(
            _encode_message_cursor(rows[0], user_id=user_id, thread_id=thread_id)
            if older is not None
            else None
        ),
    )
