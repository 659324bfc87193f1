"""Writes of conversations: threads, messages and tool calls as an agent run produces them,
the settling of a memory write the user decided or declined, and the deletion of a user's
share of these tables.

The Chat service hands an agent run's messages here as plain `RunMessage` records (this app
knows nothing of LangChain); `record_run_messages` stores them, tagged with the run's id.
"""

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import Case, F, Q, Value, When

from conversations import checkpoints
from conversations.models import AgentRun, Conversation, Message, ToolCall
from conversations.selectors.approvals import run_calls, run_pending_calls
from conversations.users import active_user_sql
from conversations.utils.connections import prepared_cursor
from conversations.utils.db_functions import ClockTimestamp
from conversations.utils.prepared import columns_of, instance_from_row
from conversations.utils.string_utils import is_storable_text, truncate_utf8

__all__ = [
    "add_message",
    "record_tool_call",
    "complete_tool_call",
]

# A thread's title is its first message, cut to this many bytes.
THREAD_TITLE_MAX_BYTES = 256


def _title(message: str) -> str:
    """A thread's title from its first message: whitespace runs made one space, cut."""
    title, _ = truncate_utf8(" ".join(message.split()), THREAD_TITLE_MAX_BYTES)
    return title


# A new thread: with a condition added, only if its user is active (the user's id twice more).
_THREAD_SQL = (
    f"INSERT INTO {Conversation._meta.db_table} "
    "(thread_id, user_id, title, status, source, parent_id, metadata) "
    "SELECT %s, %s::bigint, %s, %s, %s, %s::bigint, jsonb_build_object() {condition}"
    f"RETURNING {columns_of(Conversation)}"
)


def _insert_thread(
    *,
    user_id: int,
    first_message: str,
    source: str,
    parent: Conversation | None,
    active_only: bool,
) -> Conversation | None:
    params = [
        f"thread-{uuid.uuid4().hex}",
        int(user_id),
        _title(first_message),
        Conversation.Status.ACTIVE,
        source,
        parent.pk if parent is not None else None,
    ]
    condition = f"WHERE {active_user_sql('%s')} " if active_only else ""
    with prepared_cursor() as cursor:
        cursor.execute(
            _THREAD_SQL.format(condition=condition), params + [int(user_id)] * 2 * active_only
        )
        row = cursor.fetchone()
    if row is None:
        return None
    thread = instance_from_row(Conversation, row, using=connection.alias)
    if parent is not None:
        thread.parent = parent
    return thread


def start_thread(
    *,
    user_id: int,
    first_message: str,
    source: str = Conversation.Source.CHAT,
    parent: Conversation | None = None,
) -> Conversation:
    """A new active thread of `user_id`, titled by its first message."""
    return _insert_thread(
        user_id=user_id,
        first_message=first_message,
        source=source,
        parent=parent,
        active_only=False,
    )


def start_chat_thread(*, user_id: int, first_message: str) -> Conversation | None:
    """A new chat thread of `user_id`, titled by its first message, if the user is active
    (None if not, or if there is no such user): the check and the insert are one statement."""
    return _insert_thread(
        user_id=user_id,
        first_message=first_message,
        source=Conversation.Source.CHAT,
        parent=None,
        active_only=True,
    )


def add_message(
    *,
    conversation: Conversation,
    role: str,
    content: str,
    message_type: str = Message.Type.TEXT,
    metadata: dict[str, Any] | None = None,
) -> Message:
    """Append one message to a thread and mark the thread updated at the message's time.

    Both are the database clock's (`created_at` is its `clock_timestamp()`, returned by the
    insert), so several app hosts with skewed clocks still order one thread consistently. An
    untitled thread (one `agent_run` opened) takes its first user text message as its title,
    as a chat thread does, in the same UPDATE.
    """
    message = Message.objects.create(
        conversation=conversation,
        role=role,
        message_type=message_type,
        content=content,
        metadata=metadata or {},
    )
    changes: dict[str, Any] = {"updated_at": message.created_at}
    if role == Message.Role.USER and message_type == Message.Type.TEXT:
        changes["title"] = Case(
            When(title="", then=Value(_title(content))),
            default=F("title"),
            output_field=Conversation._meta.get_field("title"),
        )
    Conversation.objects.filter(pk=conversation.pk).update(**changes)
    return message


