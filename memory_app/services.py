"""Every write of long-term memory: the agent's `remember_memory` and the user's own controls.

Each write is one transaction in one order: the per-user advisory lock; for the agent, the run
row lock, the lease check and the switch re-read; for every writer, the check that its user
exists and is active; then the file fence (an exclusive flock on `agents/.memory.lock`), the
bounded read, dedupe or replacement, keeping the version it replaces (`versions`), the temp
file and its fsync, the ledger row (the last statement before the rename, and so the proof that
the session still holds its locks), the rename, the directory fsync, pruning the kept versions,
the flock's release, the commit. A failure before the rename leaves MEMORY.md byte-for-byte as
it was, and a database or lock failure is never downgraded to an unlocked write.
"""

import hashlib
import logging
import unicodedata
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from enum import StrEnum
from functools import partial

from django.db import connection, transaction
from django.utils.translation import gettext_noop

from conversations import selectors as conversation_selectors
from conversations.models import AgentRun
from conversations.runs import ToolRuntimeContext
from conversations.utils.invisible_text import invisible_characters
from conversations.utils.string_utils import STORABLE_TEXT_REQUIREMENT, is_storable_text
from memory_app import versions
from memory_app.authorization import (
    MemoryRunRefused,
    MemoryState,
    grant_memory_run,
    read_memory_state,
)
from memory_app.credentials import (
    CredentialFinding,
    credential_kinds,
    produced_credential,
    repeat_needles,
    stated_credential_in,
)
from memory_app.errors import (
    MemoryAccessDenied,
    MemoryApprovalRequired,
    MemoryConflict,
    MemoryFileTooLarge,
    MemoryInputError,
    MemoryInvisibleText,
    MemoryLineNotFound,
    MemorySensitiveContent,
    MemoryUnavailable,
    MemoryVersionNotFound,
    MemoryWriteError,
    memory_errors,
)
from memory_app.locks import (
    MEMORY_LOCK_PREFIX,
    CallerSettings,
    file_fence,
    hold_memory_locks,
    memory_lock_key,
    record_event,
    restore_lock_timeout,
    take_memory_lock,
)
from memory_app.memory_file import (
    MEMORY_BULLET_MARKERS,
    MEMORY_FILE_MAX_BYTES,
    MemoryFile,
    memory_etag,
    split_lines,
    unbulleted,
    write_warnings,
)
from memory_app.models import MemoryEventKind, UserConfig
from memory_app.user_data import ErasureReport, erase_user
from memory_app.workspace import Workspace, WorkspaceError
from memory_app.workspace.paths import MEMORY_RELPATH
from memory_app.workspace.reads import DigestedRead

__all__ = [
    "ADDED",
    "MEMORY_ARG_MAX_BYTES",
    "MEMORY_FILE_MAX_BYTES",
    "MEMORY_LOCK_PREFIX",
    "MEMORY_OFF",
    "REPLACED",
    "UNCHANGED",
    "ErasureReport",
    "MemoryAccessDenied",
    "MemoryApprovalRequired",
    "MemoryConflict",
    "MemoryFileTooLarge",
    "MemoryInputError",
    "MemoryInvisibleText",
    "MemoryLineNotFound",
    "MemorySensitiveContent",
    "MemoryUnavailable",
    "MemoryVersionNotFound",
    "MemoryWriteError",
    "MemoryWriteResult",
    "MemoryWriteStatus",
    "check_memory_write",
    "clear_memory",
    "delete_memory_line",
    "edit_memory_line",
    "erase_user",
    "forget_memory_versions",
    "holds_what_memory_never_keeps",
    "hold_memory_locks",
    "memory_lock_key",
    "normalize_memory_text",
    "remember_memory",
    "remember_tool_call",
    "restore_memory_version",
    "set_memory_enabled",
    "set_memory_write_approval",
    "write_memory_file",
]

logger = logging.getLogger("yuxi.memory")

# Largest `content` or `replaces` argument, in UTF-8 bytes.
MEMORY_ARG_MAX_BYTES = 4096


class MemoryWriteStatus(StrEnum):
    """What a successful `remember_memory` did (the tool result's status too)."""

    ADDED = "added"
    UNCHANGED = "unchanged"
    REPLACED = "replaced"


