"""Approval before a memory write: the interrupted turn, the `resume` run carrying the user's
decision, declines, expiry, and the checkpoints on the real PostgreSQL checkpointer."""

import asyncio
import hashlib
import json
import threading
from datetime import timedelta

import pytest
from django.db import connections
from langchain.agents.middleware import HumanInTheLoopMiddleware

from conversations import checkpoints, runs
from conversations.models import AgentRun, Message, ToolCall
from conversations.runs.reaping import EXPIRED_APPROVAL_ERROR, EXPIRED_LEASE_ERROR
from conversations.services import DECLINED
from conversations.utils.db_functions import ClockTimestamp
from memory_app.errors import MemoryApprovalRequired
from memory_app.middleware import MEMORY_WRITE_APPROVAL_RULE
from memory_app.models import MemoryEvent
from memory_app.runtime import (
    ChatDecisionInvalid,
    ChatDecisionRefused,
    ChatInputError,
    ChatNothingToResume,
    achat,
    agent_run,
    astream_chat,
    build_chatbot_graph,
    chat,
    stream_chat,
)
from memory_app.services import set_memory_enabled, set_memory_write_approval
from memory_app.services.agent_write import remember_tool_call
from tests.factories import RunningAgentRunFactory, UserConfigFactory, context_for
from tests.memory_app.models import RecordingModel, tool_reply

# Tools run on LangGraph's pool threads and the checkpointer on its own connections: both must
# see what the test wrote.
pytestmark = pytest.mark.django_db(transaction=True)

REMEMBER = "remember that I drink oolong tea"
# What a declined memory write's call stores, as output and as its tool message, whichever path
# declined it (a new message, expiry): the memory app's text, stored by the conversations app.
DECLINED_OUTPUT = (
    '{"status": "rejected", "message": "The user declined this memory write; nothing was saved."}'
)


def approval_user(**kwargs):
    return UserConfigFactory(enable_memory=True, memory_write_approval=True, **kwargs).user


def memory_bytes(agents_file, user) -> bytes | None:
    path = agents_file(user.pk, "MEMORY.md")
    return path.read_bytes() if path.exists() else None


def interrupted_turn(user):
    turn = chat(user_id=user.pk, message=REMEMBER)
    assert turn.status == "interrupted"
    return turn


def pending_row(turn) -> ToolCall:
    return ToolCall.objects.get(message__metadata__run_id=turn.run_id, name="remember_memory")


# --- off by default ---------------------------------------------------------------------------


def test_approval_is_off_by_default_and_the_agent_writes_directly(agents_file):
    user = UserConfigFactory(enable_memory=True).user
    assert user.memory_config.memory_write_approval is False
    turn = chat(user_id=user.pk, message=REMEMBER)
    assert turn.status == "succeeded" and turn.approval is None
    assert turn.tool_calls == [{"name": "remember_memory", "status": "success"}]
    assert memory_bytes(agents_file, user) == b"I drink oolong tea\n"
    # No checkpointer ran: nothing is kept under the turn's key.
    assert not checkpoints.checkpoint_exists(turn.run_id)
    assert MemoryEvent.objects.get().actor is None


# --- interrupted --------------------------------------------------------------------------------


def test_with_approval_on_a_remember_turn_stops_before_the_write(agents_file):
    user = approval_user()
    path = agents_file(user.pk, "MEMORY.md")
    path.write_bytes(b"I live in Lisbon\r\n")
    turn = interrupted_turn(user)
    assert turn.approval == {
        "tool_call_id": turn.approval["tool_call_id"],
        "content": "I drink oolong tea",
        "replaces": None,
    }
    assert path.read_bytes() == b"I live in Lisbon\r\n"
    assert not MemoryEvent.objects.filter(kind="agent_added").exists()
    run = AgentRun.objects.get(run_id=turn.run_id)
    assert run.status == "interrupted" and run.finished_at is not None and run.worker_id is None
    row = pending_row(turn)
    assert row.status == "pending" and row.tool_call_id == turn.approval["tool_call_id"]
    assert row.input == {"content": "I drink oolong tea"}
    assert checkpoints.checkpoint_exists(turn.run_id)


