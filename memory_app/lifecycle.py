"""A user's whole data: export (one consistent JSON document) and erasure (everything, for good).

Both are set-wise: the database builds each row's JSON or deletes a whole table's share of the
user in one statement, so a user with 100,000 messages costs seconds and bounded memory.
"""

import json
import logging
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

from django.contrib.auth import get_user_model
from django.db import DatabaseError, connection, connections, transaction
from django.db.models import Q

from conversations import checkpoints
from conversations import selectors as thread_selectors
from conversations.models import AgentRun
from memory_app.workspace import (
    AGENTS_RELPATH,
    USER_RELPATH,
    Workspace,
    WorkspaceError,
)
from yuxi_site.utils.db_functions import ClockTimestamp

# memory_app.services and memory_app.selectors re-export this module's functions, so their
# names are imported where they are used, once both modules are complete.

__all__ = [
    "ERASURE_RUN_ERROR",
    "EXPORT_CHUNK_BYTES",
    "EXPORT_SPOOL_MEMORY_BYTES",
    "ErasureReport",
    "erase_user",
    "erasure_counts",
    "export_user_data",
]

logger = logging.getLogger("yuxi.memory")

# The export is spooled in memory up to this size, then on disk.
EXPORT_SPOOL_MEMORY_BYTES = 1 << 20
# Size of each piece the export iterator yields.
EXPORT_CHUNK_BYTES = 65536
# Rows fetched per round trip from the export's server-side cursors.
_EXPORT_FETCH_ROWS = 2000
# Most of AGENTS.md / USER.md the export carries (the agent reads far less of them).
_EXPORT_FILE_MAX_BYTES = 1 << 20
# Why erasure failed a user's pending or running runs (for staff; shown on the run page).
ERASURE_RUN_ERROR = "the user is being erased"

# Every thread of the user, whatever its status, source or parent, as JSON built by PostgreSQL.
_THREADS_SQL = """
SELECT c.id, json_build_object(
    'thread_id', c.thread_id, 'title', c.title, 'status', c.status, 'source', c.source,
    'parent_thread_id', p.thread_id, 'metadata', c.metadata,
    'created_at', c.created_at, 'updated_at', c.updated_at)::text
FROM conversations_conversation c
LEFT JOIN conversations_conversation p ON p.id = c.parent_id
WHERE c.user_id = %s
ORDER BY c.id
"""

# Every message of those threads in thread order, each with its tool calls.
_MESSAGES_SQL = """
SELECT m.conversation_id, json_build_object(
    'id', m.id, 'role', m.role, 'message_type', m.message_type, 'content', m.content,
    'image_content', m.image_content, 'attachments', m.attachments, 'feedback', m.feedback,
    'metadata', m.metadata, 'created_at', m.created_at,
    'tool_calls', COALESCE((
        SELECT json_agg(json_build_object(
            'tool_call_id', t.tool_call_id, 'name', t.name, 'input', t.input,
            'output', t.output, 'status', t.status, 'error', t.error,
            'metadata', t.metadata, 'created_at', t.created_at) ORDER BY t.created_at, t.id)
        FROM conversations_toolcall t WHERE t.message_id = m.id), '[]'::json))::text
FROM conversations_message m
JOIN conversations_conversation c ON c.id = m.conversation_id
WHERE c.user_id = %s
ORDER BY m.conversation_id, m.created_at, m.id
"""

_EVENTS_SQL = """
SELECT json_build_object(
    'kind', e.kind, 'actor', a.username, 'run_id', r.run_id,
    'before_sha256', e.before_sha256, 'after_sha256', e.after_sha256,
    'size_bytes', e.size_bytes, 'created_at', e.created_at)::text
FROM memory_app_memoryevent e
LEFT JOIN auth_user a ON a.id = e.actor_id
LEFT JOIN conversations_agentrun r ON r.id = e.run_id
WHERE e.user_id = %s
ORDER BY e.id
"""

_USER_SQL = """
SELECT json_build_object(
    'id', u.id, 'username', u.username, 'email', u.email, 'first_name', u.first_name,
    'last_name', u.last_name, 'date_joined', u.date_joined, 'last_login', u.last_login)::text,
    COALESCE((SELECT enable_memory FROM memory_app_userconfig WHERE user_id = u.id), false)
FROM auth_user u WHERE u.id = %s
"""


def export_user_data(*, user: Any) -> Iterator[bytes]:
    """`user`'s whole data as one JSON document, in pieces.

    Read from one REPEATABLE READ snapshot on a connection of its own and spooled to a
    temporary file before this returns, so no transaction stays open while a client reads
    slowly; rows stream through server-side cursors, so memory stays bounded.
    """
    # Closed by the iterator returned below once it is read (or on failure right here).
    spool = tempfile.SpooledTemporaryFile(max_size=EXPORT_SPOOL_MEMORY_BYTES)  # noqa: SIM115
    try:
        _write_export(spool, user=user)
    except BaseException:
        spool.close()
        raise
    spool.seek(0)
    return _chunks(spool)


