"""A user's whole data: export (one consistent JSON document) and erasure (everything, for good).

Both are set-wise: the database builds each row's JSON or deletes a whole table's share of the
user in one statement, so a user with 100,000 messages costs seconds and bounded memory. The
conversations app exports, counts, deletes and fails its own rows of the user (its selectors,
services and run repository); this module does the memory app's share, holds the memory
locks around erasure and writes the document. It imports only the app's leaves (workspace,
memory file, versions, locks, errors, models) and the conversations app, so `services` and
`selectors` re-export it without a circle.
"""

import asyncio
import json
import logging
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import IO, Any

import psycopg
from django.contrib.auth import get_user_model
from django.db import DatabaseError, connection, transaction

from conversations import checkpoints
from conversations import services as conversation_services
from conversations.models import AgentRun, ErasureFence
from conversations.runs.reaping import fail_user_runs
from conversations.selectors import export as conversation_export
from conversations.users import has_is_active
from conversations.utils.connections import direct_connection, server_cursor
from memory_app.errors import MemoryUnavailable, MemoryVersionNotFound
from memory_app.locks import hold_memory_locks
from memory_app.login_sessions import delete_user_sessions
from memory_app.memory_file import read_memory_file
from memory_app.models import LoginSession, MemoryEvent, UserConfig
from memory_app.versions import kept_version_hashes, list_memory_versions, read_memory_version
from memory_app.workspace import Workspace, WorkspaceError
from memory_app.workspace.paths import AGENTS_RELPATH, USER_RELPATH

logger = logging.getLogger("yuxi.memory")

# The export is spooled in memory up to this size, then on disk.
EXPORT_SPOOL_MEMORY_BYTES = 1 << 20
# Size of each piece the export iterator yields.
EXPORT_CHUNK_BYTES = 65536
# Most of AGENTS.md / USER.md the export carries (the agent reads far less of them).
_EXPORT_FILE_MAX_BYTES = 1 << 20
# The export's time zone, for its transaction only.
_LOCAL_TIME_ZONE_SQL = "SELECT set_config('TimeZone', %s, true)"
# Why erasure failed a user's pending or running runs (for staff; shown on the run page).
ERASURE_RUN_ERROR = "the user is being erased"


def _events_sql() -> str:
    """The user's memory ledger in order, as JSON built by PostgreSQL."""
    User = get_user_model()
    return f"""
SELECT json_build_object(
    'kind', e.kind, 'actor', a."{_column(User.USERNAME_FIELD)}", 'run_id', r.run_id,
    'before_sha256', e.before_sha256, 'after_sha256', e.after_sha256,
    'size_bytes', e.size_bytes, 'created_at', e.created_at)::text
FROM "{MemoryEvent._meta.db_table}" e
LEFT JOIN "{User._meta.db_table}" a ON a."{User._meta.pk.column}" = e.actor_id
LEFT JOIN "{AgentRun._meta.db_table}" r ON r.id = e.run_id
WHERE e.user_id = %s
ORDER BY e.id
"""


def _column(field: str) -> str:
    return get_user_model()._meta.get_field(field).column


def _user_sql() -> str:
    """The user's account (the export's `user` object) and switch, in one statement: `id`,
    `username` (the value of the model's `USERNAME_FIELD`, named in `username_field`), and each
    of `_USER_EXPORT_FIELDS` the model has."""
    User = get_user_model()
    stored = {field.name for field in User._meta.concrete_fields}
    columns = {
        "id": User._meta.pk.column,
        "username": _column(User.USERNAME_FIELD),
        **{name: _column(name) for name in _USER_EXPORT_FIELDS if name in stored},
    }
    fields = ", ".join(f"'{name}', u.\"{column}\"" for name, column in columns.items())
    pk = User._meta.pk.column
    return f"""
SELECT json_build_object({fields}, 'username_field', %s::text)::text,
    COALESCE((SELECT enable_memory FROM "{UserConfig._meta.db_table}" WHERE user_id = u."{pk}"),
        false)
FROM "{User._meta.db_table}" u WHERE u."{pk}" = %s
"""


