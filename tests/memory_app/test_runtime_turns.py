"""The turn phases as seams: `open_turn`, `run_agent`, `close_turn` used one by one, as an
async or streamed turn will use them."""

import asyncio
import logging
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from langchain_core.messages import HumanMessage

from conversations import runs
from conversations.models import AgentRun, Message
from conversations.selectors import dialogue
from memory_app.llm import ScriptedChatModel
from memory_app.runtime.agent_phase import run_agent
from memory_app.runtime.closing import close_turn
from memory_app.runtime.concurrency.settling import to_the_end
from memory_app.runtime.opening import open_turn
from memory_app.runtime.service import chatbot_input
from tests.factories import UserConfigFactory

pytestmark = pytest.mark.django_db


def test_open_turn_claims_a_run_registers_its_lease_and_stores_the_user_message():
    user = UserConfigFactory(enable_memory=False).user
    turn = open_turn(user_id=user.pk, thread_id=None, message="hello")
    run = AgentRun.objects.get(run_id=turn.handle.run_id)
    assert (run.status, run.worker_id) == ("running", turn.handle.ctx.worker_id)
    assert runs.lease_keeper().lost_event(turn.handle.run_id) is turn.handle.lease_lost
    assert turn.user_message.content == "hello"
    assert turn.user_message.metadata == {"run_id": turn.handle.run_id}
    close_turn(turn, run_agent(turn, prepare=lambda t: chatbot_input(t, model=None)))


def test_a_prepare_failure_is_returned_in_the_outcome_and_close_turn_fails_the_run():
    user = UserConfigFactory(enable_memory=False).user
    turn = open_turn(user_id=user.pk, thread_id=None, message="hello")

    def broken_prepare(turn):
        raise LookupError("no graph")

    outcome = run_agent(turn, prepare=broken_prepare)
    assert isinstance(outcome.error, LookupError) and not outcome.produced
    assert AgentRun.objects.get(run_id=turn.handle.run_id).status == "running"
    with pytest.raises(LookupError):
        close_turn(turn, outcome)
    run = AgentRun.objects.get(run_id=turn.handle.run_id)
    assert (run.status, run.error) == ("failed", "internal error (LookupError)")
    assert runs.lease_keeper().lost_event(turn.handle.run_id) is None


def test_the_three_phases_answer_and_persist_the_reply():
    user = UserConfigFactory(enable_memory=False).user
    turn = open_turn(user_id=user.pk, thread_id=None, message="hello")
    outcome = run_agent(turn, prepare=lambda t: chatbot_input(t, model=ScriptedChatModel()))
    assert outcome.error is None and outcome.reply
    assert close_turn(turn, outcome) == []
    assert AgentRun.objects.get(run_id=turn.handle.run_id).status == "succeeded"
    stored = Message.objects.filter(conversation=turn.handle.conversation)
    assert list(stored.values_list("role", "content")) == [
        ("user", "hello"),
        ("assistant", outcome.reply),
    ]


def test_a_turn_that_opens_its_thread_reads_no_earlier_dialogue_and_a_later_turn_does(
    monkeypatch,
):
    user = UserConfigFactory(enable_memory=False).user
    read = []
    real = dialogue.recent_dialogue
    monkeypatch.setattr(
        dialogue, "recent_dialogue", lambda **kwargs: read.append(kwargs) or real(**kwargs)
    )
    first = open_turn(user_id=user.pk, thread_id=None, message="hello")
    assert first.new_thread
    assert chatbot_input(first, model=None).messages == [HumanMessage("hello")]
    close_turn(first, run_agent(first, prepare=lambda t: chatbot_input(t, model=None)))
    assert read == []  # a thread the turn opened holds nothing before its message
    thread_id = first.handle.conversation.thread_id
    later = open_turn(user_id=user.pk, thread_id=thread_id, message="again")
    assert not later.new_thread
    earlier = chatbot_input(later, model=None).messages
    assert [m.text for m in earlier] == ["hello", "You said: hello", "again"]
    assert len(read) == 1
    close_turn(later, run_agent(later, prepare=lambda t: chatbot_input(t, model=None)))


@pytest.mark.parametrize("cancellations", [1, 3])
def test_a_phase_awaited_to_the_end_runs_even_if_cancelled_while_it_waits_for_a_thread(
    cancellations,
):
    """The race a cancelled turn can meet at its close: the close's hop is queued behind busy
    worker threads. Awaited plainly, the queued work is dropped with the cancelled future and
    never runs (its run would stay `running`); `to_the_end` runs it, then raises the
    cancellation."""
    busy = threading.Event()
    workers = ThreadPoolExecutor(max_workers=1)
    workers.submit(busy.wait, 10)  # the only worker thread is busy
    ran: list[str] = []

    async def scenario() -> None:
        phase = asyncio.get_running_loop().run_in_executor(workers, ran.append, "closed")
        waiting = asyncio.ensure_future(to_the_end(phase))
        await asyncio.sleep(0)
        for _ in range(cancellations):
            waiting.cancel()
            await asyncio.sleep(0)
        busy.set()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert phase.done() and not phase.cancelled()

    asyncio.run(scenario())
    workers.shutdown()
    assert ran == ["closed"]


def test_a_phase_awaited_to_the_end_gives_its_result_or_its_error_when_not_cancelled():
    async def phase(fail: bool) -> str:
        await asyncio.sleep(0)
        if fail:
            raise ValueError("the close failed")
        return "closed"

    assert asyncio.run(to_the_end(phase(False))) == "closed"
    with pytest.raises(ValueError, match="the close failed"):
        asyncio.run(to_the_end(phase(True)))


def test_a_phase_that_fails_after_its_caller_was_cancelled_is_logged_not_lost(caplog):
    """The caller gets the cancellation, not the failure; the failure is told in the log
    (a close that failed would otherwise leave no trace of why its run was not finished)."""

    async def failing_close() -> None:
        await asyncio.sleep(0.05)
        raise ValueError("the close failed")

    async def scenario() -> None:
        waiting = asyncio.ensure_future(to_the_end(failing_close()))
        await asyncio.sleep(0)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting

    with caplog.at_level(logging.WARNING, logger="yuxi.runs"):
        asyncio.run(scenario())
    [record] = [r for r in caplog.records if "after its caller was cancelled" in r.message]
    assert isinstance(record.exc_info[1], ValueError)