def test_the_memory_prompt_says_a_write_waits_for_the_users_decision():
    user = approval_user()
    model = RecordingModel()
    chat(user_id=user.pk, message="hello", model=model)
    assert MEMORY_WRITE_APPROVAL_RULE in model.system_prompt()
    set_memory_write_approval(user=user, enabled=False, actor=user)
    chat(user_id=user.pk, message="hello", model=model)
    assert MEMORY_WRITE_APPROVAL_RULE not in model.system_prompt(1)


def test_a_turn_that_ends_without_an_interrupt_leaves_no_checkpoint():
    user = approval_user()
    turn = chat(user_id=user.pk, message="hello")
    assert turn.status == "succeeded"
    assert not checkpoints.checkpoint_exists(turn.run_id)


def test_only_the_first_memory_write_of_a_reply_is_put_to_the_user(agents_file):
    user = approval_user()
    model = RecordingModel(
        replies=[
            tool_reply(
                ("call_0", "search_thread_messages", {"query": "tea"}),
                ("call_1", "remember_memory", {"content": "first"}),
                ("call_2", "remember_memory", {"content": "second"}),
            )
        ]
    )
    turn = chat(user_id=user.pk, message=REMEMBER, model=model)
    assert turn.status == "interrupted"
    assert turn.approval["content"] == "first" and turn.approval["tool_call_id"] == "call_1"
    rows = {r.tool_call_id: r for r in ToolCall.objects.all()}
    assert rows["call_1"].status == "pending"
    for other in ("call_0", "call_2"):
        assert rows[other].status == "error"
        assert "Only the first memory write" in rows[other].error
    # Nothing of the reply ran: the search was not made, nothing was written.
    assert len(model.calls) == 1
    assert memory_bytes(agents_file, user) is None


# --- decisions ----------------------------------------------------------------------------------


def test_approve_writes_through_a_resume_run_of_the_interrupted_run(agents_file):
    user = approval_user()
    interrupted = interrupted_turn(user)
    decided = chat(user_id=user.pk, thread_id=interrupted.thread_id, resume={"decision": "approve"})
    assert decided.status == "succeeded" and decided.approval is None
    assert decided.tool_calls[0] == {"name": "remember_memory", "status": "success"}
    assert memory_bytes(agents_file, user) == b"I drink oolong tea\n"
    resume = AgentRun.objects.get(run_id=decided.run_id)
    assert resume.run_type == "resume" and resume.status == "succeeded"
    assert resume.resumes.run_id == AgentRun.objects.get(run_id=interrupted.run_id).run_id
    event = MemoryEvent.objects.get(kind="agent_added")
    assert event.run_id == resume.pk and event.actor_id == user.pk
    row = pending_row(interrupted)
    assert row.status == "success" and json.loads(row.output)["status"] == "added"
    assert not checkpoints.checkpoint_exists(interrupted.run_id)
    # The model replied after the write, as in any turn.
    assert decided.reply == "Saved to memory."


def test_edit_writes_the_users_text_and_the_row_records_it(agents_file):
    user = approval_user()
    interrupted = interrupted_turn(user)
    chat(
        user_id=user.pk,
        thread_id=interrupted.thread_id,
        resume={"decision": "edit", "content": "I drink green tea", "replaces": None},
    )
    assert memory_bytes(agents_file, user) == b"I drink green tea\n"
    row = pending_row(interrupted)
    assert row.input == {"content": "I drink green tea", "replaces": None}
    assert row.status == "success"


def test_an_edit_over_the_caps_is_refused_before_it_is_spent_and_stays_pending(agents_file):
    user = approval_user()
    interrupted = interrupted_turn(user)
    with pytest.raises(ChatDecisionRefused, match="content is over 4096 bytes"):
        chat(
            user_id=user.pk,
            thread_id=interrupted.thread_id,
            resume={"decision": "edit", "content": "x" * 5000, "replaces": None},
        )
    assert memory_bytes(agents_file, user) is None
    assert_still_pending(interrupted)