ADDED = MemoryWriteStatus.ADDED
UNCHANGED = MemoryWriteStatus.UNCHANGED
REPLACED = MemoryWriteStatus.REPLACED


@dataclass(frozen=True)
class MemoryWriteResult:
    """What a successful call did and the size of MEMORY.md afterwards."""

    status: MemoryWriteStatus
    size_bytes: int


def normalize_memory_text(text: str) -> str:
    """NFC, LF line ends, no trailing whitespace on lines, no blank edges."""
    text = unicodedata.normalize("NFC", text).replace("\r\n", "\n").replace("\r", "\n")
    return "\n".join(line.rstrip() for line in text.split("\n")).strip()


def _checked_argument(value: object, name: str, *, require_text: bool) -> str:
    if not isinstance(value, str):
        raise MemoryInputError(f"{name} must be text")
    if not is_storable_text(value):
        raise MemoryInputError(f"{name} must be {STORABLE_TEXT_REQUIREMENT}")
    if len(value.encode("utf-8")) > MEMORY_ARG_MAX_BYTES:
        raise MemoryInputError(f"{name} is over {MEMORY_ARG_MAX_BYTES} bytes")
    if require_text and not value.strip():
        raise MemoryInputError(f"{name} is empty")
    return value


def _log_change(
    *, user_id: int, kind: str, actor_id: int | None, run: uuid.UUID | None, before: str, after: str
) -> None:
    """The `memory_changed` line. `run` is the agent run's `run_id`, the UUID the API returns
    and run failures log (not its row id), so one search finds a run's every line."""
    logger.info(
        "memory_changed user=%s kind=%s actor=%s run=%s before=%s after=%s",
        user_id,
        kind,
        actor_id,
        run,
        before,
        after,
    )


def _publish_recorded(
    workspace: Workspace,
    held: CallerSettings,
    data: bytes,
    *,
    kind: str,
    actor_id: int | None = None,
    run: AgentRun | None = None,
    before: str,
    replaced: bytes | None,
) -> str:
    """Publish `data` as MEMORY.md with its ledger row sent just before the rename.

    The one publish every writer of MEMORY.md shares, so every change keeps the version it
    replaces (`replaced`, the file's bytes hashing to `before`; None when too large to read
    whole) before its ledger row, and prunes the kept versions after its directory fsync,
    all inside the caller's file fence. Returns the new file's SHA-256 (hex).
    """
    keep = versions.keep_replaced(workspace, sha256=before, data=replaced)
    after = hashlib.sha256(data).hexdigest()
    fields = {
        "user_id": workspace.uid,
        "kind": kind,
        "actor_id": actor_id,
        "before": before,
        "after": after,
    }
    run_pk = None if run is None else run.pk
    record = partial(record_event, held, size_bytes=len(data), run_id=run_pk, **fields)
    try:
        workspace.publish(MEMORY_RELPATH, data, before_rename=record)
    except BaseException:
        versions.discard_new(workspace, keep)
        raise
    versions.prune(workspace, keep)
    _log_change(run=None if run is None else run.run_id, **fields)
    return after


