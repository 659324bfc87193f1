"""Reads of threads outside history lookback (which lives in repository.py): the thread a user
chats in and its recent dialogue, a user's threads listed, exported and counted, the memory
writes waiting for a user's approval, and bounded excerpts of the stored record for staff."""

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import IO, Any

import psycopg
from django.core import signing
from django.db import connection
from django.db.models import Exists, F, OuterRef, Q, QuerySet, TextField
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast

from conversations.conf import setting
from conversations.models import (
    VISIBLE_MESSAGE,
    AgentRun,
    Conversation,
    Message,
    ToolCall,
)
from conversations.users import active_user_q
from conversations.utils.connections import server_cursor
from conversations.utils.db_functions import ClockTimestamp, byte_length, text_prefix
from conversations.utils.prepared import PreparedQuery
from conversations.utils.string_utils import is_storable_text, truncate_utf8

__all__ = [
    "EXPORT_FETCH_ROWS",
    "DIALOGUE_CONTENT_MAX_BYTES",
    "DIALOGUE_MAX_MESSAGES",
    "RAW_CONTENT_BYTES",
    "RAW_MESSAGES_SHOWN",
    "RELATED_ROWS_SHOWN",
    "STATED_MESSAGES_DAYS",
    "STATED_MESSAGES_MAX",
    "MESSAGE_PAGE_MAX",
    "DialogueTurn",
    "MessagePage",
    "PendingApproval",
    "ThreadMessage",
    "RawMessage",
    "RawMessagesPage",
    "RelatedRows",
    "child_runs",
    "count_user_conversations",
    "decided_calls",
    "expired_interrupts",
    "first_related",
    "get_listed_thread",
    "is_released_call",
    "list_thread_messages",
    "list_user_pending_approvals",
    "message_tool_calls",
    "pending_approval",
    "pending_approvals",
    "raw_messages_excerpt",
    "recent_dialogue",
    "run_calls",
    "run_pending_calls",
    "thread_child_threads",
    "thread_runs",
    "tool_calls_during_runs",
    "undecided_interrupts",
    "turn_message",
    "user_messages_containing",
    "write_user_pending_approvals",
    "write_user_threads",
]

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
    """A thread's latest messages in `(created_at, id)` order, and whether earlier ones exist."""

    messages: list[RawMessage]
    has_earlier: bool


def raw_messages_excerpt(*, conversation_id: int) -> RawMessagesPage:
    """The latest `RAW_MESSAGES_SHOWN` messages of a thread, every field cut by the database.

    One query whatever the thread's size (one row more than shown says whether earlier ones
    exist; nothing counts the thread); no image, attachment, feedback or metadata is read.
    """
    rows = list(
        Message.objects.filter(conversation_id=conversation_id)
        .order_by("-created_at", "-id")
        .values("id", "role", "message_type", "created_at")
        .annotate(
            head=text_prefix("content", RAW_CONTENT_BYTES),
            size=byte_length("content"),
        )[: RAW_MESSAGES_SHOWN + 1]
    )
    has_earlier = len(rows) > RAW_MESSAGES_SHOWN
    messages = []
    for row in reversed(rows[:RAW_MESSAGES_SHOWN]):
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
    return RawMessagesPage(messages=messages, has_earlier=has_earlier)


# How many related rows (child threads, runs, tool calls) a staff page lists before linking on.
RELATED_ROWS_SHOWN = 20


@dataclass(frozen=True)
class RelatedRows:
    """The first rows of a relation as a staff page lists them, and whether more exist."""

    rows: list[Any]
    has_more: bool


def first_related(queryset: QuerySet, *, limit: int = RELATED_ROWS_SHOWN) -> RelatedRows:
    """At most `limit` rows in one query (one extra row says "more"); never a count."""
    rows = list(queryset[: limit + 1])
    return RelatedRows(rows=rows[:limit], has_more=len(rows) > limit)


def thread_child_threads(*, conversation_id: int) -> RelatedRows:
    """A thread's persisted SubAgent child threads, newest first, bounded."""
    return first_related(
        Conversation.objects.filter(parent_id=conversation_id)
        .only("id", "thread_id", "status", "source", "created_at")
        .order_by("-id")
    )


