"""AgentRun repository: the owner of trusted run identity and worker leases.

Every lease decision is judged by PostgreSQL's `clock_timestamp()` at the moment of the
check, never by the caller's clock and never by `now()`, which is frozen at transaction start
and goes stale while a call waits on a lock.
"""

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import QuerySet

from conversations.models import AgentRun, Conversation
from yuxi_site.utils.db_functions import ClockTimestamp
from yuxi_site.utils.ids import parse_uid

TOOL_RUN_TYPES = (AgentRun.RunType.CHAT, AgentRun.RunType.RESUME)


class RunError(Exception):
    """Base of every refusal by the run repository."""


class RunNotFound(RunError):
    """No run with that id (or none that the caller may act on)."""


class LeaseNotHeld(RunError):
    """The caller is not the current owner of an unexpired lease on a running run."""


class RunContextInvalid(RunError):
    """A tool's runtime context does not match a run that may use memory tools."""


@dataclass(frozen=True)
class ToolRuntimeContext:
    """Trusted identity of one agent run, written by the Chat service, never by the model.

    Constructing one validates nothing: `lock_run_for_tool` checks it at call time.
    """

    uid: str
    thread_id: str
    run_id: str
    request_id: str
    worker_id: str


def db_clock() -> datetime:
    """The database's current time, read now."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        return cursor.fetchone()[0]


def _lease_length(lease_seconds: int | None) -> timedelta:
    seconds = settings.AGENT_RUN_LEASE_SECONDS if lease_seconds is None else lease_seconds
    if seconds <= 0:
        raise ValueError("lease_seconds must be positive")
    return timedelta(seconds=seconds)


def _require_worker_id(worker_id: str) -> None:
    if not isinstance(worker_id, str) or not worker_id:
        raise ValueError("worker_id must be a non-empty string")


def create_run(
    *,
    user_id: int,
    conversation: Conversation,
    request_id: str,
    run_type: str = AgentRun.RunType.CHAT,
    parent_run: AgentRun | None = None,
) -> AgentRun:
    """Record a pending run for a worker to claim."""
    if not request_id:
        raise ValueError("request_id must be a non-empty string")
    if conversation.user_id != int(user_id):
        raise ValueError("the conversation belongs to another user")
    return AgentRun.objects.create(
        user_id=user_id,
        conversation=conversation,
        request_id=request_id,
        run_type=run_type,
        parent_run=parent_run,
    )


def claim_run(
    *,
    worker_id: str,
    run_id: uuid.UUID | str | None = None,
    lease_seconds: int | None = None,
) -> AgentRun | None:
    """Claim the given (or the oldest) pending run for `worker_id`; None if there is none.

    `SKIP LOCKED` lets racing workers pass over a row another worker is claiming, so exactly
    one of them gets it.
    """
    _require_worker_id(worker_id)
    lease = _lease_length(lease_seconds)
    with transaction.atomic():
        pending = AgentRun.objects.select_for_update(skip_locked=True).filter(
            status=AgentRun.Status.PENDING
        )
        if run_id is not None:
            pending = pending.filter(run_id=run_id)
        run = pending.order_by("created_at", "id").first()
        if run is None:
            return None
        AgentRun.objects.filter(pk=run.pk).update(
            status=AgentRun.Status.RUNNING,
            worker_id=worker_id,
            started_at=ClockTimestamp(),
            lease_expires_at=ClockTimestamp() + lease,
        )
        run.refresh_from_db()
    return run


def check_lease_owner(run: AgentRun, worker_id: str | None, *, now: datetime | None = None) -> None:
    """Refuse unless `worker_id` owns an unexpired lease on the running `run`.

    The caller must hold the run row locked, so the answer stays true until it commits.
    `now` is a `clock_timestamp()` the caller read after that lock (else it is read here).
    """
    if run.status != AgentRun.Status.RUNNING:
        raise LeaseNotHeld(f"run is {run.status}, not running")
    if not worker_id or run.worker_id != worker_id:
        raise LeaseNotHeld("run is leased to another worker")
    if run.lease_expires_at is None or run.lease_expires_at <= (now or db_clock()):
        raise LeaseNotHeld("run lease has expired")


def _lock_run(run_id: uuid.UUID | str) -> AgentRun:
    try:
        return AgentRun.objects.select_for_update().get(run_id=uuid.UUID(str(run_id)))
    except (AgentRun.DoesNotExist, ValueError) as exc:
        raise RunNotFound("no such run") from exc


def renew_lease(
    *, run_id: uuid.UUID | str, worker_id: str, lease_seconds: int | None = None
) -> AgentRun:
    """Extend the lease from the database's current time; only its owner, only before expiry."""
    lease = _lease_length(lease_seconds)
    with transaction.atomic():
        run = _lock_run(run_id)
        check_lease_owner(run, worker_id)
        AgentRun.objects.filter(pk=run.pk).update(lease_expires_at=ClockTimestamp() + lease)
        run.refresh_from_db()
    return run


