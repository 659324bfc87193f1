from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.utils import timezone

from conversations import runs
from conversations.models import AgentRun, Message, ToolCall
from conversations.runs import finishing, keeper, reaping
from conversations.runs.errors import LeaseNotHeld, RunContextInvalid, RunNotFound
from conversations.runs.leases import LEASE_VALID_SQL, db_clock
from conversations.runs.reaping import EXPIRED_LEASE_ERROR, STALE_PENDING_ERROR, fail_user_runs
from conversations.runs.tool_lock import tool_run_refusal
from conversations.services import DECLINED
from conversations.utils.db_functions import ClockTimestamp
from tests.concurrency import race, row_locked_elsewhere
from tests.factories import AgentRunFactory, ConversationFactory, ToolCallFactory, context_for

pytestmark = pytest.mark.django_db


def _expire(run: AgentRun) -> None:
    AgentRun.objects.filter(pk=run.pk).update(
        lease_expires_at=ClockTimestamp() - timedelta(seconds=1)
    )


def _claimed(worker_id: str = "w1", **kwargs) -> AgentRun:
    run = AgentRunFactory(**kwargs)
    claimed = runs.claim_run(worker_id=worker_id, run_id=run.run_id)
    assert claimed is not None
    return claimed


def test_create_run_is_pending_without_a_lease():
    conversation = ConversationFactory()
    run = runs.create_run(
        user_id=conversation.user_id, conversation=conversation, request_id="req-1"
    )
    assert (run.status, run.worker_id, run.lease_expires_at) == ("pending", None, None)


def test_create_run_refuses_another_users_conversation():
    conversation = ConversationFactory()
    other = ConversationFactory()
    with pytest.raises(ValueError):
        runs.create_run(user_id=other.user_id, conversation=conversation, request_id="r")


def test_claim_sets_owner_start_and_lease_from_the_database_clock(settings):
    settings.AGENT_RUN_LEASE_SECONDS = 30
    run = AgentRunFactory()
    before = db_clock()
    claimed = runs.claim_run(worker_id="w1", run_id=run.run_id)
    after = db_clock()
    assert claimed.status == AgentRun.Status.RUNNING
    assert claimed.worker_id == "w1"
    assert before <= claimed.started_at <= after
    assert before + timedelta(seconds=30) <= claimed.lease_expires_at
    assert claimed.lease_expires_at <= after + timedelta(seconds=30)


def test_claim_without_run_id_takes_the_oldest_pending_run():
    older = AgentRunFactory()
    _age(older, 120)
    AgentRunFactory()
    assert runs.claim_run(worker_id="w1").pk == older.pk


def test_claim_returns_none_when_nothing_is_pending():
    _claimed()
    assert runs.claim_run(worker_id="w2") is None


def test_claim_requires_a_worker_id():
    run = AgentRunFactory()
    with pytest.raises(ValueError):
        runs.claim_run(worker_id="", run_id=run.run_id)


@pytest.mark.django_db(transaction=True)
def test_claim_skips_a_run_another_connection_is_claiming():
    run = AgentRunFactory()

    with row_locked_elsewhere(run):
        # SKIP LOCKED: no wait, and no run, while the other connection holds the row.
        assert runs.claim_run(worker_id="w2", run_id=run.run_id) is None
    assert runs.claim_run(worker_id="w2", run_id=run.run_id).worker_id == "w2"


@pytest.mark.django_db(transaction=True)
def test_racing_workers_claim_one_pending_run_exactly_once():
    run = AgentRunFactory()
    workers = [f"w{i}" for i in range(8)]
    claimed = race(
        lambda w: runs.claim_run(worker_id=w, run_id=run.run_id), [(w,) for w in workers]
    )
    winners = [
        worker for worker, result in zip(workers, claimed, strict=True) if result is not None
    ]
    assert len(winners) == 1
    run.refresh_from_db()
    assert run.worker_id == winners[0]


