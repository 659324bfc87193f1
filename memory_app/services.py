"""Every write of long-term memory: the agent's `remember_memory` and the user's own controls.

Each write is one transaction in one order: the per-user advisory lock; for the agent, the run
row lock, the lease check and the switch re-read; for every writer, the check that its user
exists and is active; then the file fence (an exclusive flock on `agents/.memory.lock`), the
bounded read, dedupe or replacement, the temp file and its fsync, the ledger row (the last
statement before the rename, and so the proof that the session still holds its locks), the
rename, the directory fsync, the flock's release, the commit. A failure before the rename
leaves MEMORY.md byte-for-byte as it was, and a database or lock failure is never downgraded
to an unlocked write.
"""

import hashlib
import logging
import unicodedata
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import cache, partial
from typing import Literal

from django.conf import settings
from django.db import Error as DatabaseError
from django.db import connection, transaction

from conversations import selectors as conversation_selectors
from conversations.runs import ToolRuntimeContext
from memory_app.access import MemoryRunRefused, MemoryState, grant_memory_run, read_memory_state
from memory_app.models import MemoryEvent, MemoryEventKind, UserConfig
from memory_app.selectors import MEMORY_FILE_MAX_BYTES, MemoryFile, memory_etag
from memory_app.workspace import (
    MEMORY_LOCK_RELPATH,
    MEMORY_RELPATH,
    Workspace,
    WorkspaceError,
    WorkspacePathRefused,
)
from yuxi_site.utils.string_utils import is_storable_text

__all__ = [
    "ADDED",
    "MEMORY_ARG_MAX_BYTES",
    "MEMORY_FILE_MAX_BYTES",
    "MEMORY_LOCK_PREFIX",
    "REPLACED",
    "UNCHANGED",
    "ErasureReport",
    "MemoryAccessDenied",
    "MemoryApprovalRequired",
    "MemoryConflict",
    "MemoryFileTooLarge",
    "MemoryInputError",
    "MemoryUnavailable",
    "MemoryWriteError",
    "MemoryWriteResult",
    "clear_memory",
    "current_tool_call_id",
    "erase_user",
    "hold_memory_locks",
    "memory_lock_key",
    "normalize_memory_text",
    "remember_memory",
    "set_memory_enabled",
    "set_memory_write_approval",
    "write_memory_file",
]

logger = logging.getLogger("yuxi.memory")

# Largest `content` or `replaces` argument, in UTF-8 bytes.
MEMORY_ARG_MAX_BYTES = 4096
# Advisory lock names are this prefix plus the uid, hashed by PostgreSQL (see `_LOCK_SQL`).
MEMORY_LOCK_PREFIX = "yuxi-memory:"

ADDED = "added"
UNCHANGED = "unchanged"
REPLACED = "replaced"

_EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()

# One round trip: remember the caller's settings, bound the waits that follow (the advisory
# lock here, the run row lock next) and take the lock. Target-list entries are evaluated in
# order, so the timeout is set before the lock is waited for. A NULL second parameter leaves
# synchronous_commit as it is.
_LOCK_SQL = (
    "SELECT current_setting('lock_timeout'), current_setting('synchronous_commit'), "
    "set_config('lock_timeout', %s, true), "
    "set_config('synchronous_commit', COALESCE(%s, current_setting('synchronous_commit')), true),"
    " pg_advisory_xact_lock(hashtextextended(%s, 0))"
)
_SET_LOCK_TIMEOUT_SQL = "SELECT set_config('lock_timeout', %s, true)"


@cache
def _ledger_sql() -> str:
    """The ledger row, restoring the transaction's durable commit in the same statement."""
    return (
        "WITH durable AS (SELECT set_config('synchronous_commit', %s, true)) "
        f'INSERT INTO "{MemoryEvent._meta.db_table}" '
        '("user_id", "kind", "actor_id", "run_id", "before_sha256", "after_sha256", '
        '"size_bytes") SELECT %s, %s, %s, %s, %s, %s, %s FROM durable'
    )