def _listed_runs(**filters: int) -> RelatedRows:
    """Runs as a staff page lists them (the columns it shows), newest first, bounded."""
    return first_related(
        AgentRun.objects.filter(**filters)
        .only("id", "run_id", "run_type", "status", "created_at")
        .order_by("-id")
    )


def thread_runs(*, conversation_id: int) -> RelatedRows:
    """The runs that worked on a thread, newest first, bounded."""
    return _listed_runs(conversation_id=conversation_id)


def child_runs(*, run_id: int) -> RelatedRows:
    """The sub-agent runs a run started, newest first, bounded."""
    return _listed_runs(parent_run_id=run_id)


def message_tool_calls(*, message_id: int) -> RelatedRows:
    """The tool calls an assistant message issued, in order, bounded; no input or output read."""
    return first_related(
        ToolCall.objects.filter(message_id=message_id)
        .only("id", "tool_call_id", "name", "status", "created_at")
        .order_by("created_at", "id")
    )


def tool_calls_during_runs(*, runs: list[AgentRun], name: str) -> dict[int, list[ToolCall]]:
    """Per run (by pk), the `name` tool calls it issued, in order.

    Tool calls carry no run. The Chat service marks every message it stores with its run
    (`metadata.run_id`), and stores them as the run finishes, so after `finished_at`; a message
    without that mark (imported or demo data) counts for the run of its thread that was open
    when the call was created (a thread runs one turn at a time). One query for all `runs`,
    each bounded by `RELATED_ROWS_SHOWN`; no input or output read.
    """
    if not runs:
        return {}
    windows = Q()
    for run in runs:
        window = Q(created_at__gte=run.created_at, message__metadata__run_id__isnull=True)
        if run.finished_at is not None:
            window &= Q(created_at__lte=run.finished_at)
        marked = Q(message__metadata__run_id=str(run.run_id))
        windows |= Q(message__conversation_id=run.conversation_id) & (marked | window)
    calls = (
        ToolCall.objects.filter(windows, name=name)
        .annotate(
            conversation_id=F("message__conversation_id"),
            issuing_run=KeyTextTransform("run_id", "message__metadata"),
        )
        .only("id", "tool_call_id", "name", "status", "created_at", "message_id")
        .order_by("created_at", "id")[: RELATED_ROWS_SHOWN * len(runs)]
    )
    found: dict[int, list[ToolCall]] = {run.pk: [] for run in runs}
    for call in calls:
        for run in runs:
            if call.conversation_id != run.conversation_id:
                continue
            if call.issuing_run is not None:
                issued = call.issuing_run == str(run.run_id)
            else:
                ended = run.finished_at is None or call.created_at <= run.finished_at
                issued = call.created_at >= run.created_at and ended
            if issued:
                found[run.pk].append(call)
    return found


# Threads a page of the user's thread list holds at most.
THREAD_PAGE_MAX = 100


# Keeps thread-list cursors apart from every other value the site signs with SECRET_KEY.
_CURSOR_SALT = "conversations.selectors.thread-cursor"


class InvalidCursor(ValueError):
    """A thread-list cursor this module did not make."""


@dataclass(frozen=True)
class ThreadPage:
    """One page of a user's threads, newest first, and the cursor of the next (None at the end),
    with the pending approvals of the page's threads by thread id."""

    threads: list[Conversation]
    next_cursor: str | None
    pending_approvals: dict[str, "PendingApproval"] = field(default_factory=dict)


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


# Rows fetched per round trip from an export's server-side cursors.
EXPORT_FETCH_ROWS = 2000


def _threads_export_sql() -> str:
    """Every thread of a user, whatever its status, source or parent, as JSON built by
    PostgreSQL, in id order."""
    threads = Conversation._meta.db_table
    return f"""
SELECT c.id, json_build_object(
    'thread_id', c.thread_id, 'title', c.title, 'status', c.status, 'source', c.source,
    'parent_thread_id', p.thread_id, 'metadata', c.metadata,
    'created_at', c.created_at, 'updated_at', c.updated_at)::text
FROM "{threads}" c
LEFT JOIN "{threads}" p ON p.id = c.parent_id
WHERE c.user_id = %s
ORDER BY c.id
"""


