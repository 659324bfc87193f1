"""The process's lease keeper: one thread, one statement per beat, busy is not lost."""

import os
from datetime import timedelta

import psycopg
import pytest

from conversations import runs
from conversations.models import AgentRun
from conversations.runs.keeper import LeaseKeeper
from conversations.utils.db_functions import ClockTimestamp
from tests.concurrency import row_locked_elsewhere
from tests.factories import ConversationFactory

# The keeper's own connection must see the rows: committed, not in a test transaction.
pytestmark = pytest.mark.django_db(transaction=True)


def started(worker_id: str = "w1") -> AgentRun:
    conversation = ConversationFactory()
    return runs.start_run(
        user_id=conversation.user_id,
        conversation=conversation,
        request_id="req",
        worker_id=worker_id,
    )


def lease_of(run: AgentRun):
    return AgentRun.objects.get(pk=run.pk).lease_expires_at


def test_one_beat_renews_every_run_the_process_holds_in_one_statement(monkeypatch):
    keeper = LeaseKeeper()
    held = [started(f"w{i}") for i in range(5)]
    before = {run.pk: lease_of(run) for run in held}
    statements = []

    class CountingCursor(psycopg.Cursor):
        def execute(self, query, params=None, **kwargs):
            statements.append(query)
            return super().execute(query, params, **kwargs)

    real_connection = keeper._connection

    def counting_connection():
        conn = real_connection()
        conn.cursor_factory = CountingCursor
        return conn

    monkeypatch.setattr(keeper, "_connection", counting_connection)
    renewed, busy = keeper._renew({str(run.run_id): run.worker_id for run in held})
    keeper._close()
    assert renewed == {str(run.run_id) for run in held} and busy == set()
    assert len(statements) == 1
    assert all(lease_of(run) > before[run.pk] for run in held)


def test_a_row_a_tool_holds_is_busy_and_an_expired_or_taken_one_is_lost():
    keeper = LeaseKeeper()
    locked, expired, taken, fine = (started(f"w{i}") for i in range(4))
    AgentRun.objects.filter(pk=expired.pk).update(
        lease_expires_at=ClockTimestamp() - timedelta(seconds=1)
    )
    AgentRun.objects.filter(pk=taken.pk).update(worker_id="another-worker")
    try:
        with row_locked_elsewhere(locked):  # as a tool's write holds it
            held = {str(run.run_id): run.worker_id for run in (locked, expired, taken, fine)}
            held[str(taken.run_id)] = "w2"
            renewed, busy = keeper._renew(held)
    finally:
        keeper._close()
    assert renewed == {str(fine.run_id)}
    assert busy == {str(locked.run_id)}


def test_the_keeper_sets_lease_lost_and_its_tools_stay_refused_after_unregister(settings):
    settings.AGENT_RUN_LEASE_SECONDS = 30
    keeper = LeaseKeeper()
    run = started()
    lost = keeper.register(run_id=str(run.run_id), worker_id=run.worker_id)
    AgentRun.objects.filter(pk=run.pk).update(worker_id="another-worker")
    keeper._wake.set()
    assert lost.wait(60)
    assert keeper.lease_lost(str(run.run_id))
    keeper.unregister(str(run.run_id))
    assert keeper.lease_lost(str(run.run_id))
    assert keeper._conn is None  # idle: the keeper holds no connection


def test_a_forked_process_gets_its_own_keeper(monkeypatch):
    parent = runs.lease_keeper()
    assert runs.lease_keeper() is parent
    monkeypatch.setattr(os, "getpid", lambda: parent.pid + 1)
    child = runs.lease_keeper()
    assert child is not parent and child.pid == parent.pid + 1