def record_tool_call(
    *, message: Message, tool_call_id: str, name: str, arguments: dict[str, Any] | None
) -> ToolCall:
    """A pending tool call issued by the assistant `message`."""
    return ToolCall.objects.create(
        message=message,
        tool_call_id=tool_call_id,
        name=name,
        input=arguments if arguments is not None else {},
    )


def complete_tool_call(*, tool_call: ToolCall, output: str, error: str | None) -> ToolCall:
    """Store a tool call's result: `success`, or `error` with the refusal's message."""
    tool_call.output = output
    tool_call.status = ToolCall.Status.ERROR if error is not None else ToolCall.Status.SUCCESS
    tool_call.error = error or ""
    tool_call.save(update_fields=["output", "status", "error"])
    return tool_call


@dataclass(frozen=True)
class RunToolCall:
    """One tool call an assistant message of a run asked for, with its settled outcome."""

    tool_call_id: str
    name: str
    arguments: Any
    output: str = ""
    status: str = ToolCall.Status.PENDING
    error: str = ""


@dataclass(frozen=True)
class RunMessage:
    """One message an agent run produced (or the user message that opened it)."""

    role: str
    content: str
    message_type: str = Message.Type.TEXT
    metadata: dict[str, Any] = field(default_factory=dict)
    tool_calls: Sequence[RunToolCall] = ()


# What `recording` inserts: a run's messages in their order, then each one's tool calls, from
# two JSON parameters, whatever their number. Message ids come from a sequence in insertion
# order, so a message's rank by id is its rank in the run (how its tool calls find it).
_MESSAGES = Message._meta.db_table
_TOOL_CALLS = ToolCall._meta.db_table
_RECORDING_SQL = f"""
    recorded_in AS (
        SELECT * FROM jsonb_to_recordset(%s::jsonb)
            AS m(rank int, role text, message_type text, content text, metadata jsonb)
    ),
    recorded AS (
        INSERT INTO {_MESSAGES}
            (conversation_id, role, message_type, content, attachments, feedback, metadata)
        SELECT
            %s::bigint, role, message_type, content, jsonb_build_array(), jsonb_build_object(),
            metadata
        FROM recorded_in WHERE {{guard}} ORDER BY rank
        RETURNING id, created_at
    ),
    recorded_ranked AS (
        SELECT id, created_at, row_number() OVER (ORDER BY id) AS rank FROM recorded
    ),
    recorded_calls AS (
        INSERT INTO {_TOOL_CALLS}
            (message_id, tool_call_id, name, input, output, status, error, metadata)
        SELECT
            r.id, c.tool_call_id, c.name, c.input, c.output, c.status, c.error,
            jsonb_build_object()
        FROM jsonb_to_recordset(%s::jsonb) AS c(
            rank int, position int, tool_call_id text, name text, input jsonb, output text,
            status text, error text
        )
        JOIN recorded_ranked r ON r.rank = c.rank
        ORDER BY c.rank, c.position
    )
"""
# The stored messages' ids and creation times, in the run's order.
RECORDED_COLUMNS = (
    "ARRAY(SELECT id FROM recorded_ranked ORDER BY rank), "
    "ARRAY(SELECT created_at FROM recorded_ranked ORDER BY rank)"
)


@dataclass(frozen=True)
class Recording:
    """The common table expressions that store a run's messages and tool calls inside a
    larger statement (`sql`, to follow `WITH` or a comma, and its `params`), and how to turn
    that statement's `RECORDED_COLUMNS` into `Message` rows (`rows`)."""

    sql: str
    params: list[Any]
    conversation: Conversation
    run_id: str
    messages: Sequence[RunMessage]

    def rows(self, ids: Sequence[int], created: Sequence[Any]) -> list[Message]:
        """The stored messages as model instances, as `bulk_create` would leave them."""
        rows = []
        for message, pk, created_at in zip(self.messages, ids, created, strict=True):
            row = Message(
                conversation=self.conversation,
                role=message.role,
                message_type=message.message_type,
                content=message.content,
                metadata=_tagged(message, run_id=self.run_id),
                created_at=created_at,
            )
            row.pk = pk
            row._state.adding = False
            row._state.db = connection.alias
            rows.append(row)
        return rows