def _messages_export_sql() -> str:
    """Every message of a user's threads in thread order, each with its tool calls."""
    return f"""
SELECT m.conversation_id, json_build_object(
    'id', m.id, 'role', m.role, 'message_type', m.message_type, 'content', m.content,
    'image_content', m.image_content, 'attachments', m.attachments, 'feedback', m.feedback,
    'metadata', m.metadata, 'created_at', m.created_at,
    'tool_calls', COALESCE((
        SELECT json_agg(json_build_object(
            'tool_call_id', t.tool_call_id, 'name', t.name, 'input', t.input,
            'output', t.output, 'status', t.status, 'error', t.error,
            'metadata', t.metadata, 'created_at', t.created_at) ORDER BY t.created_at, t.id)
        FROM "{ToolCall._meta.db_table}" t WHERE t.message_id = m.id), '[]'::json))::text
FROM "{Message._meta.db_table}" m
JOIN "{Conversation._meta.db_table}" c ON c.id = m.conversation_id
WHERE c.user_id = %s
ORDER BY m.conversation_id, m.created_at, m.id
"""


def write_user_threads(out: IO[bytes], pg: psycopg.Connection, *, user_id: int) -> None:
    """Write `user_id`'s threads as comma-separated JSON objects, each with its "messages"
    list, read on `pg` inside its transaction (the caller's snapshot).

    A merge of two ordered server-side cursors: memory stays bounded whatever the history's
    length.
    """
    with (
        server_cursor(
            pg, "export_threads", _threads_export_sql(), [user_id], fetch_rows=EXPORT_FETCH_ROWS
        ) as threads,
        server_cursor(
            pg, "export_messages", _messages_export_sql(), [user_id], fetch_rows=EXPORT_FETCH_ROWS
        ) as messages,
    ):
        pending = next(messages, None)
        for index, (thread_pk, thread_json) in enumerate(threads):
            if index:
                out.write(b", ")
            # The thread's own object, reopened to append its "messages" list.
            out.write(thread_json[:-1].encode("utf-8") + b', "messages" : [')
            first = True
            while pending is not None and pending[0] == thread_pk:
                if not first:
                    out.write(b", ")
                out.write(pending[1].encode("utf-8"))
                first = False
                pending = next(messages, None)
            out.write(b"]}")


def write_user_pending_approvals(out: IO[bytes], pg: psycopg.Connection, *, user_id: int) -> None:
    """Write `user_id`'s memory writes waiting for a decision as comma-separated JSON objects
    `{"thread_id", "run_id", "tool_call_id", "content", "replaces", "created_at"}`, by
    `pending_approvals`' own rule (its query, run on `pg` inside the caller's snapshot)."""
    sql, params = pending_approvals(user_id=user_id).query.sql_with_params()
    rows = pg.execute(
        "SELECT json_build_object('thread_id', q.thread_id, 'run_id', q.run_id, "
        "'tool_call_id', q.tool_call_id, 'content', q.content, 'replaces', q.replaces, "
        f"'created_at', q.created_at)::text FROM ({sql}) q",
        params,
    )
    for index, (row,) in enumerate(rows):
        if index:
            out.write(b", ")
        out.write(row.encode("utf-8"))