class MemoryWriteError(Exception):
    """Base of every refusal or failure of a memory write."""


class MemoryInputError(MemoryWriteError):
    """`content`, `replaces` or a user's text is not acceptable (type, size, NUL, empty)."""


class MemoryConflict(MemoryWriteError):
    """The file does not allow the write: `replaces` not found or ambiguous, bad encoding, or
    the user's edit was made against a version that is no longer current."""

    NOT_FOUND = "not_found"
    AMBIGUOUS = "ambiguous"
    INVALID_ENCODING = "invalid_encoding"
    STALE = "stale"

    def __init__(self, reason: str) -> None:
        super().__init__(f"memory conflict: {reason}")
        self.reason = reason


class MemoryFileTooLarge(MemoryWriteError):
    """The current file or the result would exceed `MEMORY_FILE_MAX_BYTES`."""


class MemoryAccessDenied(MemoryWriteError):
    """Identity, run, lease, switch or user state refuses the write, or the path is unsafe."""


class MemoryApprovalRequired(MemoryAccessDenied):
    """The user approves each memory write, and no decision of theirs released this call."""


class MemoryUnavailable(MemoryWriteError):
    """The database, a lock wait or the file system failed; nothing was written."""


@dataclass(frozen=True)
class MemoryWriteResult:
    """What a successful call did and the size of MEMORY.md afterwards."""

    status: Literal["added", "unchanged", "replaced"]
    size_bytes: int


@dataclass(frozen=True)
class _HeldLock:
    """The caller's settings from before the advisory lock, for a caller's transaction."""

    lock_timeout: str
    synchronous_commit: str


def normalize_memory_text(text: str) -> str:
    """NFC, LF line ends, no trailing whitespace on lines, no blank edges."""
    text = unicodedata.normalize("NFC", text).replace("\r\n", "\n").replace("\r", "\n")
    return "\n".join(line.rstrip() for line in text.split("\n")).strip()


def _checked_argument(value: object, name: str, *, require_text: bool) -> str:
    if not isinstance(value, str):
        raise MemoryInputError(f"{name} must be text")
    if not is_storable_text(value):
        raise MemoryInputError(f"{name} has a NUL or is not valid Unicode text")
    if len(value.encode("utf-8")) > MEMORY_ARG_MAX_BYTES:
        raise MemoryInputError(f"{name} is over {MEMORY_ARG_MAX_BYTES} bytes")
    if require_text and not value.strip():
        raise MemoryInputError(f"{name} is empty")
    return value


def memory_lock_key(uid: str) -> int:
    """The 64-bit advisory lock key of `uid`'s memory, so operators and tests can hold it."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT hashtextextended(%s, 0)", [MEMORY_LOCK_PREFIX + uid])
        return cursor.fetchone()[0]


def _lock_timeout_ms() -> int:
    timeout_ms = int(settings.MEMORY_LOCK_TIMEOUT_MS)
    if timeout_ms <= 0:
        raise MemoryUnavailable("MEMORY_LOCK_TIMEOUT_MS must be positive")
    return timeout_ms


def _take_memory_lock(uid: str, *, owns_transaction: bool) -> _HeldLock:
    """Wait (bounded by `MEMORY_LOCK_TIMEOUT_MS`) for `uid`'s transaction advisory lock.

    The timeout stays set for the rest of the transaction, so it also bounds the run row lock
    that follows. A transaction this module opened waits for no WAL flush until its ledger row
    asks for it back (a write that changed nothing only marked a row, and a crash releases the
    locks anyway); a caller's transaction keeps its own durability.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            _LOCK_SQL,
            [
                f"{_lock_timeout_ms()}ms",
                "off" if owns_transaction else None,
                MEMORY_LOCK_PREFIX + uid,
            ],
        )
        lock_timeout, synchronous_commit = cursor.fetchone()[:2]
    return _HeldLock(lock_timeout=lock_timeout, synchronous_commit=synchronous_commit)


