"""A decided memory write always gets its final status, whatever happens to the stream that
carried the decision: once its resume run started the decision is spent; cancelled before the
write ran, the call is `declined` and says so; the write ran, the row holds its real outcome.
No row stays `pending` after its resume run ended."""

import asyncio
import json
import threading
import time
from contextlib import aclosing, closing

import pytest

from conversations.models import AgentRun, ToolCall
from conversations.services import DECLINED, settle_pending_call
from conversations.utils.connections import direct_connection, release_connection
from memory_app.locks import memory_lock_key
from memory_app.runtime import astream_chat, chat, stream_chat
from memory_app.runtime.closing import DECIDED_CALL_NOT_RUN, settle_late_calls
from memory_app.runtime.concurrency.loop import on_process_loop
from memory_app.runtime.turns import Turn
from memory_app.tool_results import decided_write_not_run
from memory_app.tools import RememberMemoryTool
from tests.factories import UserConfigFactory

pytestmark = pytest.mark.django_db(transaction=True)

REMEMBER = "remember that I drink oolong tea"
APPROVE = {"decision": "approve"}
BY_READER = "cancelled: the consumer stopped reading the stream"


@pytest.fixture
def interrupted():
    """A turn stopped before its memory write, waiting for the user's decision."""
    user = UserConfigFactory(enable_memory=True, memory_write_approval=True).user
    turn = chat(user_id=user.pk, message=REMEMBER)
    assert turn.status == "interrupted"
    return user, turn


def decided_row(turn) -> ToolCall:
    return ToolCall.objects.get(message__metadata__run_id=turn.run_id, name="remember_memory")


def resume_run(turn) -> AgentRun:
    return AgentRun.objects.get(resumes__run_id=turn.run_id)


def read_until(entry: str, user, turn, stop: str, then=None) -> None:
    """Start the decision's stream at `entry`, read until the `stop` event, run `then()`,
    and close the stream (the consumer stops reading)."""
    arguments = {"user_id": user.pk, "thread_id": turn.thread_id, "resume": APPROVE}
    if entry == "stream_chat":
        with closing(stream_chat(**arguments)) as events:
            for event in events:
                if event["event"] == stop:
                    break
            (then or (lambda: None))()
        return

    async def consume() -> None:
        async with aclosing(astream_chat(**arguments)) as events:
            async for event in events:
                if event["event"] == stop:
                    break
            await asyncio.to_thread(then or (lambda: None))

    asyncio.run(consume())


@pytest.mark.parametrize("entry", ["stream_chat", "astream_chat"])
def test_a_stream_closed_right_after_the_decided_write_ran_keeps_its_real_outcome(
    interrupted, entry, agents_file
):
    user, turn = interrupted
    read_until(entry, user, turn, "tool_result")
    assert agents_file(user.pk, "MEMORY.md").read_text() == "I drink oolong tea\n"
    row = decided_row(turn)
    assert row.status == "success"
    assert json.loads(row.output)["status"] == "added"
    assert resume_run(turn).status == "cancelled"


def wait_until_a_backend_waits_on(key: int, *, timeout: float = 20) -> None:
    """Until some backend is waiting for the advisory lock `key` (from a real connection)."""
    with direct_connection(autocommit=True) as conn:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            waiting = conn.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
                "AND classid = %s::bigint::oid AND objid = %s::bigint::oid",
                [(key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF],
            ).fetchone()[0]
            if waiting:
                return
            time.sleep(0.05)
    raise AssertionError("no backend waited on the memory lock")


def test_a_stream_cancelled_while_the_decided_write_waits_on_the_lock_declines_it(
    interrupted, agents_file, settings
):
    """A client that disconnects (its task cancelled) while the approved write waits for the
    user's lock, held by another writer on its own connection."""
    settings.MEMORY_LOCK_TIMEOUT_MS = 2000
    user, turn = interrupted
    key = memory_lock_key(str(user.pk))
    arguments = {"user_id": user.pk, "thread_id": turn.thread_id, "resume": APPROVE}

    async def disconnect_while_the_write_waits() -> None:
        async def consume() -> None:
            async for _ in astream_chat(**arguments):
                pass

        task = asyncio.create_task(consume())
        await asyncio.to_thread(wait_until_a_backend_waits_on, key)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    with direct_connection(autocommit=True) as holder:  # another writer holds the user's lock
        holder.execute("SELECT pg_advisory_lock(%s)", [key])
        asyncio.run(disconnect_while_the_write_waits())
        holder.execute("SELECT pg_advisory_unlock(%s)", [key])
    assert not agents_file(user.pk, "MEMORY.md").exists()
    row = decided_row(turn)
    assert (row.status, row.output) == ("declined", decided_write_not_run("cancelled").to_json())
    assert row.error == "not run: the resume run was cancelled before it"
    run = resume_run(turn)
    assert (run.status, run.error) == ("cancelled", BY_READER)
    assert not ToolCall.objects.filter(status="pending").exists()


