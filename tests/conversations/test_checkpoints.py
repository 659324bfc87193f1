"""The checkpoint tables and savers on the real PostgreSQL: set up by `migrate`, on pools of
their own opened on first use and bounded by `CHECKPOINT_POOL_MAX`, deleted by key or user."""

import asyncio

import pytest
from django.db import connection

from conversations import checkpoints
from memory_app.runtime import chat
from memory_app.runtime.concurrency.loop import run_sync
from tests.factories import AgentRunFactory, UserConfigFactory

pytestmark = pytest.mark.django_db(transaction=True)


def rows_under(key: str) -> dict[str, int]:
    with connection.cursor() as cursor:
        counts = {}
        for table in checkpoints.CHECKPOINT_TABLES:
            cursor.execute(f'SELECT count(*) FROM "{table}" WHERE thread_id = %s', [key])
            counts[table] = cursor.fetchone()[0]
    return counts


def test_migrate_set_the_tables_up_in_the_default_schema_of_the_test_database():
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT table_name FROM information_schema.tables "
            "WHERE table_schema = current_schema() AND table_name LIKE 'checkpoint%%'"
        )
        tables = {row[0] for row in cursor.fetchall()}
        cursor.execute("SELECT max(v) FROM checkpoint_migrations")
        version = cursor.fetchone()[0]
    assert tables == {*checkpoints.CHECKPOINT_TABLES, "checkpoint_migrations"}
    assert version == len(checkpoints.PostgresSaver.MIGRATIONS) - 1
    # Running it again (as a re-applied migration would) changes nothing.
    checkpoints.setup_checkpoint_tables(connection.settings_dict)


def test_the_pool_opens_on_first_use_and_holds_at_most_checkpoint_pool_max(settings):
    # Every turn runs on the process's event loop, with that loop's async saver.
    run_sync(checkpoints.close_async_checkpointer())
    settings.CHECKPOINT_POOL_MAX = 2
    plain = UserConfigFactory(enable_memory=True).user
    chat(user_id=plain.pk, message="remember that I like tea")
    # A turn without approval never connects for a checkpoint.
    pool = run_sync(checkpoints.async_checkpointer()).conn
    assert pool.get_stats()["pool_size"] == 0
    asking = UserConfigFactory(enable_memory=True, memory_write_approval=True).user
    turn = chat(user_id=asking.pk, message="remember that I like tea")
    assert not pool.closed and pool.max_size == 2
    assert pool.get_stats()["pool_size"] >= 1
    assert rows_under(turn.run_id)["checkpoints"] > 0
    run_sync(checkpoints.close_async_checkpointer())


def test_deleting_by_key_removes_checkpoints_blobs_and_writes_of_that_key_only():
    first = UserConfigFactory(enable_memory=True, memory_write_approval=True).user
    second = UserConfigFactory(enable_memory=True, memory_write_approval=True).user
    gone = chat(user_id=first.pk, message="remember that I like tea")
    kept = chat(user_id=second.pk, message="remember that I like coffee")
    assert all(rows_under(gone.run_id).values())
    assert checkpoints.delete_checkpoints([gone.run_id]) == 1
    assert set(rows_under(gone.run_id).values()) == {0}
    assert rows_under(kept.run_id)["checkpoints"] > 0
    assert checkpoints.delete_checkpoints([]) == 0


def test_a_user_s_checkpoints_are_found_by_their_runs():
    user = UserConfigFactory(enable_memory=True, memory_write_approval=True).user
    turn = chat(user_id=user.pk, message="remember that I like tea")
    AgentRunFactory()  # another user's run, with no checkpoint
    assert checkpoints.delete_user_checkpoints(user_id=user.pk) == 1
    assert not checkpoints.checkpoint_exists(turn.run_id)


def test_the_async_saver_reads_what_the_sync_one_wrote():
    user = UserConfigFactory(enable_memory=True, memory_write_approval=True).user
    turn = chat(user_id=user.pk, message="remember that I like tea")

    async def read() -> object:
        saver = await checkpoints.async_checkpointer()
        found = await saver.aget_tuple({"configurable": {"thread_id": turn.run_id}})
        await saver.conn.close()
        return found

    found = asyncio.run(read())
    assert found is not None and found.config["configurable"]["thread_id"] == turn.run_id


def test_a_saver_waits_for_a_connection_no_longer_than_the_bound(settings):
    settings.CHECKPOINT_POOL_MAX = 1
    saver = checkpoints.checkpointer()
    try:
        assert saver.conn.timeout == checkpoints.DATABASE_WAIT_SECONDS == 10
    finally:
        checkpoints.close_checkpointer()


@pytest.mark.parametrize(("mode", "threshold"), [("session", 0), ("transaction", None)])
def test_a_saver_prepares_its_statements_except_behind_a_transaction_pooler(
    settings, mode, threshold
):
    settings.DATABASE_POOL_MODE = mode
    saver = checkpoints.checkpointer()
    try:
        saver.conn.open()  # as its first query does
        with saver.conn.connection() as conn:
            assert conn.prepare_threshold == threshold
    finally:
        checkpoints.close_checkpointer()