def _restore_lock_timeout(held: _HeldLock) -> None:
    """Give a caller's transaction back its own `lock_timeout`."""
    with connection.cursor() as cursor:
        cursor.execute(_SET_LOCK_TIMEOUT_SQL, [held.lock_timeout])


@contextmanager
def _file_fence(workspace: Workspace) -> Iterator[None]:
    """The exclusive flock on `agents/.memory.lock`, bounded by `MEMORY_LOCK_TIMEOUT_MS`."""
    with workspace.locked(MEMORY_LOCK_RELPATH, timeout_seconds=_lock_timeout_ms() / 1000):
        yield


def _record_event(
    held: _HeldLock,
    *,
    user_id: int,
    kind: str,
    actor_id: int | None,
    run_id: int | None,
    before: str,
    after: str,
    size_bytes: int,
) -> None:
    """The ledger row: the last statement before a rename, so also the liveness check.

    If the session died (its locks with it), this fails and the caller publishes nothing.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            _ledger_sql(),
            [held.synchronous_commit, user_id, kind, actor_id, run_id, before, after, size_bytes],
        )


def _log_change(
    *, user_id: int, kind: str, actor_id: int | None, run_id: int | None, before: str, after: str
) -> None:
    logger.info(
        "memory_changed user=%s kind=%s actor=%s run=%s before=%s after=%s",
        user_id,
        kind,
        actor_id,
        run_id,
        before,
        after,
    )


def _publish_recorded(
    workspace: Workspace,
    held: _HeldLock,
    data: bytes,
    *,
    kind: str,
    actor_id: int | None = None,
    run_id: int | None = None,
    before: str,
) -> str:
    """Publish `data` as MEMORY.md with its ledger row sent just before the rename.

    Returns the new file's SHA-256 (hex).
    """
    after = hashlib.sha256(data).hexdigest()
    fields = {
        "user_id": workspace.uid,
        "kind": kind,
        "actor_id": actor_id,
        "run_id": run_id,
        "before": before,
        "after": after,
    }
    record = partial(_record_event, held, size_bytes=len(data), **fields)
    workspace.publish(MEMORY_RELPATH, data, before_rename=record)
    _log_change(**fields)
    return after


def _decode_memory(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MemoryConflict(MemoryConflict.INVALID_ENCODING) from exc


def _appended(current: str, content: str) -> str | None:
    """`current` with `content` appended as whole lines, or None if they already stand there.

    Lines are compared with only their trailing whitespace ignored (`\r` included), so an
    indented or differently composed line of the file is not the same fact.
    """
    lines = "\n".join(line.rstrip() for line in current.split("\n"))
    if f"\n{content}\n" in f"\n{lines}\n":
        return None
    separator = "" if not current or current.endswith("\n") else "\n"
    return f"{current}{separator}{content}\n"


def _replaced(current: str, old: str, new: str) -> str:
    """`current` with its only occurrence of `old` (overlaps count) replaced by `new`."""
    start = current.find(old)
    if start < 0:
        raise MemoryConflict(MemoryConflict.NOT_FOUND)
    if current.find(old, start + 1) >= 0:
        raise MemoryConflict(MemoryConflict.AMBIGUOUS)
    return current[:start] + new + current[start + len(old) :]


def _remember_fenced(
    workspace: Workspace,
    held: _HeldLock,
    run_id: int,
    content: str,
    replaces: str | None,
    *,
    actor_id: int | None,
) -> MemoryWriteResult:
    """Bounded read, dedupe or replace, publish: under the advisory lock and the flock."""
    data, too_large = workspace.read_bounded(MEMORY_RELPATH, MEMORY_FILE_MAX_BYTES)
    if too_large:
        raise MemoryFileTooLarge(f"MEMORY.md is over {MEMORY_FILE_MAX_BYTES} bytes")
    current = _decode_memory(data)
    if replaces is None:
        result = _appended(current, content)
        if result is None:
            return MemoryWriteResult(status=UNCHANGED, size_bytes=len(data))
        status, kind = ADDED, MemoryEventKind.AGENT_ADDED
    else:
        result = _replaced(current, replaces, content)
        status, kind = REPLACED, MemoryEventKind.AGENT_REPLACED
    encoded = result.encode("utf-8")
    if len(encoded) > MEMORY_FILE_MAX_BYTES:
        raise MemoryFileTooLarge(f"the result would be over {MEMORY_FILE_MAX_BYTES} bytes")
    if encoded != data:
        before = hashlib.sha256(data).hexdigest()
        _publish_recorded(
            workspace, held, encoded, kind=kind, actor_id=actor_id, run_id=run_id, before=before
        )
    return MemoryWriteResult(status=status, size_bytes=len(encoded))


def _remember_locked(
    ctx: ToolRuntimeContext,
    content: str,
    replaces: str | None,
    *,
    owns_transaction: bool,
    tool_call_id: str | None,
) -> MemoryWriteResult:
    """The body of the write; the caller holds the transaction."""
    held = _take_memory_lock(ctx.uid, owns_transaction=owns_transaction)
    try:
        grant = grant_memory_run(ctx, lock=True)
    except MemoryRunRefused as exc:
        raise MemoryAccessDenied(exc.reason) from exc
    run = grant.run
    # A decided write (the call a user's decision released, in the resume run carrying it) is
    # the user's act; with approval on, no other call writes.
    decided = conversation_selectors.is_released_call(run=run, tool_call_id=tool_call_id)
    if grant.state.write_approval and not decided:
        raise MemoryApprovalRequired("needs the user's approval")
    workspace = Workspace.for_user(run.user_id)
    with _file_fence(workspace):
        result = _remember_fenced(
            workspace,
            held,
            run.pk,
            content,
            replaces,
            actor_id=run.user_id if decided else None,
        )
    if not owns_transaction:
        _restore_lock_timeout(held)
    return result


@contextmanager
def _memory_errors() -> Iterator[None]:
    """Workspace and database failures as the typed memory errors."""
    try:
        yield
    except WorkspacePathRefused as exc:
        raise MemoryAccessDenied("the memory file path is not a safe regular file") from exc
    except WorkspaceError as exc:
        raise MemoryUnavailable("the memory file could not be written or locked") from exc
    except DatabaseError as exc:
        raise MemoryUnavailable("the database or the memory lock is unavailable") from exc


# The id of the tool call being run, set by the memory tool around its call (LangGraph hands
# the tool its call): with approval on, a write proves with it that it is the call a user's
# decision released.
current_tool_call_id: ContextVar[str | None] = ContextVar("yuxi_tool_call_id", default=None)


def remember_memory(
    ctx: ToolRuntimeContext, content: str, replaces: str | None = None
) -> MemoryWriteResult:
    """Append `content` to the user's MEMORY.md, or replace the one exact `replaces` with it.

    Serialized per user by a PostgreSQL advisory lock and fenced by the run's worker lease and
    the file lock, so concurrent, stale or disconnected writers cannot lose or resurrect each
    other's facts. When the user approves each write (`memory_write_approval`), only the tool
    call (`current_tool_call_id`) that a decision released, in the `resume` run carrying it,
    writes (the ledger's actor is then the user); any other is `MemoryApprovalRequired`.
    """
    content = normalize_memory_text(_checked_argument(content, "content", require_text=True))
    # NFC can grow a text (some characters recompose into longer forms): cap what is written.
    if len(content.encode("utf-8")) > MEMORY_ARG_MAX_BYTES:
        raise MemoryInputError(f"content is over {MEMORY_ARG_MAX_BYTES} bytes once normalized")
    if replaces is not None:
        # Exact text, checked only for size and NUL: whether it occurs once is the file's say.
        replaces = _checked_argument(replaces, "replaces", require_text=False)
    uid = getattr(ctx, "uid", None)
    if not isinstance(uid, str) or not uid:
        raise MemoryAccessDenied("the run context has no user")
    with _memory_errors():
        # Only a transaction this call opens may skip the WAL flush of a write that changed
        # nothing.
        owns_transaction = connection.get_autocommit() and not connection.in_atomic_block
        with transaction.atomic():
            return _remember_locked(
                ctx,
                content,
                replaces,
                owns_transaction=owns_transaction,
                tool_call_id=current_tool_call_id.get(),
            )


# -- the user's side ---------------------------------------------------------------------------


@contextmanager
def hold_memory_locks(*, user_id: int) -> Iterator[Workspace]:
    """Hold `user_id`'s advisory lock (until the transaction ends) and file lock (until exit).

    For work that must exclude every memory writer of the user, erasure included; use inside
    `transaction.atomic()`. Both waits are bounded by `MEMORY_LOCK_TIMEOUT_MS`: a timeout is
    `MemoryUnavailable`. The user's state is not checked here (erasure holds the locks for an
    inactive user); the caller's own `lock_timeout` is back in force inside the block.
    """
    if not connection.in_atomic_block:
        raise RuntimeError("hold_memory_locks must be used inside transaction.atomic()")
    workspace = Workspace.for_user(user_id)
    with ExitStack() as stack:
        # Only the waits are translated: the caller's own errors inside the block pass as raised.
        with _memory_errors():
            held = _take_memory_lock(str(workspace.uid), owns_transaction=False)
            _restore_lock_timeout(held)
            stack.enter_context(_file_fence(workspace))
        yield workspace


@contextmanager
def _user_write(user_id: int) -> Iterator[tuple[Workspace, _HeldLock, MemoryState]]:
    """A user-side write's transaction: advisory lock, live user, flock. Yields the user's
    settings as read under the lock."""
    workspace = Workspace.for_user(user_id)
    with _memory_errors(), transaction.atomic():
        held = _take_memory_lock(str(workspace.uid), owns_transaction=False)
        _restore_lock_timeout(held)
        state = read_memory_state(workspace.uid)
        if not state.user_active:
            # Checked before the flock, whose file would recreate an erased workspace.
            raise MemoryAccessDenied("the user is missing or inactive")
        with _file_fence(workspace):
            yield workspace, held, state


def _actor_id(actor) -> int | None:
    return None if actor is None else actor.pk


def set_memory_enabled(*, user, enabled: bool, actor) -> UserConfig:
    """Turn `user`'s memory on or off (creating the row), under the user's advisory lock.

    A memory write in flight either finishes before the change commits or sees it. A change
    is recorded in the ledger with the file's current hash as both before and after.
    """
    return _set_setting(
        user=user,
        field="enable_memory",
        enabled=enabled,
        actor=actor,
        kinds=(MemoryEventKind.SWITCH_ON, MemoryEventKind.SWITCH_OFF),
        current=lambda state: state.enabled,
    )


def set_memory_write_approval(*, user, enabled: bool, actor) -> UserConfig:
    """Make each of `user`'s memory writes wait for their decision, or not (creating the row),
    under the user's advisory lock: a write in flight either finishes before the change
    commits or sees it. A change is recorded in the ledger as `approval_on` / `approval_off`,
    with the file's current hash as both before and after."""
    return _set_setting(
        user=user,
        field="memory_write_approval",
        enabled=enabled,
        actor=actor,
        kinds=(MemoryEventKind.APPROVAL_ON, MemoryEventKind.APPROVAL_OFF),
        current=lambda state: state.write_approval,
    )