def count_user_conversations(*, user_ids: list[int]) -> dict[str, int]:
    """How many threads, messages, tool calls and runs these users have: one statement,
    counted set-wise, never listed."""
    placeholders = ", ".join(["%s"] * len(user_ids)) or "NULL"
    threads = Conversation._meta.db_table
    messages = Message._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT
              (SELECT count(*) FROM "{threads}" WHERE user_id IN ({placeholders})),
              (SELECT count(*) FROM "{messages}" m JOIN "{threads}" c
                 ON c.id = m.conversation_id WHERE c.user_id IN ({placeholders})),
              (SELECT count(*) FROM "{ToolCall._meta.db_table}" t
                 JOIN "{messages}" m ON m.id = t.message_id
                 JOIN "{threads}" c ON c.id = m.conversation_id
                 WHERE c.user_id IN ({placeholders})),
              (SELECT count(*) FROM "{AgentRun._meta.db_table}" WHERE user_id IN ({placeholders}))
            """,
            list(user_ids) * 4,
        )
        thread_count, message_count, tool_call_count, run_count = cursor.fetchone()
    return {
        "threads": thread_count,
        "messages": message_count,
        "tool_calls": tool_call_count,
        "runs": run_count,
    }


# --- approvals ------------------------------------------------------------------------------
# An `interrupted` run stopped before a memory write; its one `pending` tool call is the write
# the user is asked about. It is decided once a run `resumes` it; it is pending while it is
# undecided and younger than `MEMORY_APPROVAL_TTL_SECONDS` (then the reaper declines it).


@dataclass(frozen=True)
class PendingApproval:
    """A memory write waiting for its user's decision: the interrupted run and its call."""

    thread_id: str
    run_id: str
    tool_call_id: str
    content: Any
    replaces: Any
    created_at: datetime

    def as_dict(self) -> dict[str, Any]:
        """What a client is shown: the call and the text it would write (and replace)."""
        return {
            "tool_call_id": self.tool_call_id,
            "content": self.content,
            "replaces": self.replaces,
        }

    def listed(self) -> dict[str, Any]:
        """What a thread list shows: the call, its text, which run waits and since when."""
        return {**self.as_dict(), "run_id": self.run_id, "created_at": self.created_at}


def _approval_cutoff() -> Any:
    seconds = setting("MEMORY_APPROVAL_TTL_SECONDS")
    if seconds <= 0:
        raise ValueError("MEMORY_APPROVAL_TTL_SECONDS must be positive")
    return ClockTimestamp() - timedelta(seconds=seconds)


def undecided_interrupts(**filters: Any) -> QuerySet:
    """Interrupted runs (matching `filters`) that no run resumes yet, whatever their age."""
    return AgentRun.objects.filter(
        status=AgentRun.Status.INTERRUPTED, resumed_by__isnull=True, **filters
    )


def expired_interrupts() -> QuerySet:
    """Undecided interrupted runs older than `MEMORY_APPROVAL_TTL_SECONDS`: no longer pending,
    still to be declined."""
    return undecided_interrupts(finished_at__lte=_approval_cutoff())


def run_pending_calls(runs: QuerySet) -> QuerySet:
    """The pending tool calls the runs of `runs` issued (a message carries its run's id): an
    interrupted run's is the write it waits for a decision about."""
    return run_calls(runs).filter(status=ToolCall.Status.PENDING)


def run_calls(runs: QuerySet) -> QuerySet:
    """The tool calls the runs of `runs` issued (a message carries its run's id)."""
    run_ids = runs.annotate(key=Cast("run_id", TextField())).values("key")
    return ToolCall.objects.annotate(
        issuing_run=KeyTextTransform("run_id", "message__metadata")
    ).filter(issuing_run__in=run_ids)


def decided_calls(*, interrupted: AgentRun, deciding: AgentRun) -> QuerySet:
    """The calls of the `interrupted` run that `deciding` (the run that resumes it) answered:
    the write put to the user, whose row holds the decision's outcome (status, output) and
    the text it would write. One query."""
    answered = Message.objects.filter(
        conversation_id=deciding.conversation_id,
        message_type=Message.Type.TOOL_RESULT,
        metadata__run_id=str(deciding.run_id),
    ).values(key=KeyTextTransform("tool_call_id", "metadata"))
    return (
        ToolCall.objects.annotate(issuing_run=KeyTextTransform("run_id", "message__metadata"))
        .filter(issuing_run=str(interrupted.run_id), tool_call_id__in=answered)
        .order_by("id")
    )


