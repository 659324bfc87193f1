"""The agent's only write to long-term memory: `remember_memory` (SPEC §6).

One transaction: the per-user advisory lock, then the run row lock and lease-owner check, then
the switch re-read, then the bounded read, dedupe or replacement, and the atomic publish. A
failure anywhere before the publish leaves MEMORY.md byte-for-byte as it was, and a database or
lock failure is never downgraded to an unlocked write.
"""

import unicodedata
from dataclasses import dataclass
from typing import Literal

from django.conf import settings
from django.db import Error as DatabaseError
from django.db import connection, transaction

from conversations.runs import RunContextInvalid, ToolRuntimeContext, lock_run_for_tool
from memory_app.selectors import memory_enabled
from memory_app.workspace import (
    MEMORY_RELPATH,
    Workspace,
    WorkspaceError,
    WorkspacePathRefused,
)
from yuxi_site.utils.string_utils import is_storable_text

# Largest `content` or `replaces` argument, in UTF-8 bytes.
MEMORY_ARG_MAX_BYTES = 4096
# Largest MEMORY.md accepted as a source and produced as a result, in UTF-8 bytes.
MEMORY_FILE_MAX_BYTES = 131072
# Advisory lock names are this prefix plus the uid, hashed by PostgreSQL (see `_lock_key_sql`).
MEMORY_LOCK_PREFIX = "yuxi-memory:"

ADDED = "added"
UNCHANGED = "unchanged"
REPLACED = "replaced"


class MemoryWriteError(Exception):
    """Base of every refusal or failure of a memory write."""


class MemoryInputError(MemoryWriteError):
    """`content` or `replaces` is not acceptable (type, size, NUL, empty)."""


class MemoryConflict(MemoryWriteError):
    """The file does not allow the write: `replaces` not found or ambiguous, or bad encoding."""

    NOT_FOUND = "not_found"
    AMBIGUOUS = "ambiguous"
    INVALID_ENCODING = "invalid_encoding"

    def __init__(self, reason: str) -> None:
        super().__init__(f"memory conflict: {reason}")
        self.reason = reason


class MemoryFileTooLarge(MemoryWriteError):
    """The current file or the result would exceed `MEMORY_FILE_MAX_BYTES`."""


class MemoryAccessDenied(MemoryWriteError):
    """Identity, run, lease or switch refuses the write, or the workspace path is unsafe."""


class MemoryUnavailable(MemoryWriteError):
    """The database, the lock wait or the file system failed; nothing was written."""


@dataclass(frozen=True)
class MemoryWriteResult:
    """What a successful call did and the size of MEMORY.md afterwards."""

    status: Literal["added", "unchanged", "replaced"]
    size_bytes: int


def normalize_memory_text(text: str) -> str:
    """NFC, LF line ends, no trailing whitespace on lines, no blank edges (SPEC §6)."""
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


def _lock_key_sql(uid: str) -> tuple[str, list[str]]:
    """The advisory lock key of `uid`: `hashtextextended('yuxi-memory:' || uid, 0)`."""
    return "hashtextextended(%s, 0)", [MEMORY_LOCK_PREFIX + uid]


def memory_lock_key(uid: str) -> int:
    """The 64-bit advisory lock key of `uid`'s memory, so operators and tests can hold it."""
    expression, params = _lock_key_sql(uid)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {expression}", params)
        return cursor.fetchone()[0]