# The account fields the export carries where the user model has them (a custom model may
# have none of them).
_USER_EXPORT_FIELDS = (
    "email",
    "first_name",
    "last_name",
    "date_joined",
    "last_login",
)


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


async def export_chunks_async(chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
    """`chunks` of `export_user_data` for an ASGI response, each read on a worker thread (a
    spool on disk is not read on the event loop): Django holds a synchronous iterator served
    over ASGI in memory whole, which would undo the export's bounded memory. Closed at the
    end, or when the client goes away."""
    try:
        while (chunk := await asyncio.to_thread(next, chunks, None)) is not None:
            yield chunk
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            await asyncio.to_thread(close)


def _chunks(spool: IO[bytes]) -> Iterator[bytes]:
    with spool:
        while chunk := spool.read(EXPORT_CHUNK_BYTES):
            yield chunk


def _write_export(out: IO[bytes], *, user: Any) -> None:
    user_id = user.pk
    workspace = Workspace.for_user(user_id)
    # A connection of its own: the snapshot must not join (or be limited by) a caller's
    # transaction, and its isolation level is set before its first query. Timestamps render
    # in the time zone Django's own connections use, set inside the transaction (a pooler in
    # transaction mode refuses a startup `options` and keeps no session setting).
    with direct_connection() as pg:
        pg.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        pg.read_only = True
        try:
            pg.execute(_LOCAL_TIME_ZONE_SQL, [connection.timezone_name])
            row = pg.execute(_user_sql(), [get_user_model().USERNAME_FIELD, user_id]).fetchone()
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
            _write_events(out, pg, user_id)
            out.write(b'], "memory_versions": [')
            _write_versions(out, user)
            out.write(b'], "pending_approvals": [')
            conversation_export.write_user_pending_approvals(out, pg, user_id=user_id)
            out.write(b'], "threads": [')
            conversation_export.write_user_threads(out, pg, user_id=user_id)
            out.write(b"]}")
        finally:
            pg.rollback()


def _write_json(out: IO[bytes], value: object) -> None:
    out.write(json.dumps(value, ensure_ascii=False).encode("utf-8"))


def _memory_export(user: Any) -> dict[str, Any] | None:
    """MEMORY.md as the user's own read shows it: text (None if unusable), etag, size, problem."""
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


def _write_versions(out: IO[bytes], user: Any) -> None:
    """Every kept version of MEMORY.md, newest replacement first, then any the ledger does
    not name (kept by a write that then failed), one at a time."""
    try:
        listed = [
            version.sha256 for version in list_memory_versions(user=user) if version.available
        ]
        unlisted = sorted(set(kept_version_hashes(Workspace.for_user(user.pk))) - set(listed))
    except WorkspaceError:
        return  # a refused or unreadable versions directory: nothing of it can be exported
    written = 0
    for sha256 in listed + unlisted:
        try:
            data = read_memory_version(user=user, sha256=sha256)
        except (MemoryVersionNotFound, WorkspaceError):
            continue  # pruned since it was listed, or no longer its hash's bytes
        if written:
            out.write(b", ")
        _write_json(out, {"sha256": sha256, "size_bytes": len(data), "text": data.decode("utf-8")})
        written += 1


def _write_events(out: IO[bytes], pg: psycopg.Connection, user_id: int) -> None:
    with server_cursor(
        pg,
        "export_events",
        _events_sql(),
        [user_id],
        fetch_rows=conversation_export.EXPORT_FETCH_ROWS,
    ) as cursor:
        for index, (event_json,) in enumerate(cursor):
            if index:
                out.write(b", ")
            out.write(event_json.encode("utf-8"))


# The kinds of rows an erasure deletes, in the order its report lists them.
ERASURE_COUNT_KINDS = (
    "checkpoints",
    "tool_calls",
    "messages",
    "memory_events",
    "runs",
    "threads",
    "configs",
    "sessions",
)


@dataclass(frozen=True)
class ErasureReport:
    """How many rows of each kind the erasure deleted (zero everywhere when run again)."""

    counts: dict[str, int]


def erase_user(*, user: Any, actor: Any) -> ErasureReport:
    """Delete `user` and everything of theirs: rows, ledger, login sessions, workspace;
    idempotent.

    A committed fence comes first (the user inactive, their pending and running runs failed),
    so neither the Chat service nor a worker that was mid-run writes for them again; then one
    transaction under the memory locks deletes the rows set-wise, removes the workspace and
    the user. A failed erasure is finished by running it again.
    """
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
    """Commit: the user fenced (counted inactive by every check, whatever the user model),
    every pending or running run of theirs failed."""
    with transaction.atomic(), hold_memory_locks(user_id=user_id):
        users = get_user_model().objects.filter(pk=user_id)
        if users.exists():
            ErasureFence.objects.get_or_create(user_id=user_id)
            if has_is_active():  # the host's own login refuses them too
                users.update(is_active=False)
        fail_user_runs(user_id=user_id, error=ERASURE_RUN_ERROR)


def _delete_everything(user_id: int) -> dict[str, int]:
    User = get_user_model()
    with transaction.atomic(), hold_memory_locks(user_id=user_id) as workspace:
        # Rows locked first (the user here, the threads by the conversations app): a write
        # still in flight that references them waits for this transaction and then fails on
        # the missing row instead of slipping in between.
        with connection.cursor() as cursor:
            cursor.execute(
                f'SELECT 1 FROM "{User._meta.db_table}" WHERE "{User._meta.pk.column}" = %s '
                "FOR UPDATE",
                [user_id],
            )
        deleted = conversation_services.delete_user_conversations(user_id=user_id)
        with connection.cursor() as cursor:
            for key, model in (("memory_events", MemoryEvent), ("configs", UserConfig)):
                cursor.execute(
                    f'DELETE FROM "{model._meta.db_table}" WHERE user_id = %s', [user_id]
                )
                deleted[key] = cursor.rowcount
        # Every session a login of theirs opened: a browser still holding one is logged out.
        deleted["sessions"] = delete_user_sessions(user_id=user_id)
        counts = {key: deleted[key] for key in ERASURE_COUNT_KINDS}
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
    conversations = conversation_export.count_user_conversations(user_ids=user_ids)
    return {
        "users": len(user_ids),
        **conversations,
        "memory_events": MemoryEvent.objects.filter(user_id__in=user_ids).count(),
        "sessions": LoginSession.objects.filter(user_id__in=user_ids).count(),
    }


def delete_checkpoints_of_deleted_user(sender: type, instance: Any, **kwargs: Any) -> None:
    """`pre_delete` of the user model: the user's LangGraph checkpoints (keyed by their runs,
    which the delete's cascade removes next), whatever deletes the user."""
    checkpoints.delete_user_checkpoints(user_id=instance.pk)


def remove_workspace_of_deleted_user(sender: type, instance: Any, **kwargs: Any) -> None:
    """`post_delete` of the user model: once the delete commits, `<root>/<uid>/` is removed
    under the user's memory locks, whatever deleted the user (the host's own admin, a
    `QuerySet.delete()`, a script), so no memory outlives its user."""
    user_id = instance.pk

    def remove() -> None:
        try:
            with transaction.atomic(), hold_memory_locks(user_id=user_id) as workspace:
                workspace.remove_tree()
        except (MemoryUnavailable, WorkspaceError, DatabaseError):
            logger.exception("event=workspace_not_removed user=%s", user_id)
            return
        logger.info("event=deleted_user_workspace_removed user=%s", user_id)

    transaction.on_commit(remove, using=kwargs.get("using"))