def test_owner_renews_an_unexpired_lease_from_the_database_clock(settings):
    run = _claimed()
    renewed = runs.renew_lease(run_id=run.run_id, worker_id="w1", lease_seconds=120)
    assert renewed.lease_expires_at > run.lease_expires_at
    assert renewed.lease_expires_at > db_clock() + timedelta(seconds=110)


def test_renew_by_another_worker_is_refused_and_changes_nothing():
    run = _claimed()
    with pytest.raises(LeaseNotHeld):
        runs.renew_lease(run_id=run.run_id, worker_id="w2")
    assert AgentRun.objects.get(pk=run.pk).lease_expires_at == run.lease_expires_at


def test_renew_after_expiry_is_refused():
    run = _claimed()
    _expire(run)
    with pytest.raises(LeaseNotHeld, match="expired"):
        runs.renew_lease(run_id=run.run_id, worker_id="w1")


def test_renew_of_an_unknown_run_is_refused():
    with pytest.raises(RunNotFound):
        runs.renew_lease(run_id="00000000-0000-0000-0000-000000000000", worker_id="w1")
    with pytest.raises(RunNotFound):
        runs.renew_lease(run_id="not-a-uuid", worker_id="w1")


def test_moving_only_the_python_clock_cannot_extend_a_lease(monkeypatch):
    run = _claimed()
    _expire(run)
    run.refresh_from_db()
    # Python believes it is an hour earlier, so by its clock the lease looks valid.
    past = run.lease_expires_at - timedelta(hours=1)
    monkeypatch.setattr(timezone, "now", lambda: past)
    with pytest.raises(LeaseNotHeld, match="expired"):
        runs.renew_lease(run_id=run.run_id, worker_id="w1")
    with pytest.raises(LeaseNotHeld, match="expired"):
        runs.finish_run(run_id=run.run_id, worker_id="w1", status="succeeded")


def test_owner_finishes_a_run_and_the_lease_is_cleared():
    run = _claimed()
    finished = runs.finish_run(run_id=run.run_id, worker_id="w1", status="succeeded")
    assert finished.status == AgentRun.Status.SUCCEEDED
    assert (finished.worker_id, finished.lease_expires_at) == (None, None)
    assert finished.finished_at is not None
    with pytest.raises(LeaseNotHeld):
        runs.renew_lease(run_id=run.run_id, worker_id="w1")


def test_finish_by_another_worker_or_after_expiry_is_refused():
    run = _claimed()
    with pytest.raises(LeaseNotHeld):
        runs.finish_run(run_id=run.run_id, worker_id="w2", status="failed")
    _expire(run)
    with pytest.raises(LeaseNotHeld):
        runs.finish_run(run_id=run.run_id, worker_id="w1", status="failed")
    assert AgentRun.objects.get(pk=run.pk).status == AgentRun.Status.RUNNING


def test_finish_requires_a_terminal_status():
    run = _claimed()
    with pytest.raises(ValueError):
        runs.finish_run(run_id=run.run_id, worker_id="w1", status="running")


def test_fail_expired_runs_marks_only_lapsed_runs_failed():
    lapsed = _claimed()
    live = _claimed(worker_id="w2")
    _expire(lapsed)
    assert runs.fail_expired_runs() == 1
    lapsed.refresh_from_db()
    live.refresh_from_db()
    assert (lapsed.status, lapsed.lease_expires_at) == (AgentRun.Status.FAILED, None)
    assert live.status == AgentRun.Status.RUNNING


def test_lock_run_for_tool_returns_the_owned_top_level_run():
    run = _claimed()
    with transaction.atomic():
        assert runs.lock_run_for_tool(context_for(run)).pk == run.pk


@pytest.mark.django_db(transaction=True)
def test_lock_run_for_tool_must_run_inside_a_transaction():
    run = _claimed()
    with pytest.raises(RuntimeError):
        runs.lock_run_for_tool(context_for(run))


