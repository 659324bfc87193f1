"""Every path through a real PgBouncer in transaction mode (Debian's 1.18: no protocol-level
prepared statements), configured as a host behind one is told to: `DATABASE_POOL_MODE =
"transaction"` and `DISABLE_SERVER_SIDE_CURSORS`. PgBouncer hands consecutive transactions
to different server connections (round robin, as under load from several hosts), so whatever
a session left on one server connection (a prepared statement, a cursor, a setting) is not
there for the next transaction."""

import json
import threading
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection
from django.test import Client

from conversations import runs
from conversations.models import AgentRun
from memory_app.runtime import chat
from tests.factories import (
    MessageFactory,
    RunningAgentRunFactory,
    StaffUserFactory,
    UserConfigFactory,
)

# Every test's database work runs on the app's own threads and connections, through PgBouncer.
pytestmark = pytest.mark.django_db(transaction=True)

TURNS_PER_CLIENT = 4
CLIENTS = 4


def memory_of(user) -> bytes:
    return (Path(settings.WORKSPACE_ROOT) / str(user.pk) / "agents" / "MEMORY.md").read_bytes()


def test_chat_turns_from_several_clients_all_succeed_and_each_fact_is_kept_once(
    transaction_pooled,
):
    users = [UserConfigFactory(enable_memory=True).user for _ in range(CLIENTS)]
    outcomes: list[tuple[int, str, str]] = []
    failures: list[BaseException] = []

    def client(user) -> None:
        try:
            for turn in range(TURNS_PER_CLIENT):
                fact = f"fact {user.pk}-{turn}"
                outcomes.append((user.pk, fact, chat(user_id=user.pk, message=f"remember {fact}")))
        except BaseException as exc:  # reported below: a failed turn fails the test
            failures.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=client, args=(user,)) for user in users]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert failures == []
    assert [turn.status for _, _, turn in outcomes] == ["succeeded"] * CLIENTS * TURNS_PER_CLIENT
    for user in users:
        lines = memory_of(user).decode().splitlines()
        assert sorted(lines) == [f"fact {user.pk}-{turn}" for turn in range(TURNS_PER_CLIENT)]


def test_an_approval_turn_and_its_approval_keep_their_checkpoint(transaction_pooled):
    user = UserConfigFactory(enable_memory=True, memory_write_approval=True).user
    interrupted = chat(user_id=user.pk, message="remember that I drink oolong tea")
    assert interrupted.status == "interrupted"
    for _ in range(3):  # the checkpointer's statements, run again on other server connections
        assert chat(user_id=user.pk, message="hello", thread_id=None).status == "succeeded"
    decided = chat(user_id=user.pk, thread_id=interrupted.thread_id, resume={"decision": "approve"})
    assert decided.status == "succeeded"
    assert memory_of(user) == b"I drink oolong tea\n"


def test_the_lease_keeper_renews_beat_after_beat(transaction_pooled):
    run = RunningAgentRunFactory(worker_id="w1")
    keeper = runs.LeaseKeeper()
    try:
        # psycopg prepares a statement at its 5th run by default; the beats after it must work.
        for _ in range(8):
            assert keeper._renew({str(run.run_id): "w1"}) == ({str(run.run_id)}, set())
    finally:
        keeper._close()
    assert AgentRun.objects.get(pk=run.pk).status == "running"


def test_the_export_is_the_whole_document(transaction_pooled):
    message = MessageFactory(content="I drink oolong tea")
    user = message.conversation.user
    client = Client()
    client.force_login(user)
    response = client.get("/api/export/")
    assert response.status_code == 200
    document = json.loads(b"".join(response.streaming_content))
    assert [thread["thread_id"] for thread in document["threads"]] == [
        message.conversation.thread_id
    ]
    assert document["threads"][0]["messages"][0]["content"] == "I drink oolong tea"
    # Timestamps in the time zone Django's own connections use (UTC).
    assert document["threads"][0]["created_at"].endswith(("+00:00", "Z"))


def test_the_admins_user_page_with_its_permission_pickers_renders(transaction_pooled):
    staff = StaffUserFactory()
    client = Client()
    client.force_login(staff)
    response = client.get(f"/admin/auth/user/{staff.pk}/change/")
    assert response.status_code == 200
    assert b"user_permissions" in response.content