def _chunks(spool: IO[bytes]) -> Iterator[bytes]:
    with spool:
        while chunk := spool.read(EXPORT_CHUNK_BYTES):
            yield chunk


def _write_export(out: IO[bytes], *, user: Any) -> None:
    user_id = user.pk
    workspace = Workspace.for_user(user_id)
    # A connection of its own: the snapshot must not join (or be limited by) a caller's
    # transaction, and its isolation level is set before its first query.
    snapshot = connections.create_connection(connection.alias)
    try:
        snapshot.ensure_connection()
        pg = snapshot.connection
        pg.autocommit = True
        pg.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        try:
            row = pg.execute(_USER_SQL, [user_id]).fetchone()
            if row is None:
                raise get_user_model().DoesNotExist(f"no user {user_id}")
            user_json, enable_memory = row
            out.write(b'{"user": ' + user_json.encode() + b', "enable_memory": ')
            out.write(b"true" if enable_memory else b"false")
            out.write(b', "memory": ')
            _write_json(out, _memory_export(user))
            for key, relpath in (("agents_md", AGENTS_RELPATH), ("user_md", USER_RELPATH)):
                out.write(f', "{key}": '.encode())
                _write_json(out, _file_text(workspace, relpath))
            out.write(b', "memory_events": [')
            _write_rows(out, pg, "export_events", _EVENTS_SQL, user_id, column=0)
            out.write(b'], "pending_approvals": [')
            _write_pending_approvals(out, pg, user_id)
            out.write(b'], "threads": [')
            _write_threads(out, pg, user_id)
            out.write(b"]}")
        finally:
            pg.execute("ROLLBACK")
    finally:
        snapshot.close()


def _write_json(out: IO[bytes], value: object) -> None:
    out.write(json.dumps(value, ensure_ascii=False).encode("utf-8"))


def _memory_export(user: Any) -> dict[str, Any] | None:
    """MEMORY.md as the user's own read shows it: text (None if unusable), etag, size, problem."""
    from memory_app.selectors import read_memory_file

    try:
        memory = read_memory_file(user=user)
    except WorkspaceError:
        return None  # not a regular file, or unreadable: nothing of it can be exported
    return {
        "text": memory.text,
        "etag": memory.etag,
        "size_bytes": memory.size_bytes,
        "problem": memory.problem,
    }


def _file_text(workspace: Workspace, relpath: str) -> str | None:
    """The file's text (invalid bytes replaced), None if missing or refused."""
    try:
        data, _ = workspace.read_bounded(relpath, _EXPORT_FILE_MAX_BYTES)
    except WorkspaceError:
        return None
    return data.decode("utf-8", errors="replace") if data else None


def _server_cursor(pg: Any, name: str, sql: str, user_id: int) -> Any:
    cursor = pg.cursor(name=name)
    cursor.itersize = _EXPORT_FETCH_ROWS
    cursor.execute(sql, [user_id])
    return cursor


def _write_rows(out: IO[bytes], pg: Any, name: str, sql: str, user_id: int, *, column: int) -> None:
    with _server_cursor(pg, name, sql, user_id) as cursor:
        for index, row in enumerate(cursor):
            if index:
                out.write(b", ")
            out.write(row[column].encode("utf-8"))


def _write_pending_approvals(out: IO[bytes], pg: Any, user_id: int) -> None:
    """The memory writes waiting for the user's decision, by the selector's own rule (its
    query, run on the snapshot), as `{"thread_id", "run_id", "tool_call_id", "content",
    "replaces", "created_at"}`."""
    sql, params = thread_selectors.pending_approvals(user_id=user_id).query.sql_with_params()
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