@pytest.mark.parametrize(
    "overrides",
    [
        {"uid": ""},
        {"uid": None},
        {"uid": "01"},
        {"uid": "\u0661"},
        {"thread_id": "other-thread"},
        {"run_id": "not-a-uuid"},
        {"run_id": "00000000-0000-0000-0000-000000000000"},
        {"request_id": "other-request"},
        {"worker_id": "w2"},
        {"worker_id": ""},
    ],
)
def test_lock_run_for_tool_refuses_a_context_that_does_not_match(overrides):
    run = _claimed()
    with pytest.raises(RunContextInvalid), transaction.atomic():
        runs.lock_run_for_tool(context_for(run, **overrides))


def test_lock_run_for_tool_refuses_another_users_run():
    run = _claimed()
    other = ConversationFactory()
    with pytest.raises(RunContextInvalid), transaction.atomic():
        runs.lock_run_for_tool(context_for(run, uid=str(other.user_id)))


def test_lock_run_for_tool_refuses_subagent_and_expired_runs():
    parent = _claimed()
    child = _claimed(
        worker_id="w1",
        run_type=AgentRun.RunType.SUBAGENT,
        parent_run=parent,
        conversation=ConversationFactory(user=parent.user, parent=parent.conversation),
    )
    with pytest.raises(RunContextInvalid, match="top-level"), transaction.atomic():
        runs.lock_run_for_tool(context_for(child))
    _expire(parent)
    with pytest.raises(RunContextInvalid, match="expired"), transaction.atomic():
        runs.lock_run_for_tool(context_for(parent))


def test_tool_run_refusal_explains_why_without_locking():
    run = _claimed()
    assert tool_run_refusal(run, "w1") is None
    assert tool_run_refusal(run, "w2") == "run is leased to another worker"
    pending = AgentRunFactory()
    assert tool_run_refusal(pending, None) == "run is pending, not running"


def _age(run: AgentRun, seconds: int) -> None:
    """Make `run` look created `seconds` ago by the database clock."""
    AgentRun.objects.filter(pk=run.pk).update(
        created_at=ClockTimestamp() - timedelta(seconds=seconds)
    )


def test_a_stale_pending_run_is_never_claimed(settings):
    settings.AGENT_RUN_PENDING_TIMEOUT_SECONDS = 300
    stale = AgentRunFactory()
    _age(stale, 301)
    assert runs.claim_run(worker_id="w1", run_id=stale.run_id) is None
    assert runs.claim_run(worker_id="w1") is None
    stale.refresh_from_db()
    assert (stale.status, stale.worker_id) == ("pending", None)


def test_a_fresh_pending_run_is_still_claimed_beside_a_stale_one(settings):
    settings.AGENT_RUN_PENDING_TIMEOUT_SECONDS = 300
    stale = AgentRunFactory()
    _age(stale, 600)
    fresh = AgentRunFactory()
    _age(fresh, 299)
    assert runs.claim_run(worker_id="w1").pk == fresh.pk


def test_fail_expired_runs_fails_a_stale_pending_run_and_leaves_a_fresh_one(settings):
    settings.AGENT_RUN_PENDING_TIMEOUT_SECONDS = 300
    stale = AgentRunFactory()
    _age(stale, 301)
    fresh = AgentRunFactory()
    assert runs.fail_expired_runs() == 1
    stale.refresh_from_db()
    fresh.refresh_from_db()
    assert stale.status == AgentRun.Status.FAILED
    assert stale.error == STALE_PENDING_ERROR
    assert stale.finished_at is not None
    assert (fresh.status, fresh.error, fresh.finished_at) == ("pending", "", None)
    assert runs.claim_run(worker_id="w1", run_id=stale.run_id) is None
    assert runs.claim_run(worker_id="w1", run_id=fresh.run_id).worker_id == "w1"


def test_fail_expired_runs_says_why_a_lapsed_lease_failed():
    run = _claimed()
    _expire(run)
    assert runs.fail_expired_runs() == 1
    run.refresh_from_db()
    assert (run.status, run.error) == ("failed", EXPIRED_LEASE_ERROR)