def _take_memory_lock(uid: str, *, owns_transaction: bool) -> str:
    """Wait (bounded by `MEMORY_LOCK_TIMEOUT_MS`) for `uid`'s transaction advisory lock.

    Returns the `lock_timeout` in force before, for a caller's transaction to get it back.
    """
    timeout_ms = int(settings.MEMORY_LOCK_TIMEOUT_MS)
    if timeout_ms <= 0:
        raise MemoryUnavailable("MEMORY_LOCK_TIMEOUT_MS must be positive")
    expression, params = _lock_key_sql(uid)
    # Transaction-local, so the timeout also bounds the run row lock that follows.
    local_settings = "SELECT current_setting('lock_timeout'), set_config('lock_timeout', %s, true)"
    if owns_transaction:
        # The transaction changes no data (FOR UPDATE only marks the row), so waiting for its
        # commit record to reach disk buys nothing: a crash releases the locks anyway. Never
        # set for a caller's transaction, whose own writes must stay durable.
        local_settings += ", set_config('synchronous_commit', 'off', true)"
    with connection.cursor() as cursor:
        cursor.execute(local_settings, [f"{timeout_ms}ms"])
        previous_timeout = cursor.fetchone()[0]
        cursor.execute(f"SELECT pg_advisory_xact_lock({expression})", params)
    return previous_timeout


def _restore_lock_timeout(previous_timeout: str) -> None:
    """Give a caller's transaction back its own `lock_timeout` (a failed write's savepoint
    rollback does so by itself)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('lock_timeout', %s, true)", [previous_timeout])


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


def _write_locked(
    ctx: ToolRuntimeContext, content: str, replaces: str | None, *, owns_transaction: bool
) -> MemoryWriteResult:
    """The body of the write; the caller holds the transaction."""
    previous_timeout = _take_memory_lock(ctx.uid, owns_transaction=owns_transaction)
    result = _write_body(ctx, content, replaces)
    if not owns_transaction:
        _restore_lock_timeout(previous_timeout)
    return result


def _write_body(ctx: ToolRuntimeContext, content: str, replaces: str | None) -> MemoryWriteResult:
    """Authorize, read, dedupe or replace, publish: all under the memory lock."""
    try:
        run = lock_run_for_tool(ctx)
    except RunContextInvalid as exc:
        raise MemoryAccessDenied("this run may not write memory") from exc
    if not memory_enabled(run.user_id):
        raise MemoryAccessDenied("memory is turned off for this user")
    workspace = Workspace.for_user(run.user_id)
    data, too_large = workspace.read_bounded(MEMORY_RELPATH, MEMORY_FILE_MAX_BYTES)
    if too_large:
        raise MemoryFileTooLarge(f"MEMORY.md is over {MEMORY_FILE_MAX_BYTES} bytes")
    current = _decode_memory(data)
    if replaces is None:
        result = _appended(current, content)
        if result is None:
            return MemoryWriteResult(status=UNCHANGED, size_bytes=len(data))
        status = ADDED
    else:
        result = _replaced(current, replaces, content)
        status = REPLACED
    encoded = result.encode("utf-8")
    if len(encoded) > MEMORY_FILE_MAX_BYTES:
        raise MemoryFileTooLarge(f"the result would be over {MEMORY_FILE_MAX_BYTES} bytes")
    if encoded != data:
        workspace.replace_authorized_file(MEMORY_RELPATH, encoded)
    return MemoryWriteResult(status=status, size_bytes=len(encoded))


def remember_memory(
    ctx: ToolRuntimeContext, content: str, replaces: str | None = None
) -> MemoryWriteResult:
    """Append `content` to the user's MEMORY.md, or replace the one exact `replaces` with it.

    Serialized per user by a PostgreSQL advisory lock and fenced by the run's worker lease, so
    concurrent or stale workers cannot lose or resurrect each other's facts.
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
    try:
        # Only a transaction this call opens may commit without waiting for the WAL flush.
        owns_transaction = connection.get_autocommit() and not connection.in_atomic_block
        with transaction.atomic():
            return _write_locked(ctx, content, replaces, owns_transaction=owns_transaction)
    except WorkspacePathRefused as exc:
        raise MemoryAccessDenied("the memory file path is not a safe regular file") from exc
    except WorkspaceError as exc:
        raise MemoryUnavailable("the memory file could not be written") from exc
    except DatabaseError as exc:
        raise MemoryUnavailable("the database or the memory lock is unavailable") from exc


from memory_app.lifecycle import ErasureReport as ErasureReport  # noqa: E402
from memory_app.lifecycle import erase_user as erase_user  # noqa: E402
