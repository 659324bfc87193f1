"""Failing the runs nobody will finish: runs whose worker's lease lapsed, runs left pending too
long and approvals left undecided too long (`fail_expired_runs`, run periodically), and a
user's runs when the user is erased (`fail_user_runs`)."""

from django.core.exceptions import ImproperlyConfigured
from django.db import transaction

from conversations import checkpoints, services
from conversations.models import AgentRun
from conversations.runs.rows import checkpoint_key
from conversations.runs.starting import pending_cutoff
from conversations.selectors.approvals import expired_interrupts
from conversations.utils.db_functions import ClockTimestamp

# `AgentRun.error` of a run failed by `fail_expired_runs`.
EXPIRED_LEASE_ERROR = "worker lease expired: the worker stopped renewing it"
STALE_PENDING_ERROR = "pending too long: no worker claimed the run"
# `AgentRun.error` of the resume run that declines an approval nobody decided in time.
EXPIRED_APPROVAL_ERROR = "approval expired: the user did not decide in time"

# The tool result stored for the call of an approval that expired. The text belongs to the app
# whose tool asked for the approval, which gives it once at startup, from its
# `AppConfig.ready()`: no caller of the reaper (`manage.py fail_expired_runs`) can pass it, and
# this app holds no tool's texts.
_expired_approval_result: str | None = None


def answer_expired_approvals_with(result: str) -> None:
    """Store `result` as the tool result of each call whose approval `fail_expired_runs`
    declines."""
    global _expired_approval_result
    _expired_approval_result = result


def _declined_result() -> str:
    if _expired_approval_result is None:
        raise ImproperlyConfigured(
            "an approval expired, but no installed app gave the tool result its declined call "
            "is answered with (answer_expired_approvals_with): install memory_app"
        )
    return _expired_approval_result


def _decline_expired_approvals() -> int:
    """Decline every approval left undecided longer than `MEMORY_APPROVAL_TTL_SECONDS`."""
    expired = expired_interrupts().select_related("conversation")
    return sum(
        services.decline_approval(
            run=run,
            key=checkpoint_key(run),
            error=EXPIRED_APPROVAL_ERROR,
            result=_declined_result(),
        )
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
            status=AgentRun.Status.PENDING, created_at__lte=pending_cutoff()
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