def _expired_approval(settings) -> ToolCall:
    """The pending call of an interrupted run left undecided past `MEMORY_APPROVAL_TTL_SECONDS`."""
    run = AgentRunFactory(status=AgentRun.Status.INTERRUPTED)
    AgentRun.objects.filter(pk=run.pk).update(
        finished_at=ClockTimestamp() - timedelta(seconds=settings.MEMORY_APPROVAL_TTL_SECONDS + 5)
    )
    return ToolCallFactory(
        message__conversation=run.conversation,
        message__metadata={"run_id": str(run.run_id)},
        status=ToolCall.Status.PENDING,
        output="",
    )


def test_the_reaper_answers_an_expired_approval_with_the_text_it_was_given(settings, monkeypatch):
    call = _expired_approval(settings)
    monkeypatch.setattr(reaping, "_expired_approval_result", None)
    with pytest.raises(ImproperlyConfigured, match="answer_expired_approvals_with"):
        runs.fail_expired_runs()
    given = '{"status": "rejected", "message": "as the tool\'s own app words it"}'
    reaping.answer_expired_approvals_with(given)
    assert runs.fail_expired_runs() == 1
    call.refresh_from_db()
    assert (call.status, call.error, call.output) == ("declined", DECLINED, given)
    answer = Message.objects.get(role=Message.Role.TOOL, metadata__tool_call_id=call.tool_call_id)
    assert answer.content == call.output


_GOOD_CONTEXT = {
    "uid": "7",
    "thread_id": "thread-1",
    "run_id": "6f1c2f5e-8a4b-4c1d-9e2f-3a4b5c6d7e8f",
    "request_id": "req-1",
    "worker_id": "worker-1",
}


def test_parse_context_returns_the_user_id_and_run_uuid() -> None:
    uid, run_uuid = runs.parse_context(runs.ToolRuntimeContext(**_GOOD_CONTEXT))

    assert (uid, str(run_uuid)) == (7, _GOOD_CONTEXT["run_id"])


@pytest.mark.parametrize(
    ("override", "reason"),
    [
        ({"worker_id": ""}, "worker_id is missing"),
        ({"thread_id": None}, "thread_id is missing"),
        ({"uid": "07"}, "uid is malformed"),
        ({"run_id": "nope"}, "run_id is malformed"),
    ],
)
def test_parse_context_refuses_a_missing_or_malformed_field(override, reason) -> None:
    ctx = runs.ToolRuntimeContext(**{**_GOOD_CONTEXT, **override})

    with pytest.raises(RunContextInvalid, match=f"^{reason}$"):
        runs.parse_context(ctx)


def test_fail_user_runs_fails_only_that_users_pending_and_running_runs_in_one_update(
    django_assert_num_queries,
):
    running = AgentRunFactory(status=AgentRun.Status.RUNNING, worker_id="w1")
    pending = AgentRunFactory(user=running.user, status=AgentRun.Status.PENDING)
    done = AgentRunFactory(user=running.user, status=AgentRun.Status.SUCCEEDED)
    other = AgentRunFactory(status=AgentRun.Status.RUNNING, worker_id="w2")
    with django_assert_num_queries(1):
        assert fail_user_runs(user_id=running.user_id, error="gone") == 2
    for run in (running, pending):
        run.refresh_from_db()
        assert (run.status, run.error, run.worker_id) == ("failed", "gone", None)
        assert run.finished_at is not None and run.lease_expires_at is None
    assert AgentRun.objects.get(pk=done.pk).status == "succeeded"
    assert AgentRun.objects.get(pk=other.pk).status == "running"


def test_the_one_lease_valid_fragment_is_in_every_lease_statement():
    for sql in (finishing._FINISHED_CTE, keeper._RENEW_SQL, keeper._STILL_HELD_SQL):
        assert LEASE_VALID_SQL in sql