def assert_still_pending(turn) -> None:
    """Nothing was decided: no resume run, the call still pending, its checkpoint kept."""
    assert not AgentRun.objects.filter(resumes__run_id=turn.run_id).exists()
    assert pending_row(turn).status == "pending"
    assert checkpoints.checkpoint_exists(turn.run_id)


def test_reject_writes_nothing_and_tells_the_model(agents_file):
    user = approval_user()
    model = RecordingModel()
    interrupted = chat(user_id=user.pk, message=REMEMBER, model=model)
    decided = chat(
        user_id=user.pk,
        thread_id=interrupted.thread_id,
        resume={"decision": "reject"},
        model=model,
    )
    assert decided.status == "succeeded"
    assert memory_bytes(agents_file, user) is None
    row = pending_row(interrupted)
    assert row.status == "declined" and row.error == DECLINED
    assert "rejected" in model.calls[-1]["messages"][-1].text
    assert not MemoryEvent.objects.filter(kind="agent_added").exists()
    assert not checkpoints.checkpoint_exists(interrupted.run_id)


def test_approve_or_edit_while_memory_is_off_is_refused_and_reject_still_works(agents_file):
    user = approval_user()
    interrupted = interrupted_turn(user)
    set_memory_enabled(user=user, enabled=False, actor=user)
    for decision in (
        {"decision": "approve"},
        {"decision": "edit", "content": "I drink green tea", "replaces": None},
    ):
        with pytest.raises(ChatDecisionRefused, match="^memory is off$"):
            chat(user_id=user.pk, thread_id=interrupted.thread_id, resume=decision)
        assert_still_pending(interrupted)
    assert memory_bytes(agents_file, user) is None
    decided = chat(user_id=user.pk, thread_id=interrupted.thread_id, resume={"decision": "reject"})
    assert decided.status == "succeeded"
    assert pending_row(interrupted).error == DECLINED
    assert memory_bytes(agents_file, user) is None


def test_an_edit_whose_replaces_is_missing_stays_pending_and_a_correct_edit_then_applies(
    agents_file,
):
    user = approval_user()
    agents_file(user.pk, "MEMORY.md").write_text("I drink black tea\n")
    interrupted = interrupted_turn(user)
    with pytest.raises(ChatDecisionRefused) as refused:
        chat(
            user_id=user.pk,
            thread_id=interrupted.thread_id,
            resume={"decision": "edit", "content": "I drink oolong", "replaces": "coffee"},
        )
    assert str(refused.value) == "the text to replace is not in the memory file"
    assert_still_pending(interrupted)
    assert memory_bytes(agents_file, user) == b"I drink black tea\n"
    decided = chat(
        user_id=user.pk,
        thread_id=interrupted.thread_id,
        resume={"decision": "edit", "content": "oolong tea", "replaces": "black tea"},
    )
    assert decided.status == "succeeded"
    assert decided.tool_calls[0] == {"name": "remember_memory", "status": "success"}
    assert memory_bytes(agents_file, user) == b"I drink oolong tea\n"
    assert pending_row(interrupted).status == "success"


def test_an_edit_whose_replaces_occurs_twice_is_refused_with_the_reason(agents_file):
    user = approval_user()
    agents_file(user.pk, "MEMORY.md").write_text("tea\ntea\n")
    interrupted = interrupted_turn(user)
    with pytest.raises(ChatDecisionRefused, match="occurs more than once"):
        chat(
            user_id=user.pk,
            thread_id=interrupted.thread_id,
            resume={"decision": "edit", "content": "coffee", "replaces": "tea"},
        )
    assert_still_pending(interrupted)


def test_approving_a_proposal_the_file_cannot_take_is_refused_and_stays_pending(agents_file):
    user = approval_user()
    model = RecordingModel(
        replies=[
            tool_reply(("call_1", "remember_memory", {"content": "tea", "replaces": "coffee"}))
        ]
    )
    interrupted = chat(user_id=user.pk, message=REMEMBER, model=model)
    assert interrupted.status == "interrupted"
    with pytest.raises(ChatDecisionRefused, match="not in the memory file"):
        chat(user_id=user.pk, thread_id=interrupted.thread_id, resume={"decision": "approve"})
    assert not AgentRun.objects.filter(resumes__run_id=interrupted.run_id).exists()


