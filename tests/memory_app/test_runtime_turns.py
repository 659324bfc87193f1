"""The turn phases as seams: `open_turn`, `run_agent`, `close_turn` used one by one, as an
async or streamed turn will use them."""

import pytest

from conversations import runs
from conversations.models import AgentRun, Message
from memory_app.llm import ScriptedChatModel
from memory_app.runtime import close_turn, open_turn, run_agent
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