def _set_setting(
    *,
    user,
    field: str,
    enabled: bool,
    actor,
    kinds: tuple[str, str],
    current: Callable[[MemoryState], bool],
) -> UserConfig:
    """Set the boolean `field` of `user`'s `UserConfig` under the user-write locks (`current`
    reads its value from the state read there); a change gets the ledger event `kinds[0]`
    (now on) or `kinds[1]` (now off)."""
    if not isinstance(enabled, bool):
        raise MemoryInputError("enabled must be true or false")
    with _user_write(user.pk) as (workspace, held, state):
        config, _ = UserConfig.objects.update_or_create(
            user_id=workspace.uid, defaults={field: enabled}
        )
        if enabled != current(state):
            _record_setting_event(
                workspace, held, kind=kinds[0] if enabled else kinds[1], actor=actor
            )
    return config


def _record_setting_event(workspace: Workspace, held: _HeldLock, *, kind: str, actor) -> None:
    """A settings change in the ledger: the file's current hash as both before and after."""
    read = workspace.read_digested(MEMORY_RELPATH, 0)
    fields = {
        "user_id": workspace.uid,
        "kind": kind,
        "actor_id": _actor_id(actor),
        "run_id": None,
        "before": read.sha256,
        "after": read.sha256,
    }
    _record_event(held, size_bytes=read.size_bytes, **fields)
    _log_change(**fields)