def _write_threads(out: IO[bytes], pg: Any, user_id: int) -> None:
    """Threads by id, each followed by its messages: a merge of two ordered cursors."""
    with (
        _server_cursor(pg, "export_threads", _THREADS_SQL, user_id) as threads,
        _server_cursor(pg, "export_messages", _MESSAGES_SQL, user_id) as messages,
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


@dataclass(frozen=True)
class ErasureReport:
    """How many rows of each kind the erasure deleted (zero everywhere when run again)."""

    counts: dict[str, int]


# The user's rows, deleted child tables first; each statement is one set-wise DELETE.
_ERASE_STATEMENTS = (
    (
        "tool_calls",
        "DELETE FROM conversations_toolcall WHERE message_id IN ("
        " SELECT m.id FROM conversations_message m"
        " JOIN conversations_conversation c ON c.id = m.conversation_id WHERE c.user_id = %s)",
    ),
    (
        "messages",
        "DELETE FROM conversations_message WHERE conversation_id IN ("
        " SELECT id FROM conversations_conversation WHERE user_id = %s)",
    ),
    ("memory_events", "DELETE FROM memory_app_memoryevent WHERE user_id = %s"),
    ("runs", "DELETE FROM conversations_agentrun WHERE user_id = %s"),
    ("threads", "DELETE FROM conversations_conversation WHERE user_id = %s"),
    ("configs", "DELETE FROM memory_app_userconfig WHERE user_id = %s"),
)


def erase_user(*, user: Any, actor: Any) -> ErasureReport:
    """Delete `user` and everything of theirs: rows, ledger, workspace; idempotent.

    A committed fence comes first (the user inactive, their pending and running runs failed),
    so neither the Chat service nor a worker that was mid-run writes for them again; then one
    transaction under the memory locks deletes the rows set-wise, removes the workspace and
    the user. A failed erasure is finished by running it again.
    """
    from memory_app.services import MemoryUnavailable

    user_id = user.pk
    _fence(user_id)
    for attempt in range(2):
        try:
            counts = _delete_everything(user_id)
            break
        except (DatabaseError, MemoryUnavailable):
            # A write that was already in flight (it passed its checks before the fence)
            # committed a row into a thread or run being deleted, or deadlocked with this
            # transaction: go again, once.
            if attempt:
                raise
            logger.warning("event=erasure_retry user=%s", user_id)
    logger.info(
        "event=user_erased user=%s actor=%s %s",
        user_id,
        getattr(actor, "pk", None),
        " ".join(f"{key}={value}" for key, value in counts.items()),
    )
    return ErasureReport(counts=counts)


def _fence(user_id: int) -> None:
    """Commit: the user inactive, every pending or running run of theirs failed."""
    from memory_app.services import hold_memory_locks

    with transaction.atomic(), hold_memory_locks(user_id=user_id):
        get_user_model().objects.filter(pk=user_id).update(is_active=False)
        AgentRun.objects.filter(
            Q(status=AgentRun.Status.PENDING) | Q(status=AgentRun.Status.RUNNING),
            user_id=user_id,
        ).update(
            status=AgentRun.Status.FAILED,
            error=ERASURE_RUN_ERROR,
            finished_at=ClockTimestamp(),
            worker_id=None,
            lease_expires_at=None,
        )


def _delete_everything(user_id: int) -> dict[str, int]:
    from memory_app.services import MemoryUnavailable, hold_memory_locks

    User = get_user_model()
    counts: dict[str, int] = {}
    with transaction.atomic(), hold_memory_locks(user_id=user_id) as workspace:
        with connection.cursor() as cursor:
            # Rows locked first: a write still in flight that references them waits for this
            # transaction and then fails on the missing row instead of slipping in between.
            cursor.execute(
                f"SELECT 1 FROM {User._meta.db_table} WHERE id = %s FOR UPDATE", [user_id]
            )
            cursor.execute(
                "SELECT 1 FROM conversations_conversation WHERE user_id = %s FOR UPDATE", [user_id]
            )
            # Keyed by the user's run ids: gone before the runs are.
            counts["checkpoints"] = checkpoints.delete_user_checkpoints(user_id=user_id)
            for key, sql in _ERASE_STATEMENTS:
                cursor.execute(sql, [user_id])
                counts[key] = cursor.rowcount
        try:
            workspace.remove_tree()
        except WorkspaceError as exc:
            raise MemoryUnavailable("the workspace could not be removed") from exc
        # Nothing of the user's own is left, so Django's delete only clears the auth tables
        # (groups, permissions, admin log) and nulls `actor` on other users' ledger rows.
        counts["users"] = User.objects.filter(pk=user_id).delete()[1].get(User._meta.label, 0)
    return counts


def erasure_counts(*, user_ids: list[int]) -> dict[str, int]:
    """How many rows erasing these users would delete, by kind: counted set-wise, never listed."""
    placeholders = ", ".join(["%s"] * len(user_ids)) or "NULL"
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT
              (SELECT count(*) FROM conversations_conversation WHERE user_id IN ({placeholders})),
              (SELECT count(*) FROM conversations_message m JOIN conversations_conversation c
                 ON c.id = m.conversation_id WHERE c.user_id IN ({placeholders})),
              (SELECT count(*) FROM conversations_toolcall t
                 JOIN conversations_message m ON m.id = t.message_id
                 JOIN conversations_conversation c ON c.id = m.conversation_id
                 WHERE c.user_id IN ({placeholders})),
              (SELECT count(*) FROM conversations_agentrun WHERE user_id IN ({placeholders})),
              (SELECT count(*) FROM memory_app_memoryevent WHERE user_id IN ({placeholders}))
            """,
            list(user_ids) * 5,
        )
        threads, messages, tool_calls, runs, events = cursor.fetchone()
    return {
        "users": len(user_ids),
        "threads": threads,
        "messages": messages,
        "tool_calls": tool_calls,
        "runs": runs,
        "memory_events": events,
    }
