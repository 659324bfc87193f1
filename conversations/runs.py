"""AgentRun repository: the owner of trusted run identity and worker leases: creating,
claiming, renewing and finishing runs, the one run-for-tool check, failing expired runs and a
user's runs, and the process's lease keeper.

Every lease decision is judged by PostgreSQL's `clock_timestamp()` at the moment of the
check, never by the caller's clock and never by `now()`, which is frozen at transaction start
and goes stale while a call waits on a lock.
"""

import logging
import os
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache

import psycopg
from django.db import DatabaseError, connection, transaction
from django.db.models.expressions import CombinedExpression

from conversations import checkpoints, services
from conversations.conf import setting
from conversations.models import AgentRun, Conversation, Message
from conversations.selectors.approvals import expired_interrupts
from conversations.utils.connections import direct_connection, prepared_cursor
from conversations.utils.db_functions import ClockTimestamp
from conversations.utils.ids import parse_uid
from conversations.utils.prepared import columns_of, instance_from_row

__all__ = [
    "LeaseKeeper",
    "LeaseNotHeld",
    "RunContextInvalid",
    "RunError",
    "RunNotFound",
    "TOOL_RUN_TYPES",
    "ToolRuntimeContext",
    "check_lease_owner",
    "checkpoint_key",
    "claim_run",
    "create_run",
    "db_clock",
    "fail_expired_runs",
    "fail_user_runs",
    "finish_run",
    "lease_keeper",
    "lock_run_for_tool",
    "parse_context",
    "renew_lease",
    "run_matching_context",
    "run_matching_context_reading",
    "start_run",
    "start_run_with_messages",
    "tool_run_refusal",
]

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
    seconds = setting("AGENT_RUN_LEASE_SECONDS") if lease_seconds is None else lease_seconds
    if seconds <= 0:
        raise ValueError("lease_seconds must be positive")
    return timedelta(seconds=seconds)


def _require_worker_id(worker_id: str) -> None:
    if not isinstance(worker_id, str) or not worker_id:
        raise ValueError("worker_id must be a non-empty string")


def _check_new_run(*, user_id: int, conversation: Conversation, request_id: str) -> None:
    """The checks every new run passes, pending or already claimed."""
    if not request_id:
        raise ValueError("request_id must be a non-empty string")
    if conversation.user_id != int(user_id):
        raise ValueError("the conversation belongs to another user")


def _insert_run(
    *, user_id: int, conversation: Conversation, request_id: str, **fields: object
) -> AgentRun:
    """Insert a pending run after the checks every new run passes."""
    _check_new_run(user_id=user_id, conversation=conversation, request_id=request_id)
    return AgentRun.objects.create(
        user_id=user_id, conversation=conversation, request_id=request_id, **fields
    )


_TABLE = AgentRun._meta.db_table


@cache
def _run_fields() -> tuple[str, ...]:
    return tuple(field.attname for field in AgentRun._meta.concrete_fields)


def _run_from_row(row: Sequence[object]) -> AgentRun:
    return instance_from_row(AgentRun, row, using=connection.alias)


