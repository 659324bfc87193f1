"""A run's start: recorded pending for a worker to claim (`create_run`, `claim_run`), or
recorded already claimed by the worker that serves it, with the messages that open it
(`start_run`, `start_run_with_messages`); and when a pending run is too old to be claimed."""

import uuid
from collections.abc import Sequence
from datetime import timedelta

from django.db import transaction
from django.db.models.expressions import CombinedExpression

from conversations import services
from conversations.conf import setting
from conversations.models import AgentRun, Conversation, Message
from conversations.runs.leases import lease_length, require_worker_id
from conversations.runs.rows import RUN_TABLE, run_from_row
from conversations.utils.connections import prepared_cursor
from conversations.utils.db_functions import ClockTimestamp
from conversations.utils.prepared import columns_of


def _check_new_run(*, user_id: int, conversation: Conversation, request_id: str) -> None:
    """The checks every new run passes, pending or already claimed."""
    if not request_id:
        raise ValueError("request_id must be a non-empty string")
    if conversation.user_id != int(user_id):
        raise ValueError("the conversation belongs to another user")


def pending_cutoff() -> CombinedExpression:
    """Runs created at or before this database time have been pending too long."""
    seconds = setting("AGENT_RUN_PENDING_TIMEOUT_SECONDS")
    if seconds <= 0:
        raise ValueError("AGENT_RUN_PENDING_TIMEOUT_SECONDS must be positive")
    return ClockTimestamp() - timedelta(seconds=seconds)


def create_run(
    *,
    user_id: int,
    conversation: Conversation,
    request_id: str,
    run_type: str = AgentRun.RunType.CHAT,
    parent_run: AgentRun | None = None,
) -> AgentRun:
    """Record a pending run for a worker to claim."""
    _check_new_run(user_id=user_id, conversation=conversation, request_id=request_id)
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

    A run pending longer than `AGENT_RUN_PENDING_TIMEOUT_SECONDS` is stale (its request was
    abandoned long ago) and is never handed out; `fail_expired_runs` fails it. `SKIP LOCKED`
    lets racing workers pass over a row another worker is claiming, so exactly one gets it.
    """
    require_worker_id(worker_id)
    lease = lease_length(lease_seconds)
    with transaction.atomic():
        pending = AgentRun.objects.select_for_update(skip_locked=True).filter(
            status=AgentRun.Status.PENDING, created_at__gt=pending_cutoff()
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
        INSERT INTO {RUN_TABLE} (
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
    require_worker_id(worker_id)
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
        lease_length(lease_seconds),
    ]
    with prepared_cursor() as cursor:
        cursor.execute(
            f"WITH {_STARTED_CTE}, {stored.sql} "
            f"SELECT started.*, {services.RECORDED_COLUMNS} FROM started",
            [*params, *stored.params],
        )
        *row, ids, created = cursor.fetchone()
    run = run_from_row(row)
    run.conversation = conversation
    return run, stored.rows(ids, created)
