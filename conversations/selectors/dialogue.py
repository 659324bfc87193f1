"""What a chat turn reads of its thread: the thread itself, checked in one query, and the
earlier messages the model is shown.

Both run on every turn, so each is a query compiled once (`PreparedQuery`), and the dialogue's
contents are cut by the database to what the model may be shown.
"""

from dataclasses import dataclass
from datetime import UTC, datetime

from django.db.models import Exists, OuterRef, Q, QuerySet

from conversations.models import VISIBLE_MESSAGE, Conversation, Message
from conversations.selectors.approvals import undecided_interrupts
from conversations.users import active_user_q
from conversations.utils.db_functions import text_prefix
from conversations.utils.prepared import PreparedQuery
from conversations.utils.string_utils import is_storable_text, truncate_utf8

# How many earlier user/assistant text messages of the thread the model is shown.
DIALOGUE_MAX_MESSAGES = 20
# Most of one earlier message's content that the model is shown.
DIALOGUE_CONTENT_MAX_BYTES = 16384


def _entry_candidates(*, user_id: int, thread_id: str) -> QuerySet:
    return (
        Conversation.objects.visible_to(user_id)
        .filter(active_user_q("user"), thread_id=thread_id)
        .annotate(undecided=Exists(undecided_interrupts(conversation_id=OuterRef("pk"))))[:1]
    )


# Every chat turn sends it: compiled once (placeholders no real value takes).
_CHAT_THREAD_ENTRY = PreparedQuery(
    _entry_candidates, user_id=-7_349_218_561, thread_id="yuxi:placeholder:thread_id"
)


def chat_thread_entry(*, user_id: int | str, thread_id: str) -> tuple[Conversation | None, bool]:
    """A turn's entry check in one query: `user_id`'s own visible thread with that id, if the
    user is active (None for any other: no existence oracle), and whether an approval in it waits
    undecided (a new message declines it first)."""
    if not is_storable_text(thread_id):
        return None, False
    found = _CHAT_THREAD_ENTRY(user_id=int(user_id), thread_id=thread_id)
    conversation = found[0] if found else None
    return conversation, bool(conversation is not None and conversation.undecided)


@dataclass(frozen=True)
class DialogueTurn:
    """One earlier message of the thread as the model is shown it."""

    role: str
    content: str
    truncated: bool


def _dialogue_before(*, conversation_id: int, created_at: datetime, message_id: int) -> QuerySet:
    # Strictly before the message in the order itself, `(created_at, id)`: ids need not follow
    # time.
    earlier = Q(created_at__lt=created_at) | Q(created_at=created_at, id__lt=message_id)
    return (
        Message.objects.filter(VISIBLE_MESSAGE, earlier, conversation_id=conversation_id)
        .order_by("-created_at", "-id")
        .values("role")
        .annotate(head=text_prefix("content", DIALOGUE_CONTENT_MAX_BYTES))[:DIALOGUE_MAX_MESSAGES]
    )


# Every turn in an existing thread sends it: compiled once (placeholders no real value takes).
_RECENT_DIALOGUE = PreparedQuery(
    _dialogue_before,
    conversation_id=-7_349_218_562,
    created_at=datetime(1901, 2, 3, 4, 5, 6, 789012, tzinfo=UTC),
    message_id=-7_349_218_563,
)


def recent_dialogue(*, conversation: Conversation, before: Message) -> list[DialogueTurn]:
    """The latest visible messages (`VISIBLE_MESSAGE`, the lookback rule) of the thread before
    `before`, oldest first, each content cut to `DIALOGUE_CONTENT_MAX_BYTES` by the database."""
    rows = _RECENT_DIALOGUE(
        conversation_id=conversation.pk, created_at=before.created_at, message_id=before.pk
    )
    turns = []
    for row in reversed(rows):
        content, cut = truncate_utf8(row["head"], DIALOGUE_CONTENT_MAX_BYTES)
        turns.append(DialogueTurn(role=row["role"], content=content, truncated=cut))
    return turns