@pytest.mark.parametrize(
    ("resume", "message"),
    [
        ({"decision": "edit"}, "content is required for an edit"),
        ({"decision": "edit", "replaces": "tea"}, "content is required for an edit"),
        (
            {"decision": "edit", "content": "tea \ud800"},
            "content must be valid Unicode text (no NUL character, no lone surrogate): it "
            "holds a lone surrogate",
        ),
        (
            {"decision": "edit", "content": "tea", "replaces": "a\x00b"},
            "replaces must be valid Unicode text (no NUL character, no lone surrogate): it "
            "holds a NUL character",
        ),
    ],
)
def test_a_malformed_edit_is_invalid_says_what_is_wrong_and_stays_pending(resume, message):
    user = approval_user()
    interrupted = interrupted_turn(user)
    with pytest.raises(ChatDecisionInvalid) as refused:
        chat(user_id=user.pk, thread_id=interrupted.thread_id, resume=resume)
    assert str(refused.value) == message
    assert_still_pending(interrupted)


def test_a_decision_that_is_not_one_of_the_three_is_refused_before_any_run():
    user = approval_user()
    interrupted = interrupted_turn(user)
    for bad in ({"decision": "respond"}, {"decision": "approve", "content": "x"}, "approve"):
        with pytest.raises(ChatInputError):
            chat(user_id=user.pk, thread_id=interrupted.thread_id, resume=bad)
    assert AgentRun.objects.filter(run_type="resume").count() == 0


def test_a_resume_interrupted_again_keeps_the_key_of_the_run_it_resumes(agents_file):
    user = approval_user()
    interrupted = interrupted_turn(user)
    model = RecordingModel(
        replies=[tool_reply(("call_0", "remember_memory", {"content": "and jasmine"}))]
    )
    again = chat(
        user_id=user.pk,
        thread_id=interrupted.thread_id,
        resume={"decision": "approve"},
        model=model,
    )
    assert again.status == "interrupted" and again.approval["content"] == "and jasmine"
    assert checkpoints.checkpoint_exists(interrupted.run_id)
    assert not checkpoints.checkpoint_exists(again.run_id)
    final = chat(user_id=user.pk, thread_id=interrupted.thread_id, resume={"decision": "approve"})
    assert final.status == "succeeded"
    assert memory_bytes(agents_file, user) == b"I drink oolong tea\nand jasmine\n"
    assert not checkpoints.checkpoint_exists(interrupted.run_id)


# --- nothing to resume, declines, expiry --------------------------------------------------------


def test_a_second_decision_finds_nothing_to_resume(agents_file):
    user = approval_user()
    interrupted = interrupted_turn(user)
    chat(user_id=user.pk, thread_id=interrupted.thread_id, resume={"decision": "approve"})
    with pytest.raises(ChatNothingToResume):
        chat(user_id=user.pk, thread_id=interrupted.thread_id, resume={"decision": "approve"})
    assert memory_bytes(agents_file, user) == b"I drink oolong tea\n"


def test_a_new_message_declines_the_pending_approval_first(agents_file):
    user = approval_user()
    model = RecordingModel()
    interrupted = chat(user_id=user.pk, message=REMEMBER, model=model)
    later = chat(user_id=user.pk, thread_id=interrupted.thread_id, message="hello", model=model)
    assert later.status == "succeeded"
    # One model call for the new message: declining needed none.
    assert len(model.calls) == 2
    row = pending_row(interrupted)
    assert (row.status, row.error, row.output) == ("declined", DECLINED, DECLINED_OUTPUT)
    assert not checkpoints.checkpoint_exists(interrupted.run_id)
    # The declined call is answered before the new message, in the stored history.
    kinds = list(
        Message.objects.filter(conversation__thread_id=interrupted.thread_id).values_list(
            "role", "content"
        )
    )
    assert kinds[2] == ("tool", DECLINED_OUTPUT) and kinds[3] == ("user", "hello")
    closing = AgentRun.objects.get(resumes__run_id=interrupted.run_id)
    assert closing.run_type == "resume" and closing.status == "cancelled"
    with pytest.raises(ChatNothingToResume):
        chat(user_id=user.pk, thread_id=interrupted.thread_id, resume={"decision": "approve"})
    assert memory_bytes(agents_file, user) is None