def _decode_memory(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MemoryConflict(MemoryConflict.INVALID_ENCODING) from exc


def _appended(current: str, content: str) -> tuple[str, int] | None:
    """`current` with `content` appended as whole lines, or None if they already stand there.

    Lines are compared with only their trailing whitespace ignored (`\r` included), so an
    indented or differently composed line of the file is not the same fact. A one-line fact is
    the same with or without a list marker (`- tea` stands for `tea`), and one without a marker
    follows the file's list style: after a last non-empty line that is a `- `, `* ` or `+ `
    bullet, it is appended as a bullet with that marker. Returns the new text and where the
    appended lines start in it.
    """
    lines = [line.rstrip() for line in current.split("\n")]
    if f"\n{content}\n" in "\n" + "\n".join(lines) + "\n":
        return None
    if "\n" not in content:
        fact = unbulleted(content)
        if any(unbulleted(line) == fact for line in lines):
            return None
        last = next((line for line in reversed(lines) if line), "")
        if content == fact and last.startswith(MEMORY_BULLET_MARKERS):
            content = last[:2] + content
    separator = "" if not current or current.endswith("\n") else "\n"
    return f"{current}{separator}{content}\n", len(current) + len(separator)


def _replaced(current: str, old: str, new: str) -> tuple[str, int]:
    """`current` with its only occurrence of `old` (overlaps count) replaced by `new`, and where
    `new` starts in it.

    A whole list line replaced by a one-line fact without a marker keeps its marker
    (`- I live in Porto` corrected to `I live in Lisbon` stays a `- ` bullet), as an appended
    fact follows the file's list style."""
    start = current.find(old)
    if start < 0:
        raise MemoryConflict(MemoryConflict.NOT_FOUND)
    if current.find(old, start + 1) >= 0:
        raise MemoryConflict(MemoryConflict.AMBIGUOUS)
    end = start + len(old)
    whole_line = (start == 0 or current[start - 1] == "\n") and current[end : end + 1] in (
        "",
        "\n",
        "\r",
    )
    if (
        whole_line
        and "\n" not in old + new
        and old.startswith(MEMORY_BULLET_MARKERS)
        and new == unbulleted(new)
    ):
        new = old[:2] + new
    return current[:start] + new + current[end:], start


def _planned_write(
    data: bytes, too_large: bool, content: str, replaces: str | None
) -> tuple[MemoryWriteStatus, bytes]:
    """What a write of `content` (replacing `replaces`) makes of MEMORY.md's bytes `data` (a
    bounded read; `too_large` when it was cut): the status and the new bytes (`data` itself
    when nothing changes). Raises the write's refusals: the file or the result too large,
    `replaces` not exactly once, a file that is not UTF-8, and a credential on a line the write
    produces (`MemorySensitiveContent`): a replacement may complete one from pieces already in
    the file ("AKIAZ3MSJV" + "4WWZ2XJ5QN", "gym locker 7350" made "bank PIN 7350"), or content
    may stand under a line ending in "password is"."""
    if too_large:
        raise MemoryFileTooLarge(f"MEMORY.md is over {MEMORY_FILE_MAX_BYTES} bytes")
    current = _decode_memory(data)
    if replaces is None:
        appended = _appended(current, content)
        if appended is None:
            return UNCHANGED, data
        (result, start), status = appended, ADDED
        end = len(result) - 1  # (a bullet marker may have been put before the content)
    else:
        (result, start), status = _replaced(current, replaces, content), REPLACED
        end = start + len(content)
    kind = produced_credential(result, start, end)
    if kind is not None:
        raise MemorySensitiveContent(kind)
    encoded = result.encode("utf-8")
    if len(encoded) > MEMORY_FILE_MAX_BYTES:
        raise MemoryFileTooLarge(f"the result would be over {MEMORY_FILE_MAX_BYTES} bytes")
    return status, encoded


def _remember_fenced(
    workspace: Workspace,
    held: CallerSettings,
    run: AgentRun,
    content: str,
    replaces: str | None,
    *,
    actor_id: int | None,
) -> MemoryWriteResult:
    """Bounded read, dedupe or replace, publish: under the advisory lock and the flock."""
    data, too_large = workspace.read_bounded(MEMORY_RELPATH, MEMORY_FILE_MAX_BYTES)
    status, encoded = _planned_write(data, too_large, content, replaces)
    kind = MemoryEventKind.AGENT_REPLACED if status == REPLACED else MemoryEventKind.AGENT_ADDED
    if encoded != data:
        before = hashlib.sha256(data).hexdigest()
        _publish_recorded(
            workspace,
            held,
            encoded,
            kind=kind,
            actor_id=actor_id,
            run=run,
            before=before,
            replaced=data,
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
    held = take_memory_lock(ctx.uid, owns_transaction=owns_transaction)
    try:
        grant = grant_memory_run(ctx, lock=True)
    except MemoryRunRefused as exc:
        raise MemoryAccessDenied(exc.reason) from exc
    run = grant.run
    # A decided write (the call a user's decision released, in the resume run carrying it) is
    # the user's act; with approval on, no other call writes.
    decided = conversation_selectors.is_released_call(run=run, tool_call_id=tool_call_id)
    workspace = Workspace.for_user(run.user_id)
    if grant.state.write_approval and not decided:
        # A call never put to the user because it would make a credential is refused as such.
        refusal = _never_kept(ctx.uid, content, replaces)
        if refusal is not None:
            raise refusal
        raise MemoryApprovalRequired("needs the user's approval")
    turn = conversation_selectors.turn_message(conversation_id=run.conversation_id)
    _refuse_stated_credential(run.user_id, content, turn=turn)
    with file_fence(workspace):
        result = _remember_fenced(
            workspace,
            held,
            run,
            content,
            replaces,
            actor_id=run.user_id if decided else None,
        )
    if not owns_transaction:
        restore_lock_timeout(held)
    return result


def _checked_write_arguments(content: object, replaces: object) -> tuple[str, str | None]:
    """`remember_memory`'s arguments as it writes them (`content` normalized), or
    `MemoryInputError`."""
    content = normalize_memory_text(_checked_argument(content, "content", require_text=True))
    # NFC can grow a text (some characters recompose into longer forms): cap what is written.
    if len(content.encode("utf-8")) > MEMORY_ARG_MAX_BYTES:
        raise MemoryInputError(f"content is over {MEMORY_ARG_MAX_BYTES} bytes once normalized")
    # Memory never keeps a credential: refused before any lock, so nothing is written, kept
    # as a version or recorded (and a decision to write one is refused before it is spent).
    # Checked before invisible characters, so content holding both is refused as sensitive.
    kinds = credential_kinds(content)
    if kinds:
        raise MemorySensitiveContent(kinds[0])
    invisible = invisible_characters(content)
    if invisible:
        raise MemoryInvisibleText(invisible)
    if replaces is not None:
        # Exact text, checked only for size and storable text: whether it occurs once is the
        # file's say.
        replaces = _checked_argument(replaces, "replaces", require_text=False)
    return content, replaces


def _refuse_stated_credential(user_id: int, content: str, *, turn: str | None = None) -> None:
    """`MemorySensitiveContent` when `content` repeats a credential the user stated in one of
    their own recent messages, in any thread ("my debit card PIN is 4821" last week, "Lucky
    number: 4821" now), however the rest is worded; and when `turn`, the message of the turn
    writing, repeats one stated in another of them ("Remember that my lucky number is 4821"):
    what a model saves from such a message may carry the value in other words, as for a
    message that states one. Only messages sharing a piece of the content or of the turn's
    message (`repeat_needles`) are read and looked through."""
    needles = repeat_needles(content) + ([] if turn is None else repeat_needles(turn))
    said = conversation_selectors.user_messages_containing(
        user_id=user_id, needles=list(dict.fromkeys(needles))
    )
    kind = stated_credential_in(content, said)
    if kind is None and turn is not None:
        kind = stated_credential_in(turn, [text for text in said if text != turn])
    if kind is not None:
        raise MemorySensitiveContent(kind)


# What a write refused because the user's memory is switched off says.
MEMORY_OFF = gettext_noop("memory is off")


def check_memory_write(*, user_id: int, content: object, replaces: object) -> MemoryWriteStatus:
    """What `remember_memory(content, replaces)` would do for `user_id` now, without writing
    or locking: its status, or the refusal the write would raise (`MemoryAccessDenied` with
    `MEMORY_OFF` while memory is off, `MemoryConflict`, `MemoryInputError`,
    `MemoryFileTooLarge`). A user's decision about a proposed write is checked with it before
    the decision is spent; the write itself still re-checks everything under its locks."""
    content, replaces = _checked_write_arguments(content, replaces)
    workspace = Workspace.for_user(user_id)
    with memory_errors():
        state = read_memory_state(workspace.uid)
        if not state.user_active:
            raise MemoryAccessDenied("the user is missing or inactive")
        if not state.enabled:
            raise MemoryAccessDenied(MEMORY_OFF)
        _refuse_stated_credential(workspace.uid, content)
        data, too_large = workspace.read_bounded(MEMORY_RELPATH, MEMORY_FILE_MAX_BYTES)
    status, _ = _planned_write(data, too_large, content, replaces)
    return status


def _never_kept(
    uid: str | None, content: object, replaces: object
) -> MemorySensitiveContent | MemoryInvisibleText | None:
    """The refusal `remember_memory(content, replaces)` for user `uid` would get for what it
    would keep, judged on the file as it is now (read without a lock or a database call): a
    credential in the content or on a line the write would produce, or invisible characters.
    None when there is none, or the write would be refused for anything else first."""
    try:
        content, replaces = _checked_write_arguments(content, replaces)
        if uid is None:
            return None
        data, too_large = Workspace.for_user(uid).read_bounded(
            MEMORY_RELPATH, MEMORY_FILE_MAX_BYTES
        )
        _planned_write(data, too_large, content, replaces)
    except (MemorySensitiveContent, MemoryInvisibleText) as exc:
        return exc
    except (MemoryWriteError, WorkspaceError):
        return None
    return None


def holds_what_memory_never_keeps(*, uid: str | None, content: object, replaces: object) -> bool:
    """Whether `remember_memory(content, replaces)` for user `uid` would be refused for what it
    would keep: a credential in the content or on a line the write would produce in the file
    as it is now, or invisible characters (`MemorySensitiveContent`, `MemoryInvisibleText`).
    Reads the file only, without a lock or a database call, so an approval can be decided on
    the event loop: such a write is never put to the user (it would show them a harmless
    fragment of a key); it runs and is refused. Any other refusal is the write's to give."""
    return _never_kept(uid, content, replaces) is not None


def remember_memory(
    ctx: ToolRuntimeContext, content: str, replaces: str | None = None
) -> MemoryWriteResult:
    """Append `content` to the user's MEMORY.md, or replace the one exact `replaces` with it.

    Serialized per user by a PostgreSQL advisory lock and fenced by the run's worker lease and
    the file lock, so concurrent, stale or disconnected writers cannot lose or resurrect each
    other's facts. When the user approves each memory write (`memory_write_approval`), a
    direct call is no call a decision released: `MemoryApprovalRequired` (the memory tool
    writes through `remember_tool_call`, with its call's id). Content holding a credential is
    `MemorySensitiveContent`, before any lock is taken.
    """
    return remember_tool_call(ctx, content=content, replaces=replaces, tool_call_id=None)


def remember_tool_call(
    ctx: ToolRuntimeContext, *, content: str, replaces: str | None, tool_call_id: str | None
) -> MemoryWriteResult:
    """`remember_memory` as the agent's tool call `tool_call_id` (None: no call): when the
    user approves each write, only the call a user's decision released, in the `resume` run
    carrying it, writes (the ledger's actor is then the user); any other is
    `MemoryApprovalRequired`."""
    content, replaces = _checked_write_arguments(content, replaces)
    uid = getattr(ctx, "uid", None)
    if not isinstance(uid, str) or not uid:
        raise MemoryAccessDenied("the run context has no user")
    with memory_errors():
        # Only a transaction this call opens may skip the WAL flush of a write that changed
        # nothing.
        owns_transaction = connection.get_autocommit() and not connection.in_atomic_block
        with transaction.atomic():
            return _remember_locked(
                ctx,
                content,
                replaces,
                owns_transaction=owns_transaction,
                tool_call_id=tool_call_id,
            )


# -- the user's side ---------------------------------------------------------------------------


@contextmanager
def _user_write(user_id: int) -> Iterator[tuple[Workspace, CallerSettings, MemoryState]]:
    """A user-side write's transaction: advisory lock, live user, flock. Yields the user's
    settings as read under the lock."""
    workspace = Workspace.for_user(user_id)
    with memory_errors(), transaction.atomic():
        held = take_memory_lock(str(workspace.uid), owns_transaction=False)
        restore_lock_timeout(held)
        state = read_memory_state(workspace.uid)
        if not state.user_active:
            # Checked before the flock, whose file would recreate an erased workspace.
            raise MemoryAccessDenied("the user is missing or inactive")
        with file_fence(workspace):
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
            kind = kinds[0] if enabled else kinds[1]
            _record_unchanged_file(workspace, held, kind=kind, actor=actor)
    return config


def _record_unchanged_file(workspace: Workspace, held: CallerSettings, *, kind: str, actor) -> None:
    """The ledger row of a change that leaves MEMORY.md alone: its current hash before and after."""
    read = workspace.read_digested(MEMORY_RELPATH, 0)
    fields = {
        "user_id": workspace.uid,
        "kind": kind,
        "actor_id": _actor_id(actor),
        "before": read.sha256,
        "after": read.sha256,
    }
    record_event(held, size_bytes=read.size_bytes, run_id=None, **fields)
    _log_change(run=None, **fields)


def _checked_user_text(text: object) -> bytes:
    if not isinstance(text, str):
        raise MemoryInputError("text must be text")
    if not is_storable_text(text):
        raise MemoryInputError(f"text must be {STORABLE_TEXT_REQUIREMENT}")
    encoded = text.encode("utf-8")
    if len(encoded) > MEMORY_FILE_MAX_BYTES:
        raise MemoryFileTooLarge(f"text is over {MEMORY_FILE_MAX_BYTES} bytes")
    return encoded


def _replace_whole_file(
    user_id: int,
    data: bytes,
    *,
    kind: str,
    actor,
    accept: Callable[[str], None],
    warnings: tuple[CredentialFinding, ...] = (),
) -> MemoryFile:
    """Replace MEMORY.md with `data` under the locks once `accept(current_etag)` agrees; the
    result carries `warnings` (found before the locks: the text is the caller's)."""

    def rewrite(current: DigestedRead) -> bytes:
        accept(memory_etag(current.sha256))
        return data

    return _rewrite_file(user_id, rewrite, kind=kind, actor=actor, warnings=warnings)


def _rewrite_file(
    user_id: int,
    rewrite: Callable[[DigestedRead], bytes],
    *,
    kind: str,
    actor,
    warnings: tuple[CredentialFinding, ...] = (),
) -> MemoryFile:
    """Publish `rewrite(current)` as MEMORY.md, `current` being the file as read under the
    locks (`rewrite` raises to refuse); a result equal to the file changes and records
    nothing."""
    with _user_write(user_id) as (workspace, held, _):
        current = workspace.read_digested(MEMORY_RELPATH, MEMORY_FILE_MAX_BYTES)
        data = rewrite(current)
        unchanged = not current.truncated and current.data == data
        if not unchanged:
            _publish_recorded(
                workspace,
                held,
                data,
                kind=kind,
                actor_id=_actor_id(actor),
                before=current.sha256,
                replaced=None if current.truncated else current.data,
            )
    digest = current.sha256 if unchanged else hashlib.sha256(data).hexdigest()
    return MemoryFile(
        text=data.decode("utf-8"),
        etag=memory_etag(digest),
        size_bytes=len(data),
        problem=None,
        warnings=warnings,
    )


def write_memory_file(*, user, text: str, if_match: str, actor) -> MemoryFile:
    """Replace the whole of `user`'s MEMORY.md with `text`, only if `if_match` is current.

    The etag is compared under the locks, so an agent write that landed after the user read
    makes the edit `MemoryConflict("stale")` instead of silently undoing it. Works whether the
    switch is on or off; `text` is stored as given, a credential in it included (the user's
    own write is never refused for one: the result's `warnings` name its lines and kinds).
    """
    data = _checked_user_text(text)
    return _replace_whole_file(
        user.pk,
        data,
        kind=MemoryEventKind.USER_EDITED,
        actor=actor,
        accept=_if_current(if_match),
        warnings=write_warnings(text),
    )


def _if_current(if_match: object) -> Callable[[str], None]:
    """The check, made under the locks, that the user acted on the version still current."""
    if not isinstance(if_match, str):
        raise MemoryInputError("if_match must be the etag that was read")

    def accept(current_etag: str) -> None:
        if current_etag != if_match:
            raise MemoryConflict(MemoryConflict.STALE)

    return accept


def _line_number(number: object) -> int:
    if isinstance(number, bool) or not isinstance(number, int):
        raise MemoryInputError("number must be a line number")
    return number


def _file_lines(current: DigestedRead, number: int) -> list[str]:
    """The lines of MEMORY.md as read under the locks (`split_lines`); `MemoryLineNotFound`
    when it has no line `number` or is not text."""
    try:
        text = None if current.truncated else current.data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    lines = [] if text is None else split_lines(text)
    if not 1 <= number <= len(lines):
        raise MemoryLineNotFound(f"MEMORY.md has no line {number}")
    return lines


def delete_memory_line(*, user, number: int, if_match: str, actor) -> MemoryFile:
    """Remove line `number` (1-based, with its line ending) from `user`'s MEMORY.md, only if
    `if_match` is current: a user edit like `write_memory_file` (ledger `user_edited`, the
    replaced file kept as a version), so "forget this" can be undone by a restore.

    The etag is compared under the locks first (stale: `MemoryConflict("stale")`), since a
    line's number means something only in the file it was read from; then a number the file
    has no line for, or a file that is not text, is `MemoryLineNotFound`.
    """
    number = _line_number(number)
    accept = _if_current(if_match)

    def without_line(current: DigestedRead) -> bytes:
        accept(memory_etag(current.sha256))
        lines = _file_lines(current, number)
        del lines[number - 1]
        return "".join(lines).encode("utf-8")

    return _rewrite_file(user.pk, without_line, kind=MemoryEventKind.USER_EDITED, actor=actor)


def edit_memory_line(*, user, number: int, text: str, if_match: str, actor) -> MemoryFile:
    """Replace line `number` of `user`'s MEMORY.md with `text` (one line; the line keeps its
    ending), only if `if_match` is current: the rules of `delete_memory_line` (a user edit, the
    file before kept as a version, the etag compared under the locks first, an unknown number
    `MemoryLineNotFound`), so a user corrects one fact without rewriting the file. A credential
    in `text` is kept as written and named in the result's `warnings` (at line `number`)."""
    number = _line_number(number)
    _checked_user_text(text)
    if not text.strip():
        raise MemoryInputError("text is empty: forget the line instead")
    if "\n" in text or "\r" in text:
        raise MemoryInputError("text must be one line")
    accept = _if_current(if_match)

    def with_line(current: DigestedRead) -> bytes:
        accept(memory_etag(current.sha256))
        lines = _file_lines(current, number)
        old = lines[number - 1]
        lines[number - 1] = text + old[len(old.rstrip("\r\n")) :]
        data = "".join(lines).encode("utf-8")
        if len(data) > MEMORY_FILE_MAX_BYTES:
            raise MemoryFileTooLarge(f"the result would be over {MEMORY_FILE_MAX_BYTES} bytes")
        return data

    warnings = tuple(replace(found, line=number) for found in write_warnings(text))
    return _rewrite_file(
        user.pk, with_line, kind=MemoryEventKind.USER_EDITED, actor=actor, warnings=warnings
    )


def clear_memory(*, user, actor) -> None:
    """Empty `user`'s MEMORY.md: the prompt then has no memory block, and the next
    `remember_memory` starts from an empty file. Works whatever the file held."""
    _replace_whole_file(
        user.pk, b"", kind=MemoryEventKind.USER_CLEARED, actor=actor, accept=lambda _etag: None
    )


def restore_memory_version(*, user, sha256: str, if_match: str, actor) -> MemoryFile:
    """Put kept version `sha256` back as `user`'s MEMORY.md, only if `if_match` is current.

    The rule of `write_memory_file`: the etag is compared under the locks (stale:
    `MemoryConflict("stale")`, nothing changed). The file it replaces is kept in turn, so a
    restore can be undone too. Unknown, removed or mismatching: `MemoryVersionNotFound`. Like
    the user's edit, never refused for a credential: the result's `warnings` name them.
    """
    accept = _if_current(if_match)
    data = versions.read_memory_version(user=user, sha256=sha256)
    return _replace_whole_file(
        user.pk,
        data,
        kind=MemoryEventKind.USER_RESTORED,
        actor=actor,
        accept=accept,
        warnings=write_warnings(data.decode("utf-8")),
    )


def forget_memory_versions(*, user, actor) -> None:
    """Remove every kept version of `user`'s MEMORY.md, for good; MEMORY.md itself stays.

    Under both memory locks, so no writer keeps a version meanwhile; recorded in the ledger
    (`versions_forgotten`, the file's current hash as before and after) before the files go.
    """
    with _user_write(user.pk) as (workspace, held, _):
        _record_unchanged_file(
            workspace, held, kind=MemoryEventKind.VERSIONS_FORGOTTEN, actor=actor
        )
        versions.forget_kept_versions(workspace)
