"""A worker's lease on a run: its length, the one "lease valid" rule (in Python and as an SQL
fragment), the lease-owner check and the renewal.

Every lease decision is judged by PostgreSQL's `clock_timestamp()` at the moment of the
check, never by the caller's clock and never by `now()`, which is frozen at transaction start
and goes stale while a call waits on a lock.
"""

import uuid
from datetime import datetime, timedelta

from django.db import connection, transaction

from conversations.conf import setting
from conversations.models import AgentRun
from conversations.runs.errors import LeaseNotHeld, RunNotFound
from conversations.utils.db_functions import ClockTimestamp

# A run whose lease still holds, judged by the database clock at the moment of the statement:
# the one spelling of "lease valid" in the repository's SQL.
LEASE_VALID_SQL = f"status = '{AgentRun.Status.RUNNING}' AND lease_expires_at > clock_timestamp()"


def db_clock() -> datetime:
    """The database's current time, read now."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        return cursor.fetchone()[0]


def lease_length(lease_seconds: int | None) -> timedelta:
    """A lease of `lease_seconds`, or of `AGENT_RUN_LEASE_SECONDS` when None."""
    seconds = setting("AGENT_RUN_LEASE_SECONDS") if lease_seconds is None else lease_seconds
    if seconds <= 0:
        raise ValueError("lease_seconds must be positive")
    return timedelta(seconds=seconds)


def require_worker_id(worker_id: str) -> None:
    """Refuse a worker id a lease could not name."""
    if not isinstance(worker_id, str) or not worker_id:
        raise ValueError("worker_id must be a non-empty string")


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
    lease = lease_length(lease_seconds)
    with transaction.atomic():
        run = _lock_run(run_id)
        check_lease_owner(run, worker_id)
        AgentRun.objects.filter(pk=run.pk).update(lease_expires_at=ClockTimestamp() + lease)
        run.refresh_from_db()
    return run