def test_an_expired_approval_is_declined_by_fail_expired_runs(settings, agents_file):
    user = approval_user()
    interrupted = interrupted_turn(user)
    AgentRun.objects.filter(run_id=interrupted.run_id).update(
        finished_at=ClockTimestamp() - timedelta(seconds=settings.MEMORY_APPROVAL_TTL_SECONDS + 5)
    )
    with pytest.raises(ChatNothingToResume):  # expired: no longer pending
        chat(user_id=user.pk, thread_id=interrupted.thread_id, resume={"decision": "approve"})
    assert checkpoints.checkpoint_exists(interrupted.run_id)
    assert runs.fail_expired_runs() == 1
    row = pending_row(interrupted)
    assert (row.status, row.error, row.output) == ("declined", DECLINED, DECLINED_OUTPUT)
    assert not checkpoints.checkpoint_exists(interrupted.run_id)
    closing = AgentRun.objects.get(resumes__run_id=interrupted.run_id)
    assert closing.error == EXPIRED_APPROVAL_ERROR
    answer = Message.objects.get(
        conversation__thread_id=interrupted.thread_id, metadata__run_id=str(closing.run_id)
    )
    assert (answer.role, answer.content) == ("tool", DECLINED_OUTPUT)
    assert runs.fail_expired_runs() == 0


def test_a_fresh_approval_is_left_pending_by_fail_expired_runs():
    user = approval_user()
    interrupted = interrupted_turn(user)
    assert runs.fail_expired_runs() == 0
    assert pending_row(interrupted).status == "pending"


# --- bypasses -----------------------------------------------------------------------------------


def test_with_approval_on_a_graph_without_the_approval_middleware_cannot_write(agents_file):
    user = approval_user()
    # A team's own agent: the chatbot graph without a checkpointer has no approval middleware.
    with agent_run(user_id=user.pk, thread_id=None) as handle:
        graph = build_chatbot_graph(handle.ctx)
        assert not graph.approval
        remember = graph.tools[0]
        result = remember.invoke(
            {"name": "remember_memory", "args": {"content": "x"}, "id": "c1", "type": "tool_call"}
        )
    assert json.loads(result.content)["status"] == "denied"
    assert "approval" in json.loads(result.content)["message"]
    assert memory_bytes(agents_file, user) is None


def test_a_released_call_writes_once_and_only_in_its_resume_run(agents_file):
    user = approval_user()
    interrupted = interrupted_turn(user)
    released = interrupted.approval["tool_call_id"]
    decided = chat(user_id=user.pk, thread_id=interrupted.thread_id, resume={"decision": "approve"})
    # The resume run, leased again as if still running: its settled call releases nothing more.
    resume = AgentRun.objects.get(run_id=decided.run_id)
    AgentRun.objects.filter(pk=resume.pk).update(
        status="running", worker_id="w", lease_expires_at=ClockTimestamp() + timedelta(seconds=60)
    )
    resume.refresh_from_db()
    with pytest.raises(MemoryApprovalRequired):
        remember_tool_call(
            context_for(resume), content="again", replaces=None, tool_call_id=released
        )
    # Another running run of the user naming the released id is no resume of it.
    other = RunningAgentRunFactory(conversation=resume.conversation, user=user)
    with pytest.raises(MemoryApprovalRequired):
        remember_tool_call(
            context_for(other), content="again", replaces=None, tool_call_id=released
        )
    assert memory_bytes(agents_file, user) == b"I drink oolong tea\n"


# --- racing decisions ---------------------------------------------------------------------------


