"""The steps every writer of MEMORY.md shares: the user-side write's transaction (advisory
lock, live user, flock), the publish with its ledger row sent just before the rename (the
replaced version kept, the kept ones pruned), the ledger row of a change that leaves the file
alone, and the `memory_changed` log line.

One place, so the agent's write, the user's writes and the switches cannot differ in the
order that makes a change durable and recorded.
"""

import hashlib
import logging
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial

from django.db import transaction

from conversations.models import AgentRun
from memory_app import versions
from memory_app.authorization import MemoryState, read_memory_state
from memory_app.errors import USER_INACTIVE, MemoryAccessDenied, memory_errors
from memory_app.locks import (
    CallerSettings,
    file_fence,
    record_event,
    restore_lock_timeout,
    take_memory_lock,
)
from memory_app.workspace import Workspace
from memory_app.workspace.paths import MEMORY_RELPATH

logger = logging.getLogger("yuxi.memory")


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


def publish_recorded(
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


@contextmanager
def user_write(user_id: int) -> Iterator[tuple[Workspace, CallerSettings, MemoryState]]:
    """A user-side write's transaction: advisory lock, live user, flock. Yields the user's
    settings as read under the lock."""
    workspace = Workspace.for_user(user_id)
    with memory_errors(), transaction.atomic():
        held = take_memory_lock(str(workspace.uid), owns_transaction=False)
        restore_lock_timeout(held)
        state = read_memory_state(workspace.uid)
        if not state.user_active:
            # Checked before the flock, whose file would recreate an erased workspace.
            raise MemoryAccessDenied(USER_INACTIVE)
        with file_fence(workspace):
            yield workspace, held, state


def actor_id_of(actor) -> int | None:
    return None if actor is None else actor.pk


def record_unchanged_file(workspace: Workspace, held: CallerSettings, *, kind: str, actor) -> None:
    """The ledger row of a change that leaves MEMORY.md alone: its current hash before and after."""
    read = workspace.read_digested(MEMORY_RELPATH, 0)
    fields = {
        "user_id": workspace.uid,
        "kind": kind,
        "actor_id": actor_id_of(actor),
        "before": read.sha256,
        "after": read.sha256,
    }
    record_event(held, size_bytes=read.size_bytes, run_id=None, **fields)
    _log_change(run=None, **fields)