def _checked_user_text(text: object) -> bytes:
    if not isinstance(text, str):
        raise MemoryInputError("text must be text")
    if not is_storable_text(text):
        raise MemoryInputError("text has a NUL or is not valid Unicode text")
    encoded = text.encode("utf-8")
    if len(encoded) > MEMORY_FILE_MAX_BYTES:
        raise MemoryFileTooLarge(f"text is over {MEMORY_FILE_MAX_BYTES} bytes")
    return encoded


def _replace_whole_file(
    user_id: int, data: bytes, *, kind: str, actor, accept: Callable[[str], None]
) -> MemoryFile:
    """Replace MEMORY.md with `data` under the locks once `accept(current_etag)` agrees."""
    with _user_write(user_id) as (workspace, held, _):
        current = workspace.read_digested(MEMORY_RELPATH, MEMORY_FILE_MAX_BYTES)
        accept(memory_etag(current.sha256))
        unchanged = not current.truncated and current.data == data
        if not unchanged:
            _publish_recorded(
                workspace, held, data, kind=kind, actor_id=_actor_id(actor), before=current.sha256
            )
    digest = current.sha256 if unchanged else hashlib.sha256(data).hexdigest()
    return MemoryFile(
        text=data.decode("utf-8"), etag=memory_etag(digest), size_bytes=len(data), problem=None
    )


def write_memory_file(*, user, text: str, if_match: str, actor) -> MemoryFile:
    """Replace the whole of `user`'s MEMORY.md with `text`, only if `if_match` is current.

    The etag is compared under the locks, so an agent write that landed after the user read
    makes the edit `MemoryConflict("stale")` instead of silently undoing it. Works whether the
    switch is on or off; `text` is stored as given.
    """
    data = _checked_user_text(text)
    if not isinstance(if_match, str):
        raise MemoryInputError("if_match must be the etag that was read")

    def accept(current_etag: str) -> None:
        if current_etag != if_match:
            raise MemoryConflict(MemoryConflict.STALE)

    return _replace_whole_file(
        user.pk, data, kind=MemoryEventKind.USER_EDITED, actor=actor, accept=accept
    )


def clear_memory(*, user, actor) -> None:
    """Empty `user`'s MEMORY.md: the prompt then has no memory block, and the next
    `remember_memory` starts from an empty file. Works whatever the file held."""
    _replace_whole_file(
        user.pk, b"", kind=MemoryEventKind.USER_CLEARED, actor=actor, accept=lambda _etag: None
    )


from memory_app.lifecycle import ErasureReport, erase_user  # noqa: E402  (see lifecycle)