def _tagged(message: RunMessage, *, run_id: str) -> dict[str, Any]:
    """A run message's stored metadata: its own, with the run's id."""
    return {"run_id": run_id, **message.metadata}


def _json(value: object) -> str:
    return json.dumps(value)


def recording(
    *,
    conversation: Conversation,
    run_id: str,
    messages: Sequence[RunMessage],
    guard: str = "true",
) -> Recording:
    """The CTEs that store `messages` of run `run_id` in `conversation`, each message's
    metadata carrying `run_id`; nothing is stored unless the SQL condition `guard` holds (a
    run repository's statement makes the messages wait on the run's own change)."""
    rows = [
        {
            "rank": rank,
            "role": message.role,
            "message_type": message.message_type,
            "content": message.content,
            "metadata": _tagged(message, run_id=run_id),
        }
        for rank, message in enumerate(messages, start=1)
    ]
    calls = [
        {
            "rank": rank,
            "position": position,
            "tool_call_id": call.tool_call_id,
            "name": call.name,
            "input": call.arguments,
            "output": call.output,
            "status": call.status,
            "error": call.error,
        }
        for rank, message in enumerate(messages, start=1)
        for position, call in enumerate(message.tool_calls)
    ]
    return Recording(
        sql=_RECORDING_SQL.format(guard=guard),
        params=[_json(rows), conversation.pk, _json(calls)],
        conversation=conversation,
        run_id=run_id,
        messages=messages,
    )


def record_run_messages(
    *, conversation: Conversation, run_id: str, messages: Sequence[RunMessage]
) -> list[Message]:
    """Store a run's messages and their tool calls in one statement whatever their number,
    each message's metadata carrying `run_id`."""
    stored = recording(conversation=conversation, run_id=run_id, messages=messages)
    with prepared_cursor() as cursor:
        cursor.execute(f"WITH {stored.sql} SELECT {RECORDED_COLUMNS}", stored.params)
        return stored.rows(*cursor.fetchone())


class ThreadNotFound(Exception):
    """No thread with that id belongs to the user (another user's thread looks the same)."""


def set_thread_status(*, user_id: int, thread_id: str, status: str) -> Conversation:
    """Archive, delete or restore one of `user_id`'s threads (what history lookback may see).

    Only a thread their thread list can show: a SubAgent child or agent traffic is not the
    user's to restore into lookback, so it is `ThreadNotFound` like another user's thread.
    """
    if status not in Conversation.Status.values:
        raise ValueError(f"{status!r} is not a thread status")
    if not is_storable_text(thread_id):
        raise ThreadNotFound(thread_id)
    threads = Conversation.objects.listed_to(user_id).filter(thread_id=thread_id)
    if not threads.update(status=status, updated_at=ClockTimestamp()):
        raise ThreadNotFound(thread_id)
    return threads.get()


class ThreadTitleInvalid(ValueError):
    """A title a user gave a thread that cannot be its title (empty, too long, not text)."""


def rename_thread(*, user_id: int, thread_id: str, title: str) -> Conversation:
    """Give one of `user_id`'s threads the `title` they chose (whitespace runs made one space).

    The threads `set_thread_status` may change, the same way (`ThreadNotFound` otherwise); an
    empty title, one over `THREAD_TITLE_MAX_BYTES` or not storable is `ThreadTitleInvalid`.
    """
    if not isinstance(title, str) or not is_storable_text(title):
        raise ThreadTitleInvalid("the title must be text")
    title = " ".join(title.split())
    if not title:
        raise ThreadTitleInvalid("the title is empty")
    if len(title.encode("utf-8")) > THREAD_TITLE_MAX_BYTES:
        raise ThreadTitleInvalid(f"the title is over {THREAD_TITLE_MAX_BYTES} bytes")
    if not is_storable_text(thread_id):
        raise ThreadNotFound(thread_id)
    threads = Conversation.objects.listed_to(user_id).filter(thread_id=thread_id)
    if not threads.update(title=title, updated_at=ClockTimestamp()):
        raise ThreadNotFound(thread_id)
    return threads.get()