def pending_approvals(**run_filters: Any) -> QuerySet:
    """The pending approvals of the interrupted runs matching `run_filters` (e.g. `user_id`,
    `conversation_id__in`), as rows of `PendingApproval`'s fields, oldest first. One query."""
    runs = undecided_interrupts(finished_at__gt=_approval_cutoff(), **run_filters)
    return (
        run_pending_calls(runs)
        .annotate(
            thread_id=F("message__conversation__thread_id"),
            run_id=F("issuing_run"),
            content=KeyTextTransform("content", "input"),
            replaces=KeyTextTransform("replaces", "input"),
        )
        .values("thread_id", "run_id", "tool_call_id", "content", "replaces", "created_at")
        .order_by("created_at", "id")
    )


def list_user_pending_approvals(*, user_id: int) -> list[PendingApproval]:
    """Every memory write waiting for `user_id`'s decision, across their threads, oldest first
    (at most one per thread)."""
    return [PendingApproval(**row) for row in pending_approvals(user_id=user_id)]


def pending_approval(*, conversation_id: int) -> PendingApproval | None:
    """The thread's pending approval, if any (a thread has at most one)."""
    row = pending_approvals(conversation_id=conversation_id).last()
    return PendingApproval(**row) if row is not None else None


def is_released_call(*, run: AgentRun, tool_call_id: str | None) -> bool:
    """Whether `tool_call_id`, called in `run`, is the call a user's decision released: `run`
    is the `resume` run of an interrupted run whose pending call has that id."""
    if not tool_call_id or run.run_type != AgentRun.RunType.RESUME or run.resumes_id is None:
        return False
    interrupted = AgentRun.objects.filter(pk=run.resumes_id, status=AgentRun.Status.INTERRUPTED)
    return (
        run_pending_calls(interrupted)
        .filter(tool_call_id=tool_call_id, message__conversation_id=run.conversation_id)
        .exists()
    )


# Which of a user's own messages may state a credential a memory write must not repeat: those
# of the last `STATED_MESSAGES_DAYS` days, the newest `STATED_MESSAGES_MAX` at most.
STATED_MESSAGES_DAYS = 30
STATED_MESSAGES_MAX = 1000


# The owner's newest text messages first (`message_owner_recent_idx`), however many other
# users' messages there are; one static statement, no queryset built per write.
_STATED_MESSAGES_SQL = f"""
SELECT content FROM {Message._meta.db_table}
WHERE id IN (
    SELECT id FROM {Message._meta.db_table}
    WHERE owner_id = %s AND message_type = %s AND role = %s
      AND created_at >= clock_timestamp() - make_interval(days => %s)
    ORDER BY created_at DESC, id DESC
    LIMIT %s
)
AND content ILIKE ANY(%s)
"""


def _like_escaped(text: str) -> str:
    """`text` matched literally by LIKE (backslash is its escape)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def user_messages_containing(*, user_id: int, needles: list[str]) -> list[str]:
    """The text of each of the user's own messages (role `user`, any thread), among their
    newest `STATED_MESSAGES_MAX` of the last `STATED_MESSAGES_DAYS` days by the database's
    clock, that contains one of `needles` (literally, case-insensitively): the few a
    credential the user stated anywhere could be in, for a memory write to be checked
    against. Empty `needles`: none."""
    if not needles:
        return []
    params = [
        user_id,
        Message.Type.TEXT,
        Message.Role.USER,
        STATED_MESSAGES_DAYS,
        STATED_MESSAGES_MAX,
        [f"%{_like_escaped(needle)}%" for needle in needles],
    ]
    with connection.cursor() as cursor:
        cursor.execute(_STATED_MESSAGES_SQL, params)
        return [content for (content,) in cursor.fetchall()]


_TURN_MESSAGE_SQL = f"""
SELECT content FROM {Message._meta.db_table}
WHERE conversation_id = %s AND role = %s AND message_type = %s
ORDER BY created_at DESC, id DESC
LIMIT 1
"""


def turn_message(*, conversation_id: int) -> str | None:
    """The text of the thread's newest user message: the message of the turn running in it (a
    resumed turn's too: a new message would have declined its approval first); None when the
    thread has none. One static statement on the thread's own index."""
    with connection.cursor() as cursor:
        cursor.execute(_TURN_MESSAGE_SQL, [conversation_id, Message.Role.USER, Message.Type.TEXT])
        row = cursor.fetchone()
    return None if row is None else row[0]
