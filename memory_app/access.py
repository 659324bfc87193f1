"""The one rule "may this run use memory now", for the write path and the lookback tools alike.

A run may use memory only while its trusted context matches a top-level chat or resume run
that its worker holds an unexpired lease on (the run repository's rule, judged by the
database's `clock_timestamp()`), its user exists and is active, and the switch is on.

Two static statements, no ORM compilation: the run row (joined to its thread, locked `FOR NO
KEY UPDATE` on the write path: the lock only fences the lease, and leaves the row's key free
for the ledger's foreign key), then the clock, the user's state and the switch, read after
the row lock is granted so a lease is judged at the moment it is held.
"""

import uuid
from dataclasses import dataclass
from datetime import datetime
from functools import cache

from django.contrib.auth import get_user_model
from django.db import connection

from conversations.models import AgentRun, Conversation
from conversations.runs import (
    RunContextInvalid,
    ToolRuntimeContext,
    parse_context,
    tool_run_refusal,
)
from memory_app.models import UserConfig

__all__ = [
    "MemoryGrant",
    "MemoryRunRefused",
    "MemoryState",
    "authorize_memory_run",
    "grant_memory_run",
    "memory_run_refusal",
    "read_memory_state",
]


class MemoryRunRefused(Exception):
    """The run may not use memory now; `.reason` says why, for people (it holds no secret)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class MemoryState:
    """The database's clock and a user's memory-relevant state, read in one statement."""

    now: datetime
    user_active: bool
    enabled: bool
    write_approval: bool = False  # each memory write waits for the user's decision


@dataclass(frozen=True)
class MemoryGrant:
    """A run that may use memory now, and the state it was judged by."""

    run: AgentRun
    state: MemoryState


@cache
def _run_fields() -> tuple[str, ...]:
    return tuple(field.attname for field in AgentRun._meta.concrete_fields)


@cache
def _run_sql(*, lock: bool) -> str:
    """The run of a `run_id` with its thread's public id; one static statement per mode."""
    columns = ", ".join(f'r."{field.column}"' for field in AgentRun._meta.concrete_fields)
    sql = (
        f'SELECT {columns}, c."thread_id" FROM "{AgentRun._meta.db_table}" r '
        f'JOIN "{Conversation._meta.db_table}" c ON c."id" = r."conversation_id" '
        'WHERE r."run_id" = %s'
    )
    return sql + " FOR NO KEY UPDATE OF r" if lock else sql


@cache
def _state_sql() -> str:
    users = get_user_model()._meta.db_table
    return (
        "SELECT clock_timestamp(), "
        f'COALESCE((SELECT "is_active" FROM "{users}" WHERE "id" = %s), false), '
        f'COALESCE((SELECT "enable_memory" FROM "{UserConfig._meta.db_table}" '
        'WHERE "user_id" = %s), false), '
        f'COALESCE((SELECT "memory_write_approval" FROM "{UserConfig._meta.db_table}" '
        'WHERE "user_id" = %s), false)'
    )


def read_memory_state(user_id: int) -> MemoryState:
    """Clock, user active (a missing user reads as inactive), switch and approval setting, in
    one statement."""
    with connection.cursor() as cursor:
        cursor.execute(_state_sql(), [user_id, user_id, user_id])
        now, user_active, enabled, write_approval = cursor.fetchone()
    return MemoryState(
        now=now, user_active=user_active, enabled=enabled, write_approval=write_approval
    )


def memory_run_refusal(run: AgentRun, worker_id: str | None, state: MemoryState) -> str | None:
    """Why `run`, worked by `worker_id`, may not use memory given `state`; None if it may.

    The run repository's refusal comes first, then the user's, then the switch's.
    """
    refusal = tool_run_refusal(run, worker_id, now=state.now)
    if refusal:
        return refusal
    if not state.user_active:
        return "the user is missing or inactive"
    if not state.enabled:
        return "memory is switched off for this user"
    return None


def _load_run(run_id: uuid.UUID, *, lock: bool) -> tuple[AgentRun, str] | None:
    with connection.cursor() as cursor:
        cursor.execute(_run_sql(lock=lock), [run_id])
        row = cursor.fetchone()
    if row is None:
        return None
    fields = _run_fields()
    return AgentRun.from_db(connection.alias, fields, row[: len(fields)]), row[len(fields)]


def authorize_memory_run(ctx: ToolRuntimeContext, *, lock: bool = False) -> AgentRun:
    """The run behind `ctx` if it may use memory now; else `MemoryRunRefused`.

    As `grant_memory_run`, without the state.
    """
    return grant_memory_run(ctx, lock=lock).run


def grant_memory_run(ctx: ToolRuntimeContext, *, lock: bool = False) -> MemoryGrant:
    """The run behind `ctx` and the state it was judged by, if it may use memory now; else
    `MemoryRunRefused`.

    `lock=True` is for the write path, inside its transaction after the advisory lock: the run
    row stays locked until that transaction ends, so the lease cannot change under the write.
    `lock=False` reads without locking (lookback tools, the middleware): it neither waits on
    nor blocks a write or a lease renewal holding the row.
    """
    if lock and not connection.in_atomic_block:
        raise RuntimeError("authorize_memory_run(lock=True) must run inside transaction.atomic()")
    try:
        uid, run_uuid = parse_context(ctx)
    except RunContextInvalid as exc:
        raise MemoryRunRefused(str(exc)) from exc
    loaded = _load_run(run_uuid, lock=lock)
    if loaded is None or loaded[0].user_id != uid:
        raise MemoryRunRefused("no such run for this user")
    run, thread_id = loaded
    if thread_id != ctx.thread_id or run.request_id != ctx.request_id:
        raise MemoryRunRefused("run belongs to another thread or request")
    state = read_memory_state(uid)
    refusal = memory_run_refusal(run, ctx.worker_id, state)
    if refusal:
        raise MemoryRunRefused(refusal)
    return MemoryGrant(run=run, state=state)
