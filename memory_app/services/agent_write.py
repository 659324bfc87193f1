"""The agent's memory write: `remember_memory` and `remember_tool_call` (the same write as one
tool call, which with approval on only a user's decision releases), the dry run a user's
decision is checked with (`check_memory_write`), and the credential refusals they share.

The write runs under the per-user advisory lock, the run row lock and lease check, the switch
re-read and the file fence, in that order; kept apart from the user's writes, whose rules (no
run, no approval, credentials kept and warned about) differ.
"""

import hashlib

from django.db import connection, transaction
from django.utils.translation import gettext_noop

from conversations.models import AgentRun
from conversations.runs import ToolRuntimeContext
from conversations.selectors import approvals, stated_messages
from memory_app.authorization import MemoryRunRefused, grant_memory_run, read_memory_state
from memory_app.credentials import repeat_needles, stated_credential_in
from memory_app.errors import (
    USER_INACTIVE,
    MemoryAccessDenied,
    MemoryApprovalRequired,
    MemoryInvisibleText,
    MemorySensitiveContent,
    MemoryWriteError,
    memory_errors,
)
from memory_app.locks import CallerSettings, file_fence, restore_lock_timeout, take_memory_lock
from memory_app.memory_file import MEMORY_FILE_MAX_BYTES
from memory_app.models import MemoryEventKind
from memory_app.services.plan import (
    REPLACED,
    MemoryWriteResult,
    MemoryWriteStatus,
    checked_write_arguments,
    planned_write,
)
from memory_app.services.publish import publish_recorded
from memory_app.workspace import Workspace, WorkspaceError
from memory_app.workspace.paths import MEMORY_RELPATH


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
    status, encoded = planned_write(data, too_large, content, replaces)
    kind = MemoryEventKind.AGENT_REPLACED if status == REPLACED else MemoryEventKind.AGENT_ADDED
    if encoded != data:
        before = hashlib.sha256(data).hexdigest()
        publish_recorded(
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
    decided = approvals.is_released_call(run=run, tool_call_id=tool_call_id)
    workspace = Workspace.for_user(run.user_id)
    if grant.state.write_approval and not decided:
        # A call never put to the user because it would make a credential is refused as such.
        refusal = _never_kept(ctx.uid, content, replaces)
        if refusal is not None:
            raise refusal
        raise MemoryApprovalRequired(gettext_noop("needs the user's approval"))
    turn = stated_messages.turn_message(conversation_id=run.conversation_id)
    refuse_stated_credential(run.user_id, content, turn=turn)
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


def refuse_stated_credential(user_id: int, content: str, *, turn: str | None = None) -> None:
    """`MemorySensitiveContent` when `content` repeats a credential the user stated in one of
    their own recent messages, in any thread ("my debit card PIN is 4821" last week, "Lucky
    number: 4821" now), however the rest is worded; and when `turn`, the message of the turn
    writing, repeats one stated in another of them ("Remember that my lucky number is 4821"):
    what a model saves from such a message may carry the value in other words, as for a
    message that states one. Only messages sharing a piece of the content or of the turn's
    message (`repeat_needles`) are read and looked through."""
    needles = repeat_needles(content) + ([] if turn is None else repeat_needles(turn))
    said = stated_messages.user_messages_containing(
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
    content, replaces = checked_write_arguments(content, replaces)
    workspace = Workspace.for_user(user_id)
    with memory_errors():
        state = read_memory_state(workspace.uid)
        if not state.user_active:
            raise MemoryAccessDenied(USER_INACTIVE)
        if not state.enabled:
            raise MemoryAccessDenied(MEMORY_OFF)
        refuse_stated_credential(workspace.uid, content)
        data, too_large = workspace.read_bounded(MEMORY_RELPATH, MEMORY_FILE_MAX_BYTES)
    status, _ = planned_write(data, too_large, content, replaces)
    return status


def _never_kept(
    uid: str | None, content: object, replaces: object
) -> MemorySensitiveContent | MemoryInvisibleText | None:
    """The refusal `remember_memory(content, replaces)` for user `uid` would get for what it
    would keep, judged on the file as it is now (read without a lock or a database call): a
    credential in the content or on a line the write would produce, or invisible characters.
    None when there is none, or the write would be refused for anything else first."""
    try:
        content, replaces = checked_write_arguments(content, replaces)
        if uid is None:
            return None
        data, too_large = Workspace.for_user(uid).read_bounded(
            MEMORY_RELPATH, MEMORY_FILE_MAX_BYTES
        )
        planned_write(data, too_large, content, replaces)
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
    content, replaces = checked_write_arguments(content, replaces)
    uid = getattr(ctx, "uid", None)
    if not isinstance(uid, str) or not uid:
        raise MemoryAccessDenied(gettext_noop("the run context has no user"))
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