def delete_user_conversations(*, user_id: int) -> dict[str, int]:
    """Delete every thread of `user_id` with its messages, tool calls and runs, and the
    checkpoints of their runs, set-wise (one DELETE per table, children first); the rows
    deleted, by kind (`checkpoints`: how many runs' checkpoints).

    The threads are locked first: a write still in flight that references one waits for this
    transaction and then fails on the missing row instead of slipping in between. Use inside
    the caller's `transaction.atomic()`.
    """
    threads = Conversation._meta.db_table
    messages = Message._meta.db_table
    in_threads = f"SELECT id FROM {threads} WHERE user_id = %s"
    statements = (
        (
            "tool_calls",
            f"DELETE FROM {ToolCall._meta.db_table} WHERE message_id IN ("
            f"SELECT id FROM {messages} WHERE conversation_id IN ({in_threads}))",
        ),
        ("messages", f"DELETE FROM {messages} WHERE conversation_id IN ({in_threads})"),
        ("runs", f"DELETE FROM {AgentRun._meta.db_table} WHERE user_id = %s"),
        ("threads", f"DELETE FROM {threads} WHERE user_id = %s"),
    )
    counts = {}
    with connection.cursor() as cursor:
        cursor.execute(f"{in_threads} FOR UPDATE", [user_id])
        # Keyed by the user's run ids: gone before the runs are.
        counts["checkpoints"] = checkpoints.delete_user_checkpoints(user_id=user_id)
        for key, sql in statements:
            cursor.execute(sql, [user_id])
            counts[key] = cursor.rowcount
    return counts


# The `error` of a tool call the user did not approve.
DECLINED = "declined"


def settle_pending_call(
    *,
    conversation: Conversation,
    run_id: str,
    tool_call_id: str,
    arguments: Any,
    output: str,
    status: str,
    error: str,
    was: tuple[str, str] | None = None,
) -> int:
    """Store the outcome of the call `tool_call_id` that run `run_id` left pending (a decided
    approval): the arguments it actually ran with, its status, output and error. With `was`
    (a status and an error), the call may also be one left so: a late call's real outcome
    replacing what its run's cancel said of it. Returns how many rows changed (0 or 1)."""
    settled = Q(status=ToolCall.Status.PENDING)
    if was is not None:
        settled |= Q(status=was[0], error=was[1])
    calls = run_calls(AgentRun.objects.filter(run_id=run_id)).filter(settled)
    return calls.filter(tool_call_id=tool_call_id, message__conversation=conversation).update(
        input=arguments, output=output, status=status, error=error
    )


def decline_approval(*, run: AgentRun, key: str, error: str, result: str) -> bool:
    """Decide the interrupted `run`'s pending write as declined, without a model.

    In one transaction: a `resume` run that `resumes` it, finished `cancelled` with `error`
    (unique, so a racing decision either came first, and this returns False, or finds it
    decided); the pending call settled `declined` and answered with the tool result `result`
    (the text belongs to the app whose tool asked for the approval; so every stored call is
    answered), as its output and as a stored tool message; the checkpoints under `key` deleted.
    """
    try:
        with transaction.atomic():
            closing = AgentRun.objects.create(
                user_id=run.user_id,
                conversation_id=run.conversation_id,
                request_id=f"req-{uuid.uuid4().hex}",
                run_type=AgentRun.RunType.RESUME,
                resumes=run,
                status=AgentRun.Status.CANCELLED,
                started_at=ClockTimestamp(),
                finished_at=ClockTimestamp(),
                error=error,
            )
            pending = run_pending_calls(AgentRun.objects.filter(pk=run.pk))
            results = [
                RunMessage(
                    role=Message.Role.TOOL,
                    message_type=Message.Type.TOOL_RESULT,
                    content=result,
                    metadata={"tool_call_id": call.tool_call_id, "name": call.name},
                )
                for call in pending
            ]
            pending.update(status=ToolCall.Status.DECLINED, error=DECLINED, output=result)
            record_run_messages(
                conversation=run.conversation, run_id=str(closing.run_id), messages=results
            )
            checkpoints.delete_checkpoints([key])
    except IntegrityError:
        return False  # another decision settled it first
    return True