def finish_run(*, run_id: uuid.UUID | str, worker_id: str, status: str) -> AgentRun:
    """Move an owned, unexpired run to a terminal status and clear its lease."""
    if status not in AgentRun.TERMINAL_STATUSES:
        raise ValueError(f"{status!r} is not a terminal run status")
    with transaction.atomic():
        run = _lock_run(run_id)
        check_lease_owner(run, worker_id)
        AgentRun.objects.filter(pk=run.pk).update(
            status=status,
            finished_at=ClockTimestamp(),
            worker_id=None,
            lease_expires_at=None,
        )
        run.refresh_from_db()
    return run


def fail_expired_runs() -> int:
    """Mark running runs whose lease has lapsed (their worker died) as failed."""
    return AgentRun.objects.filter(
        status=AgentRun.Status.RUNNING, lease_expires_at__lte=ClockTimestamp()
    ).update(
        status=AgentRun.Status.FAILED,
        finished_at=ClockTimestamp(),
        worker_id=None,
        lease_expires_at=None,
    )


def _run_for_tool(ctx: ToolRuntimeContext, candidates: QuerySet) -> AgentRun:
    """The run of `ctx` among `candidates`, refused unless every field of `ctx` matches it."""
    for field in ("uid", "thread_id", "run_id", "request_id", "worker_id"):
        value = getattr(ctx, field, None)
        if not isinstance(value, str) or not value:
            raise RunContextInvalid(f"{field} is missing")
    uid = parse_uid(ctx.uid)
    if uid is None:
        raise RunContextInvalid("uid is malformed")
    try:
        run_uuid = uuid.UUID(ctx.run_id)
    except ValueError as exc:
        raise RunContextInvalid("run_id is malformed") from exc
    run = candidates.select_related("conversation").filter(run_id=run_uuid).first()
    if run is None or run.user_id != uid:
        raise RunContextInvalid("no such run for this user")
    if run.conversation.thread_id != ctx.thread_id or run.request_id != ctx.request_id:
        raise RunContextInvalid("run belongs to another thread or request")
    refusal = tool_run_refusal(run, ctx.worker_id)
    if refusal:
        raise RunContextInvalid(refusal)
    return run


def lock_run_for_tool(ctx: ToolRuntimeContext) -> AgentRun:
    """Lock and return the run behind a memory write, or refuse it.

    Must run inside the caller's transaction (after any advisory lock): the row stays locked
    `FOR UPDATE` until that transaction ends, so the lease cannot change under the caller.
    """
    if not connection.in_atomic_block:
        raise RuntimeError("lock_run_for_tool must be called inside transaction.atomic()")
    return _run_for_tool(ctx, AgentRun.objects.select_for_update(of=("self",)))


def check_run_for_tool(ctx: ToolRuntimeContext) -> AgentRun:
    """The run behind a read-only tool call, checked as `lock_run_for_tool` does, not locked.

    A read needs no fence against a lease change after the check, so it neither waits on nor
    blocks a memory write or a lease renewal holding the row.
    """
    return _run_for_tool(ctx, AgentRun.objects.all())


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