@pytest.mark.parametrize("cancellations", [1, 2])
def test_a_decided_write_that_ends_after_its_run_was_cancelled_keeps_its_real_outcome(
    interrupted, agents_file, monkeypatch, cancellations
):
    """The decision's stream is cancelled while the approved write still runs (it commits):
    the cancel settles the call as not run, then, once the write ended, its real outcome
    replaces that. A caller on the process's own loop may cancel again while the cancelled
    turn waits for the write: the cancel and the settling are one phase, so that changes
    nothing."""
    user, turn = interrupted
    written, release = threading.Event(), threading.Event()
    write = RememberMemoryTool._call

    def write_then_hold(self, arguments, ctx, **call):
        result = write(self, arguments, ctx, **call)
        written.set()
        assert release.wait(10)
        return result

    monkeypatch.setattr(RememberMemoryTool, "_call", write_then_hold)
    arguments = {"user_id": user.pk, "thread_id": turn.thread_id, "resume": APPROVE}

    def until_the_resume_run_ended() -> None:
        deadline = time.monotonic() + 10
        try:
            while resume_run(turn).status == "running" and time.monotonic() < deadline:
                time.sleep(0.02)
        finally:
            release_connection()  # read on an executor thread: no connection left behind

    async def cancel_twice() -> None:
        async def consume() -> None:
            async for _ in astream_chat(**arguments):
                pass

        task = asyncio.ensure_future(consume())
        assert await asyncio.to_thread(written.wait, 10)
        task.cancel()
        await asyncio.to_thread(until_the_resume_run_ended)
        if cancellations == 2:
            task.cancel()
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(on_process_loop(cancel_twice()))
    assert agents_file(user.pk, "MEMORY.md").read_text() == "I drink oolong tea\n"
    row = decided_row(turn)
    assert (row.status, json.loads(row.output)["status"]) == ("success", "added")
    assert (resume_run(turn).status, resume_run(turn).error) == ("cancelled", BY_READER)


def test_a_cancelled_turn_waits_for_its_decided_write_only():
    """The cancel waits for the decided write still running (its outcome is stored), never
    for the turn's other calls still running: nothing of theirs is stored, and a repeated
    cancellation could not cut that wait short."""

    async def settle() -> bool:
        turn = Turn(handle=None, message=None, user_message=None)
        turn.tools_running["call_other"] = asyncio.get_running_loop().create_future()  # never ends
        settling = asyncio.ensure_future(settle_late_calls(turn))
        for _ in range(3):
            await asyncio.sleep(0)
        return settling.done()

    assert asyncio.run(settle())


@pytest.mark.parametrize(
    ("left", "corrected"),
    [
        # the cancel's own settling rolled back (its run had lost its lease): still pending
        (None, True),
        # the cancel settled it as not run
        (("declined", DECIDED_CALL_NOT_RUN.format(ended="cancelled")), True),
        # the user declined it: a decision, never replaced
        (("declined", DECLINED), False),
    ],
)
def test_a_late_outcome_replaces_a_pending_or_not_run_row_only(interrupted, left, corrected):
    user, turn = interrupted
    row = decided_row(turn)
    if left is not None:
        ToolCall.objects.filter(pk=row.pk).update(status=left[0], error=left[1])
    changed = settle_pending_call(
        conversation=row.message.conversation,
        run_id=turn.run_id,
        tool_call_id=row.tool_call_id,
        arguments={"content": "I drink oolong tea", "replaces": None},
        output='{"status": "added"}',
        status="success",
        error="",
        was=("declined", DECIDED_CALL_NOT_RUN.format(ended="cancelled")),
    )
    assert changed == int(corrected)
    row.refresh_from_db()
    assert (row.status == "success") is corrected
