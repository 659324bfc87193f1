"""A run's finish: its owner moves it to a terminal status and clears its lease, storing what
the run produced in the same statement (`finish_run`)."""

import uuid
from collections.abc import Sequence

from conversations import services
from conversations.models import AgentRun, Conversation
from conversations.runs.errors import LeaseNotHeld, RunNotFound
from conversations.runs.leases import LEASE_VALID_SQL, check_lease_owner
from conversations.runs.rows import RUN_TABLE, run_from_row
from conversations.utils.connections import prepared_cursor
from conversations.utils.prepared import columns_of

_FINISHED_CTE = f"""
    finished AS (
        UPDATE {RUN_TABLE}
        SET status = %s, error = %s, finished_at = clock_timestamp(), worker_id = NULL,
            lease_expires_at = NULL
        WHERE run_id = %s AND worker_id = %s AND {LEASE_VALID_SQL}
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
        return run_from_row(finished)
    # Not finished: say why (one more read, only on this refusal path).
    run = AgentRun.objects.filter(run_id=run_uuid).first()
    if run is None:
        raise RunNotFound("no such run")
    check_lease_owner(run, worker_id)
    raise LeaseNotHeld("run lease has expired")
