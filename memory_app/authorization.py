"""Authorization of a run's memory use: the one rule "may this run use memory now", for the
write path, the lookback tools, the middleware and the run page alike.

A run may use memory only while its trusted context matches a top-level chat or resume run
that its worker holds an unexpired lease on (the run repository's rule, `run_matching_context`
and `tool_run_refusal`, judged by the database's `clock_timestamp()`), its user exists and is
active, and the switch is on.

Static statements, no ORM compilation. Unlocked (the middleware at every run start, the
lookback tools, the approval check): one statement, the run row (the run repository's, joined
to its thread) with the clock, the user's state and the switch beside it, so each check still
reads the switch anew, in one round trip. Locked (the write path): two, the
run row locked `FOR NO KEY UPDATE`, then the clock, the user's state and the switch, read after
the row lock is granted so a lease is judged at the moment it is held (a clock read in the
locking statement could predate a wait on the lock).
"""

from dataclasses import dataclass
from datetime import datetime
from functools import cache

from django.db import connection

from conversations.models import AgentRun
from conversations.runs import ToolRuntimeContext
from conversations.runs.errors import RunContextInvalid
from conversations.runs.tool_lock import (
    run_matching_context,
    run_matching_context_reading,
    tool_run_refusal,
)
from conversations.users import active_user_sql
from memory_app.models import UserConfig


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
def _state_columns(user: str) -> str:
    """The clock, user active, switch and approval setting as select-list SQL, for the user
    `user` names (a placeholder, or the run row's column)."""
    return (
        "clock_timestamp(), "
        f"{active_user_sql(user)}, "
        f'COALESCE((SELECT "enable_memory" FROM "{UserConfig._meta.db_table}" '
        f'WHERE "user_id" = {user}), false), '
        f'COALESCE((SELECT "memory_write_approval" FROM "{UserConfig._meta.db_table}" '
        f'WHERE "user_id" = {user}), false)'
    )


def _memory_state(row: tuple) -> MemoryState:
    now, user_active, enabled, write_approval = row
    return MemoryState(
        now=now, user_active=user_active, enabled=enabled, write_approval=write_approval
    )


def read_memory_state(user_id: int) -> MemoryState:
    """Clock, user active (a missing user reads as inactive), switch and approval setting, in
    one statement."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT " + _state_columns("%s"), [user_id] * 4)
        return _memory_state(cursor.fetchone())


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
        if lock:
            run = run_matching_context(ctx, lock=True)
        else:
            run, state_row = run_matching_context_reading(
                ctx, lock=False, extra_columns=", " + _state_columns('r."user_id"')
            )
    except RunContextInvalid as exc:
        raise MemoryRunRefused(str(exc)) from exc
    state = read_memory_state(run.user_id) if lock else _memory_state(state_row)
    refusal = memory_run_refusal(run, ctx.worker_id, state)
    if refusal:
        raise MemoryRunRefused(refusal)
    return MemoryGrant(run=run, state=state)
