"""The one run-for-tool check: the run behind a tool's context, every field of the context
matched against its row (`run_matching_context`), whether it may use memory tools now
(`tool_run_refusal`), and the lock a memory write holds on it (`lock_run_for_tool`)."""

from datetime import datetime
from functools import cache

from django.db import connection

from conversations.models import AgentRun, Conversation
from conversations.runs.context import ToolRuntimeContext, parse_context
from conversations.runs.errors import LeaseNotHeld, RunContextInvalid
from conversations.runs.leases import check_lease_owner
from conversations.runs.rows import RUN_TABLE, run_fields, run_from_row
from conversations.utils.connections import prepared_cursor
from conversations.utils.prepared import columns_of

# The runs that may use memory tools (top-level ones only: `tool_run_refusal`).
TOOL_RUN_TYPES = (AgentRun.RunType.CHAT, AgentRun.RunType.RESUME)


@cache
def _run_for_tool_sql(*, lock: bool, extra_columns: str = "") -> str:
    """The run of a `run_id` with its thread's public id, then `extra_columns`; one static
    statement per mode and caller.

    Locked `FOR NO KEY UPDATE`: the lock only fences the lease, and leaves the row's key free
    for the foreign keys that point at it (the memory ledger's)."""
    sql = (
        f'SELECT {columns_of(AgentRun, table="r")}, c."thread_id"{extra_columns} '
        f'FROM "{RUN_TABLE}" r '
        f'JOIN "{Conversation._meta.db_table}" c ON c."id" = r."conversation_id" '
        'WHERE r."run_id" = %s'
    )
    return sql + " FOR NO KEY UPDATE OF r" if lock else sql


def run_matching_context(ctx: ToolRuntimeContext, *, lock: bool) -> AgentRun:
    """The run behind `ctx` once every field of `ctx` matches it (user, thread, request); its
    lease is not judged here (`tool_run_refusal`). One static statement, no ORM compilation.

    `lock=True` keeps the row locked until the caller's transaction ends, so the lease cannot
    change under the caller. Raises `RunContextInvalid`.
    """
    return run_matching_context_reading(ctx, lock=lock)[0]


def run_matching_context_reading(
    ctx: ToolRuntimeContext, *, lock: bool, extra_columns: str = ""
) -> tuple[AgentRun, tuple]:
    """`run_matching_context`, plus the values of `extra_columns` read in the same statement.

    `extra_columns` is static SQL (", col, ..."; the run row is `r`) a caller needs beside the
    run on every check, so the check costs it no second round trip. Values read for a run
    that does not match `ctx` are never returned.
    """
    uid, run_uuid = parse_context(ctx)
    with prepared_cursor() as cursor:
        cursor.execute(_run_for_tool_sql(lock=lock, extra_columns=extra_columns), [run_uuid])
        row = cursor.fetchone()
    fields = run_fields()
    if row is None or row[fields.index("user_id")] != uid:
        raise RunContextInvalid("no such run for this user")
    run = run_from_row(row[: len(fields)])
    if row[len(fields)] != ctx.thread_id or run.request_id != ctx.request_id:
        raise RunContextInvalid("run belongs to another thread or request")
    return run, tuple(row[len(fields) + 1 :])


def lock_run_for_tool(ctx: ToolRuntimeContext) -> AgentRun:
    """Lock and return the run behind a memory write, or refuse it.

    Must run inside the caller's transaction (after any advisory lock): the row stays locked
    until that transaction ends, so the lease cannot change under the caller.
    """
    if not connection.in_atomic_block:
        raise RuntimeError("lock_run_for_tool must be called inside transaction.atomic()")
    run = run_matching_context(ctx, lock=True)
    refusal = tool_run_refusal(run, ctx.worker_id)
    if refusal:
        raise RunContextInvalid(refusal)
    return run


def tool_run_refusal(
    run: AgentRun, worker_id: str | None, *, now: datetime | None = None
) -> str | None:
    """Why `run`, worked by `worker_id`, may not use memory tools now; None if it may.

    Read-only: previews call it on an unlocked row; `lock_run_for_tool` on a locked one.
    `now` as for `check_lease_owner`.
    """
    if run.run_type not in TOOL_RUN_TYPES or run.parent_run_id is not None:
        return "only a top-level chat or resume run may use memory tools"
    try:
        check_lease_owner(run, worker_id, now=now)
    except LeaseNotHeld as exc:
        return str(exc)
    return None
