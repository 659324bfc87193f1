"""Every path through a real PgBouncer in transaction mode (Debian's 1.18: no protocol-level
prepared statements), configured as a host behind one is told to: `DATABASE_POOL_MODE =
"transaction"` and `DISABLE_SERVER_SIDE_CURSORS`. PgBouncer hands consecutive transactions
to different server connections (round robin, as under load from several hosts), so whatever
a session left on one server connection (a prepared statement, a cursor, a setting) is not
there for the next transaction."""

import json
import threading
import time
from pathlib import Path

import psycopg
import pytest
from django.conf import settings
from django.db import connection
from django.test import Client

from conversations.models import AgentRun
from conversations.runs.keeper import LeaseKeeper
from conversations.utils.connections import DATABASE_WAIT_SECONDS
from memory_app.runtime import chat
from tests.database import Relay, through_pgbouncer
from tests.factories import (
    MessageFactory,
    RunningAgentRunFactory,
    StaffUserFactory,
    UserConfigFactory,
)
from tests.pgbouncer import TEST_PORT, PgBouncer, pgbouncer_missing

# Every test's database work runs on the app's own threads and connections, through PgBouncer.
pytestmark = pytest.mark.django_db(transaction=True)

TURNS_PER_CLIENT = 4
# The longest /healthz may take to answer 200 again after PostgreSQL is back behind PgBouncer.
RECOVERY_BOUND_SECONDS = DATABASE_WAIT_SECONDS + 2
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
    keeper = LeaseKeeper()
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


@pytest.fixture
def restartable_database(settings) -> Relay:
    """PostgreSQL behind PgBouncer behind a relay the test stops (the server gone: its
    connections cut, new ones refused) and starts again."""
    if reason := pgbouncer_missing():
        pytest.skip(reason)
    params = connection.settings_dict
    relay = Relay(TEST_PORT + 2, (params["HOST"] or "127.0.0.1", int(params["PORT"] or 5432)))
    relay.start()
    try:
        with PgBouncer(port=TEST_PORT + 1, server_port=relay.port, pool_size=4) as bouncer:
            settings.DATABASE_POOL_MODE = "transaction"
            with through_pgbouncer(bouncer.port):
                yield relay
    finally:
        relay.stop()


def test_while_postgresql_is_down_requests_answer_503_json_within_the_bound_then_recover(
    restartable_database,
):
    user = UserConfigFactory(enable_memory=True).user
    client = Client(raise_request_exception=False)
    client.force_login(user)
    assert client.get("/api/settings/").status_code == 200
    restartable_database.stop()
    for path in ("/healthz", "/api/settings/"):
        started = time.monotonic()
        response = client.get(path)
        waited = time.monotonic() - started
        assert response.status_code == 503 and response["Content-Type"] == "application/json"
        assert waited < DATABASE_WAIT_SECONDS + 1, (path, waited)
    restartable_database.start()
    started = time.monotonic()
    while client.get("/healthz").status_code != 200:
        assert time.monotonic() - started < 60, "/healthz never recovered"
        time.sleep(0.1)
    # Within seconds of PostgreSQL's return, PgBouncer's `server_login_retry` (1 s) and the
    # pool's back-off (a request may wait out its bound once) included: never a hang.
    assert time.monotonic() - started < RECOVERY_BOUND_SECONDS
    assert client.get("/api/settings/").status_code == 200


def test_a_full_pooler_refusing_clients_is_answered_503_json_within_the_bound(pgbouncer, settings):
    """PgBouncer at its `max_client_conn` refuses every new client (`no more connections
    allowed`), as a full PostgreSQL does (`too many clients`): the request waits at most the
    bound for a connection, then answers JSON 503."""
    user = UserConfigFactory(enable_memory=True).user
    client = Client(raise_request_exception=False)
    client.force_login(user)
    params = connection.settings_dict
    with PgBouncer(
        port=TEST_PORT + 4,
        server_host=params["HOST"] or "127.0.0.1",
        server_port=int(params["PORT"] or 5432),
        max_client_conn=1,
    ) as full:
        settings.DATABASE_POOL_MODE = "transaction"
        taken = psycopg.connect(full.url(params["NAME"]))  # the one client it admits
        try:
            with through_pgbouncer(full.port):
                started = time.monotonic()
                response = client.get("/api/settings/")
                waited = time.monotonic() - started
        finally:
            taken.close()
    assert response.status_code == 503 and response["Content-Type"] == "application/json"
    assert waited < DATABASE_WAIT_SECONDS + 1