def create_run(
    *,
    user_id: int,
    conversation: Conversation,
    request_id: str,
    run_type: str = AgentRun.RunType.CHAT,
    parent_run: AgentRun | None = None,
) -> AgentRun:
    """Record a pending run for a worker to claim."""
    return _insert_run(
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

    A run pending longer than `AGENT_RUN_PENDING_TIMEOUT_SECONDS` is stale (its request was
    abandoned long ago) and is never handed out; `fail_expired_runs` fails it. `SKIP LOCKED`
    lets racing workers pass over a row another worker is claiming, so exactly one gets it.
    """
    _require_worker_id(worker_id)
    lease = _lease_length(lease_seconds)
    with transaction.atomic():
        pending = AgentRun.objects.select_for_update(skip_locked=True).filter(
            status=AgentRun.Status.PENDING, created_at__gt=_pending_cutoff()
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


def start_run(
    *,
    user_id: int,
    conversation: Conversation,
    request_id: str,
    worker_id: str,
    run_type: str = AgentRun.RunType.CHAT,
    parent_run: AgentRun | None = None,
    resumes: AgentRun | None = None,
    lease_seconds: int | None = None,
) -> AgentRun:
    """Record a run already claimed by `worker_id` (one INSERT): create and claim in one step.

    For a worker that serves the run itself (the Chat service, `agent_run`), nothing is pending
    in between for another worker to claim. A `resume` run names the interrupted run it
    `resumes` (unique: a second one for the same run raises `IntegrityError`).
    """
    run, _ = start_run_with_messages(
        user_id=user_id,
        conversation=conversation,
        request_id=request_id,
        worker_id=worker_id,
        run_type=run_type,
        parent_run=parent_run,
        resumes=resumes,
        lease_seconds=lease_seconds,
    )
    return run


_STARTED_CTE = f"""
    started AS (
        INSERT INTO {_TABLE} (
            run_id, user_id, conversation_id, request_id, run_type, parent_run_id, resumes_id,
            status, worker_id, lease_expires_at, started_at
        )
        VALUES (
            %s, %s, %s, %s, %s, %s, %s,
            '{AgentRun.Status.RUNNING}', %s, clock_timestamp() + %s, clock_timestamp()
        )
        RETURNING {columns_of(AgentRun)}
    )
"""


def start_run_with_messages(
    *,
    user_id: int,
    conversation: Conversation,
    request_id: str,
    worker_id: str,
    run_type: str = AgentRun.RunType.CHAT,
    parent_run: AgentRun | None = None,
    resumes: AgentRun | None = None,
    lease_seconds: int | None = None,
    messages: Sequence[services.RunMessage] = (),
) -> tuple[AgentRun, list[Message]]:
    """`start_run`, and the messages that open the run (a chat turn's user message) stored
    with it, tagged with its id: one statement, so both or neither are stored (it needs no
    transaction around it)."""
    _require_worker_id(worker_id)
    _check_new_run(user_id=user_id, conversation=conversation, request_id=request_id)
    run_id = uuid.uuid4()
    stored = services.recording(conversation=conversation, run_id=str(run_id), messages=messages)
    params = [
        run_id,
        int(user_id),
        conversation.pk,
        request_id,
        run_type,
        parent_run.pk if parent_run is not None else None,
        resumes.pk if resumes is not None else None,
        worker_id,
        _lease_length(lease_seconds),
    ]
    with prepared_cursor() as cursor:
        cursor.execute(
            f"WITH {_STARTED_CTE}, {stored.sql} "
            f"SELECT started.*, {services.RECORDED_COLUMNS} FROM started",
            [*params, *stored.params],
        )
        *row, ids, created = cursor.fetchone()
    run = _run_from_row(row)
    run.conversation = conversation
    return run, stored.rows(ids, created)


# A run whose lease still holds, judged by the database clock at the moment of the statement:
# the one spelling of "lease valid" in this repository's SQL.
_LEASE_VALID_SQL = f"status = '{AgentRun.Status.RUNNING}' AND lease_expires_at > clock_timestamp()"

_FINISHED_CTE = f"""
    finished AS (
        UPDATE {_TABLE}
        SET status = %s, error = %s, finished_at = clock_timestamp(), worker_id = NULL,
            lease_expires_at = NULL
        WHERE run_id = %s AND worker_id = %s AND {_LEASE_VALID_SQL}
        RETURNING {columns_of(AgentRun)}
    )
"""
# With the thread given: the thread marked updated, never before the messages just stored.
_TOUCH_SQL = f"""
    touched AS (
        UPDATE {Conversation._meta.db_table}
        SET updated_at = GREATEST(clock_timestamp(), (SELECT max(created_at) FROM recorded))
        WHERE id = %s AND EXISTS (SELECT FROM finished)
    )
"""


def finish_run(
    *,
    run_id: uuid.UUID | str,
    worker_id: str,
    status: str,
    error: str = "",
    conversation: Conversation | None = None,
    messages: Sequence[services.RunMessage] = (),
) -> AgentRun:
    """Move an owned, unexpired run to a terminal status and clear its lease; with its
    `conversation`, also store the `messages` the run produced (tagged with its id) and mark
    the thread updated.

    One statement: the lease check and the changes cannot be separated by a renewal or a
    reaper, and a run not finished stores nothing. `error` says why a run failed (for staff;
    never a secret).
    """
    if status not in AgentRun.TERMINAL_STATUSES:
        raise ValueError(f"{status!r} is not a terminal run status")
    if messages and conversation is None:
        raise ValueError("messages are stored only with their conversation")
    try:
        run_uuid = uuid.UUID(str(run_id))
    except ValueError as exc:
        raise RunNotFound("no such run") from exc
    ctes, params = [_FINISHED_CTE], [status, error, run_uuid, worker_id or ""]
    if conversation is not None:
        stored = services.recording(
            conversation=conversation,
            run_id=str(run_uuid),
            messages=messages,
            guard="EXISTS (SELECT FROM finished)",
        )
        ctes += [stored.sql, _TOUCH_SQL]
        params += [*stored.params, conversation.pk]
    with prepared_cursor() as cursor:
        cursor.execute(f"WITH {', '.join(ctes)} SELECT * FROM finished", params)
        finished = cursor.fetchone()
    if finished is not None:
        return _run_from_row(finished)
    # Not finished: say why (one more read, only on this refusal path).
    run = AgentRun.objects.filter(run_id=run_uuid).first()
    if run is None:
        raise RunNotFound("no such run")
    check_lease_owner(run, worker_id)
    raise LeaseNotHeld("run lease has expired")


def _pending_cutoff() -> CombinedExpression:
    """Runs created at or before this database time have been pending too long."""
    seconds = setting("AGENT_RUN_PENDING_TIMEOUT_SECONDS")
    if seconds <= 0:
        raise ValueError("AGENT_RUN_PENDING_TIMEOUT_SECONDS must be positive")
    return ClockTimestamp() - timedelta(seconds=seconds)


# `AgentRun.error` of a run failed by `fail_expired_runs`.
EXPIRED_LEASE_ERROR = "worker lease expired: the worker stopped renewing it"
STALE_PENDING_ERROR = "pending too long: no worker claimed the run"


def checkpoint_key(run: AgentRun) -> str:
    """The key of the checkpoints of `run`'s turn: the `run_id` of the run that started it (a
    resume run, interrupted again, keeps the key of the run it resumes)."""
    while run.resumes_id is not None:
        run = AgentRun.objects.only("run_id", "resumes_id").get(pk=run.resumes_id)
    return str(run.run_id)


# `AgentRun.error` of the resume run that declines an approval nobody decided in time.
EXPIRED_APPROVAL_ERROR = "approval expired: the user did not decide in time"


def _decline_expired_approvals() -> int:
    """Decline every approval left undecided longer than `MEMORY_APPROVAL_TTL_SECONDS`."""
    expired = expired_interrupts().select_related("conversation")
    return sum(
        services.decline_approval(run=run, key=checkpoint_key(run), error=EXPIRED_APPROVAL_ERROR)
        for run in expired.order_by("finished_at", "id")
    )


def fail_expired_runs() -> int:
    """Fail running runs whose lease lapsed (their worker died) and runs left pending longer
    than `AGENT_RUN_PENDING_TIMEOUT_SECONDS` (a database blip or a worker death between create
    and claim), and decline approvals older than `MEMORY_APPROVAL_TTL_SECONDS`; the
    checkpoints of those turns go with them. How many. Run it periodically."""
    declined = _decline_expired_approvals()
    with transaction.atomic():
        lapsed = list(
            AgentRun.objects.select_for_update()
            .filter(status=AgentRun.Status.RUNNING, lease_expires_at__lte=ClockTimestamp())
            .only("id", "run_id", "resumes_id")
        )
        expired = AgentRun.objects.filter(
            pk__in=[run.pk for run in lapsed], lease_expires_at__lte=ClockTimestamp()
        ).update(
            status=AgentRun.Status.FAILED,
            finished_at=ClockTimestamp(),
            worker_id=None,
            lease_expires_at=None,
            error=EXPIRED_LEASE_ERROR,
        )
        # A dead turn is never resumed (a resume's decision is spent): its checkpoints go.
        checkpoints.delete_checkpoints([checkpoint_key(run) for run in lapsed])
        stale = AgentRun.objects.filter(
            status=AgentRun.Status.PENDING, created_at__lte=_pending_cutoff()
        ).update(
            status=AgentRun.Status.FAILED,
            finished_at=ClockTimestamp(),
            error=STALE_PENDING_ERROR,
        )
    return expired + stale + declined


def fail_user_runs(*, user_id: int, error: str) -> int:
    """Fail every pending or running run of `user_id` with `error`, leases cleared, in one
    UPDATE; how many. Their workers' next lease check then refuses them."""
    return AgentRun.objects.filter(
        status__in=(AgentRun.Status.PENDING, AgentRun.Status.RUNNING), user_id=user_id
    ).update(
        status=AgentRun.Status.FAILED,
        error=error,
        finished_at=ClockTimestamp(),
        worker_id=None,
        lease_expires_at=None,
    )


_CONTEXT_FIELDS = ("uid", "thread_id", "run_id", "request_id", "worker_id")


def parse_context(ctx: ToolRuntimeContext) -> tuple[int, uuid.UUID]:
    """The user id and run id of `ctx`, once every field is a non-empty string and both parse.

    The first check of every tool's trust in its context; `RunContextInvalid` says which field
    failed (its reason names no value).
    """
    for field in _CONTEXT_FIELDS:
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
    return uid, run_uuid


@cache
def _run_for_tool_sql(*, lock: bool, extra_columns: str = "") -> str:
    """The run of a `run_id` with its thread's public id, then `extra_columns`; one static
    statement per mode and caller.

    Locked `FOR NO KEY UPDATE`: the lock only fences the lease, and leaves the row's key free
    for the foreign keys that point at it (the memory ledger's)."""
    sql = (
        f'SELECT {columns_of(AgentRun, table="r")}, c."thread_id"{extra_columns} FROM "{_TABLE}" r '
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
    fields = _run_fields()
    if row is None or row[fields.index("user_id")] != uid:
        raise RunContextInvalid("no such run for this user")
    run = _run_from_row(row[: len(fields)])
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


# --- the process's lease keeper ------------------------------------------------------------

_HELD = "(run_id, worker_id) IN (SELECT * FROM unnest(%s::uuid[], %s::text[]))"
# Renews every run the process holds in one statement. A row a tool holds locked is skipped
# (busy), never waited on: the keeper must not stall behind a memory write.
_RENEW_SQL = f"""
    UPDATE {_TABLE} SET lease_expires_at = clock_timestamp() + %s * interval '1 second'
    WHERE id IN (
        SELECT id FROM {_TABLE} WHERE {_HELD} AND {_LEASE_VALID_SQL}
        FOR NO KEY UPDATE SKIP LOCKED
    )
    RETURNING run_id::text
"""
# Of the runs not renewed, those whose lease still holds: skipped because busy, retried.
_STILL_HELD_SQL = f"SELECT run_id::text FROM {_TABLE} WHERE {_HELD} AND {_LEASE_VALID_SQL}"

keeper_logger = logging.getLogger("yuxi.runs")
# How many given-up runs a process remembers as lost (their leases lapse within a minute).
LOST_RUNS_REMEMBERED = 10000
# Longest the keeper sleeps before looking at the clock and the lease setting again.
KEEPER_SLICE_SECONDS = 1.0


class LeaseKeeper:
    """One background thread per process renewing the leases of every run the process holds.

    Renewal is one statement per beat (a third of `AGENT_RUN_LEASE_SECONDS`) over the
    keeper's own connection, whatever the number of runs; the connection is closed whenever
    the process holds no run. A run whose row is gone, finished, taken over or expired has
    lost its lease: its `lease_lost` event is set and it is renewed no more.
    """

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._lock = threading.Lock()
        self._runs: dict[str, tuple[str, threading.Event]] = {}
        # Runs given up after losing their lease, oldest first (a dict as an ordered set).
        self._lost: dict[str, None] = {}
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._conn: psycopg.Connection | None = None
        # Held while the connection is in use or being closed.
        self._conn_lock = threading.Lock()

    def register(self, *, run_id: str, worker_id: str) -> threading.Event:
        """Keep `run_id`'s lease alive from now on; the event is set if the lease is lost."""
        lost = threading.Event()
        with self._lock:
            self._runs[str(run_id)] = (worker_id, lost)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="lease-keeper", daemon=True)
                self._thread.start()
        return lost

    def unregister(self, run_id: str) -> None:
        """Stop renewing `run_id` (its owner finished or abandoned it); the last one out closes
        the keeper's connection, so an idle process holds none. A lost run stays known as lost,
        so its tools keep refusing while its stale lease runs out in the database."""
        with self._lock:
            entry = self._runs.pop(str(run_id), None)
            if entry is not None and entry[1].is_set():
                self._lost[str(run_id)] = None
                while len(self._lost) > LOST_RUNS_REMEMBERED:
                    del self._lost[next(iter(self._lost))]
            idle = not self._runs
        if idle:
            with self._conn_lock:
                self._close()

    def lease_lost(self, run_id: str) -> bool:
        """Whether this process held `run_id` and learned that its lease is lost."""
        with self._lock:
            held = self._runs.get(str(run_id))
            return str(run_id) in self._lost or (held is not None and held[1].is_set())

    def lost_event(self, run_id: str) -> threading.Event | None:
        """The event set when `run_id`'s lease is lost; None when the process does not hold it."""
        with self._lock:
            held = self._runs.get(str(run_id))
        return held[1] if held is not None else None

    def _loop(self) -> None:
        last_beat = time.monotonic()
        while True:
            # Waits in short slices, so a shorter lease setting takes effect within one.
            due = last_beat + setting("AGENT_RUN_LEASE_SECONDS") / 3
            woken = self._wake.wait(min(max(due - time.monotonic(), 0), KEEPER_SLICE_SECONDS))
            if not woken and time.monotonic() < due:
                continue
            self._wake.clear()
            last_beat = time.monotonic()
            with self._lock:
                held = {
                    run: worker for run, (worker, lost) in self._runs.items() if not lost.is_set()
                }
            if not held:
                continue
            with self._conn_lock:
                try:
                    renewed, busy = self._renew(held)
                except (psycopg.Error, DatabaseError, OSError):
                    # A blip must not end the renewals: retry on a fresh connection next beat
                    # (the lease outlives two missed beats).
                    keeper_logger.warning("lease renewal failed; retrying next beat", exc_info=True)
                    self._close()
                    continue
            for run_id in held.keys() - renewed - busy:
                with self._lock:
                    entry = self._runs.get(run_id)
                if entry is not None:  # else its owner finished it meanwhile
                    keeper_logger.warning("run %s lost its lease", run_id)
                    entry[1].set()

    def _renew(self, held: dict[str, str]) -> tuple[set[str], set[str]]:
        """(renewed, busy) run ids of `held` ({run_id: worker_id})."""
        conn = self._connection()
        ids, workers = list(held), list(held.values())
        with conn.cursor() as cursor:
            cursor.execute(_RENEW_SQL, [setting("AGENT_RUN_LEASE_SECONDS"), ids, workers])
            renewed = {row[0] for row in cursor.fetchall()}
            busy: set[str] = set()
            if len(renewed) < len(held):
                rest = [run for run in ids if run not in renewed]
                cursor.execute(_STILL_HELD_SQL, [rest, [held[run] for run in rest]])
                busy = {row[0] for row in cursor.fetchall()}
        return renewed, busy

    def _connection(self) -> "psycopg.Connection":
        if self._conn is None or self._conn.closed:
            self._conn = direct_connection(autocommit=True, application_name="yuxi-lease-keeper")
        return self._conn

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


_keeper: LeaseKeeper | None = None
_keeper_lock = threading.Lock()


def lease_keeper() -> LeaseKeeper:
    """This process's lease keeper, created on first use and again in a forked child."""
    global _keeper
    with _keeper_lock:
        if _keeper is None or _keeper.pid != os.getpid():
            _keeper = LeaseKeeper()
        return _keeper
