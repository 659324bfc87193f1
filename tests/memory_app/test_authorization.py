from dataclasses import replace
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from conversations.models import AgentRun
from memory_app.authorization import MemoryRunRefused, authorize_memory_run
from memory_app.selectors import memory_write_refusal
from memory_app.services import MemoryAccessDenied, remember_memory
from memory_app.tools import make_search_thread_messages_tool
from tests.factories import (
    UserConfigFactory,
    context_for,
    memory_user,
)

pytestmark = pytest.mark.django_db


def _refusal(ctx, *, lock: bool = False) -> str:
    with transaction.atomic(), pytest.raises(MemoryRunRefused) as excinfo:
        authorize_memory_run(ctx, lock=lock)
    return excinfo.value.reason


@pytest.mark.parametrize("lock", [False, True])
def test_a_leased_top_level_run_with_memory_on_is_authorized(run, lock):
    with transaction.atomic():
        assert authorize_memory_run(context_for(run), lock=lock).pk == run.pk


def test_the_authorized_run_is_a_whole_row(run):
    loaded = authorize_memory_run(context_for(run))
    assert (loaded.run_id, loaded.user_id, loaded.worker_id) == (
        run.run_id,
        run.user_id,
        run.worker_id,
    )
    assert loaded.lease_expires_at == run.lease_expires_at


@pytest.mark.parametrize(
    "change, reason",
    [
        ({"uid": ""}, "uid is missing"),
        ({"worker_id": ""}, "worker_id is missing"),
        ({"uid": "07"}, "uid is malformed"),
        ({"run_id": "nope"}, "run_id is malformed"),
        ({"run_id": "00000000-0000-0000-0000-000000000000"}, "no such run for this user"),
        ({"thread_id": "other"}, "run belongs to another thread or request"),
        ({"request_id": "other"}, "run belongs to another thread or request"),
        ({"worker_id": "someone-else"}, "run is leased to another worker"),
    ],
)
def test_a_context_that_does_not_match_its_run_is_refused(run, change, reason):
    assert _refusal(replace(context_for(run), **change)) == reason


def test_another_users_identity_is_refused(run):
    other = memory_user()
    assert _refusal(context_for(run, uid=str(other.pk))) == "no such run for this user"


def test_an_expired_lease_is_refused(run):
    AgentRun.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(1))
    assert _refusal(context_for(run), lock=True) == "run lease has expired"


def test_a_subagent_run_is_refused(run):
    AgentRun.objects.filter(pk=run.pk).update(run_type=AgentRun.RunType.SUBAGENT)
    assert _refusal(context_for(run)) == "only a top-level chat or resume run may use memory tools"


def test_an_inactive_user_is_refused_on_every_path(run):
    run.user.is_active = False
    run.user.save(update_fields=["is_active"])
    assert _refusal(context_for(run)) == "the user is missing or inactive"
    assert _refusal(context_for(run), lock=True) == "the user is missing or inactive"
    assert memory_write_refusal(run) == "the user is missing or inactive"
    with pytest.raises(MemoryAccessDenied):
        remember_memory(context_for(run), "A fact.")
    tool = make_search_thread_messages_tool(context_for(run))
    assert '"denied"' in tool.invoke({"query": "anything"})


def test_the_switch_off_is_refused_after_the_run_checks(run):
    UserConfigFactory._meta.model.objects.filter(user=run.user).update(enable_memory=False)
    assert _refusal(context_for(run)) == "memory is switched off for this user"
    assert _refusal(context_for(run, worker_id="x")) == "run is leased to another worker"


@pytest.mark.django_db(transaction=True)
def test_lock_true_outside_a_transaction_is_a_programming_error(run):
    with pytest.raises(RuntimeError):
        authorize_memory_run(context_for(run), lock=True)


@pytest.mark.django_db(transaction=True)
def test_lock_true_holds_the_run_row_until_the_transaction_ends(run):
    raw = connection.get_new_connection(connection.get_connection_params())
    try:
        with transaction.atomic():
            authorize_memory_run(context_for(run), lock=True)
            with raw.transaction():
                locked = raw.execute(
                    "SELECT 1 FROM conversations_agentrun WHERE id = %s FOR UPDATE SKIP LOCKED",
                    [run.pk],
                ).fetchall()
            assert locked == []
        with raw.transaction():
            free = raw.execute(
                "SELECT 1 FROM conversations_agentrun WHERE id = %s FOR UPDATE SKIP LOCKED",
                [run.pk],
            ).fetchall()
        assert free == [(1,)]
    finally:
        raw.close()


def test_lock_false_reads_the_run_and_the_switch_anew_in_one_statement_each_check(
    run, django_assert_num_queries
):
    with django_assert_num_queries(1):
        authorize_memory_run(context_for(run))
    UserConfigFactory._meta.model.objects.filter(user=run.user).update(enable_memory=False)
    with django_assert_num_queries(1), pytest.raises(MemoryRunRefused) as excinfo:
        authorize_memory_run(context_for(run))
    assert excinfo.value.reason == "memory is switched off for this user"


def test_lock_true_reads_the_switch_after_the_row_lock_in_a_second_statement(
    run, django_assert_num_queries
):
    with transaction.atomic(), django_assert_num_queries(2) as captured:
        authorize_memory_run(context_for(run), lock=True)
    locking, state = (query["sql"] for query in captured.captured_queries)
    assert "FOR NO KEY UPDATE" in locking and "enable_memory" not in locking
    assert "enable_memory" in state and "clock_timestamp()" in state