def test_of_two_racing_decisions_exactly_one_applies(agents_file):
    user = approval_user()
    interrupted = interrupted_turn(user)
    barrier = threading.Barrier(2)
    outcomes: list[object] = [None, None]

    def decide(index: int, decision: dict) -> None:
        try:
            barrier.wait(30)
            outcomes[index] = chat(
                user_id=user.pk, thread_id=interrupted.thread_id, resume=decision
            )
        except Exception as exc:
            outcomes[index] = exc
        finally:
            connections.close_all()

    decisions = [
        {"decision": "edit", "content": "I drink black tea", "replaces": None},
        {"decision": "edit", "content": "I drink white tea", "replaces": None},
    ]
    threads = [threading.Thread(target=decide, args=(i, d)) for i, d in enumerate(decisions)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    won = [o for o in outcomes if not isinstance(o, Exception)]
    lost = [o for o in outcomes if isinstance(o, Exception)]
    assert len(won) == 1 and len(lost) == 1, outcomes
    assert isinstance(lost[0], ChatNothingToResume)
    data = memory_bytes(agents_file, user)
    assert data in (b"I drink black tea\n", b"I drink white tea\n")
    assert MemoryEvent.objects.filter(kind="agent_added").count() == 1
    assert AgentRun.objects.filter(run_type="resume").count() == 1
    event = MemoryEvent.objects.get(kind="agent_added")
    assert event.after_sha256 == hashlib.sha256(data).hexdigest()


def test_a_resume_that_fails_before_its_graph_runs_spends_the_decision(monkeypatch, agents_file):
    user = approval_user()
    interrupted = interrupted_turn(user)

    def broken(*args, **kwargs):
        raise RuntimeError("no graph")

    monkeypatch.setattr("memory_app.runtime.service.shared_graph", broken)
    with pytest.raises(RuntimeError):
        chat(user_id=user.pk, thread_id=interrupted.thread_id, resume={"decision": "approve"})
    assert AgentRun.objects.get(resumes__run_id=interrupted.run_id).status == "failed"
    row = pending_row(interrupted)
    assert row.status == "declined" and row.error.startswith("not run")
    assert not checkpoints.checkpoint_exists(interrupted.run_id)
    assert memory_bytes(agents_file, user) is None


def test_fail_expired_runs_drops_the_checkpoints_of_a_resume_whose_worker_died():
    user = approval_user()
    interrupted = interrupted_turn(user)
    stopped = AgentRun.objects.get(run_id=interrupted.run_id)
    dead = RunningAgentRunFactory(
        conversation=stopped.conversation,
        user=user,
        run_type="resume",
        resumes=stopped,
        lease_expires_at=ClockTimestamp() - timedelta(seconds=1),
    )
    assert runs.fail_expired_runs() == 1
    dead.refresh_from_db()
    assert dead.status == "failed" and dead.error == EXPIRED_LEASE_ERROR
    assert not checkpoints.checkpoint_exists(interrupted.run_id)


def test_a_memory_call_without_text_is_not_put_to_the_user_and_writes_nothing(agents_file):
    user = approval_user()
    model = RecordingModel(replies=[tool_reply(("call_0", "remember_memory", {"content": 5}))])
    turn = chat(user_id=user.pk, message=REMEMBER, model=model)
    assert turn.status == "succeeded" and turn.approval is None
    assert turn.tool_calls == [{"name": "remember_memory", "status": "error"}]
    assert json.loads(ToolCall.objects.get().output)["status"] == "rejected"
    assert memory_bytes(agents_file, user) is None
    assert not checkpoints.checkpoint_exists(turn.run_id)


@pytest.mark.parametrize("approval", [True, False])
def test_the_chatbot_graph_asks_before_writes_only_with_approval_on_and_a_checkpointer(approval):
    user = UserConfigFactory(enable_memory=True, memory_write_approval=approval).user
    saver = checkpoints.checkpointer()
    with agent_run(user_id=user.pk, thread_id=None) as handle:
        graph = build_chatbot_graph(handle.ctx, checkpointer=saver)
        plain = build_chatbot_graph(handle.ctx)
    asks = [m for m in graph.middleware if isinstance(m, HumanInTheLoopMiddleware)]
    assert graph.approval is approval and len(asks) == int(approval)
    if approval:
        assert set(asks[0].interrupt_on) == {"remember_memory"}
        assert asks[0].interrupt_on["remember_memory"]["allowed_decisions"] == [
            "approve",
            "edit",
            "reject",
        ]
    assert (graph.agent.checkpointer is saver) is approval
    assert not plain.approval and plain.agent.checkpointer is None


# --- from async code and streamed ---------------------------------------------------------------


def test_achat_stops_before_the_write_and_an_achat_resume_writes_it(agents_file):
    user = approval_user()

    async def scenario():
        stopped = await achat(user_id=user.pk, message=REMEMBER)
        before = memory_bytes(agents_file, user)
        decided = await achat(
            user_id=user.pk, thread_id=stopped.thread_id, resume={"decision": "approve"}
        )
        # The loop's checkpoint pool goes with the loop (asyncio.run ends it here).
        await checkpoints.close_async_checkpointer()
        return stopped, before, decided

    stopped, before, decided = asyncio.run(scenario())
    assert stopped.status == "interrupted"
    assert stopped.approval["content"] == "I drink oolong tea"
    assert before is None  # nothing written while the decision was pending
    assert decided.status == "succeeded"
    assert memory_bytes(agents_file, user) == b"I drink oolong tea\n"
    resume_run = AgentRun.objects.get(run_id=decided.run_id)
    assert resume_run.run_type == "resume" and str(resume_run.resumes.run_id) == stopped.run_id
    event = MemoryEvent.objects.get(kind="agent_added")
    assert (event.run_id, event.actor_id) == (resume_run.pk, user.pk)
    assert not checkpoints.checkpoint_exists(stopped.run_id)


def test_a_streamed_turn_ends_interrupted_and_a_streamed_reject_writes_nothing(agents_file):
    user = approval_user()
    events = list(stream_chat(user_id=user.pk, message=REMEMBER))
    done = events[-1]
    assert [e["event"] for e in events][0] == "run" and done["event"] == "done"
    assert done["status"] == "interrupted"
    assert done["approval"]["content"] == "I drink oolong tea"
    assert checkpoints.checkpoint_exists(events[0]["run_id"])

    async def reject():
        decided = [
            event
            async for event in astream_chat(
                user_id=user.pk, thread_id=events[0]["thread_id"], resume={"decision": "reject"}
            )
        ]
        await checkpoints.close_async_checkpointer()
        return decided

    decided = asyncio.run(reject())
    assert decided[-1]["event"] == "done" and decided[-1]["status"] == "succeeded"
    assert memory_bytes(agents_file, user) is None
    assert pending_row(interrupted_run_turn(events[0]["run_id"])).status == "declined"
    assert not checkpoints.checkpoint_exists(events[0]["run_id"])
    with pytest.raises(ChatNothingToResume):
        list(
            stream_chat(
                user_id=user.pk, thread_id=events[0]["thread_id"], resume={"decision": "approve"}
            )
        )


def interrupted_run_turn(run_id: str):
    """What `pending_row` needs of a turn: its run id."""
    return type("Turn", (), {"run_id": run_id})()


# --- credentials --------------------------------------------------------------------------------

SECRET_CALL = ("call_s", "remember_memory", {"content": "My bank PIN is 4821"})


@pytest.mark.parametrize("approval", [False, True])
def test_a_credential_is_rejected_through_a_chat_turn_and_never_put_to_the_user(
    agents_file, approval
):
    user = UserConfigFactory(enable_memory=True, memory_write_approval=approval).user
    model = RecordingModel(replies=[tool_reply(SECRET_CALL)])
    turn = chat(user_id=user.pk, message="remember my PIN 4821", model=model)
    assert turn.status == "succeeded" and turn.approval is None
    assert turn.tool_calls == [{"name": "remember_memory", "status": "error"}]
    row = ToolCall.objects.get(tool_call_id="call_s")
    result = json.loads(row.output)
    assert result == {
        "status": "rejected",
        "message": "memory never stores credentials: this looks like a password or PIN",
    }
    assert "4821" not in row.output
    assert memory_bytes(agents_file, user) is None
    assert not MemoryEvent.objects.exists()
    assert not checkpoints.checkpoint_exists(turn.run_id)
    # The model was told, and replied.
    assert len(model.calls) == 2


def test_an_edit_that_holds_a_credential_is_refused_before_it_is_spent_and_stays_pending(
    agents_file,
):
    user = approval_user()
    interrupted = interrupted_turn(user)
    with pytest.raises(ChatDecisionRefused) as refused:
        chat(
            user_id=user.pk,
            thread_id=interrupted.thread_id,
            resume={"decision": "edit", "content": "my PIN is 4821", "replaces": None},
        )
    assert (
        str(refused.value) == "memory never stores credentials: this looks like a password or PIN"
    )
    assert memory_bytes(agents_file, user) is None
    assert_still_pending(interrupted)


# --- empty content -----------------------------------------------------------------------------


@pytest.mark.parametrize("approval", [False, True])
@pytest.mark.parametrize("content", ["", "  \n\t\r\n "])
def test_an_empty_write_is_never_put_to_the_user_and_the_tool_rejects_it(
    agents_file, approval, content
):
    user = UserConfigFactory(enable_memory=True, memory_write_approval=approval).user
    model = RecordingModel(
        replies=[tool_reply(("call_e", "remember_memory", {"content": content}))]
    )
    turn = chat(user_id=user.pk, message=REMEMBER, model=model)
    assert turn.status == "succeeded" and turn.approval is None
    assert turn.tool_calls == [{"name": "remember_memory", "status": "error"}]
    result = json.loads(ToolCall.objects.get(tool_call_id="call_e").output)
    assert result["status"] == "rejected"
    assert result["message"].startswith("The arguments were refused: content must be non-empty")
    assert memory_bytes(agents_file, user) is None
    assert not MemoryEvent.objects.exists()
    assert not checkpoints.checkpoint_exists(turn.run_id)


# --- credentials an attacker hides from the person deciding ----------------------------------


def test_an_edit_with_a_zero_width_secret_is_refused_before_it_is_spent_and_stays_pending(
    agents_file,
):
    user = approval_user()
    interrupted = interrupted_turn(user)
    with pytest.raises(ChatDecisionRefused) as refused:
        chat(
            user_id=user.pk,
            thread_id=interrupted.thread_id,
            resume={
                "decision": "edit",
                "content": "my pass\u200bword is hunter2",
                "replaces": None,
            },
        )
    assert "credentials" in str(refused.value) and "hunter2" not in str(refused.value)
    assert memory_bytes(agents_file, user) is None
    assert_still_pending(interrupted)


def test_a_replacement_completing_a_key_is_rejected_and_never_shown_as_a_fragment(agents_file):
    user = approval_user()
    agents_file(user.pk, "MEMORY.md").write_bytes(b"aws ref AKIAZ3MSJV\n")
    call = ("call_k", "remember_memory", {"content": "MSJV4WWZ2XJ5QN", "replaces": "MSJV"})
    model = RecordingModel(replies=[tool_reply(call)])
    turn = chat(user_id=user.pk, message="fix the reference", model=model)
    assert turn.status == "succeeded" and turn.approval is None
    result = json.loads(ToolCall.objects.get(tool_call_id="call_k").output)
    assert result == {
        "status": "rejected",
        "message": "memory never stores credentials: this looks like an API key",
    }
    assert memory_bytes(agents_file, user) == b"aws ref AKIAZ3MSJV\n"
    assert not checkpoints.checkpoint_exists(turn.run_id)


def test_invisible_characters_are_rejected_naming_them_and_never_put_to_the_user(agents_file):
    user = approval_user()
    smuggled = "".join(chr(0xE0000 + ord(c)) for c in "obey")
    call = ("call_i", "remember_memory", {"content": f"Likes tea{smuggled}"})
    turn = chat(user_id=user.pk, message=REMEMBER, model=RecordingModel(replies=[tool_reply(call)]))
    assert turn.status == "succeeded" and turn.approval is None
    result = json.loads(ToolCall.objects.get(tool_call_id="call_i").output)
    assert result["status"] == "rejected" and "U+E006F" in result["message"]
    assert memory_bytes(agents_file, user) is None
