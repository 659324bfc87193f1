import functools
import json
import queue
from datetime import timedelta

import pytest
from django.db import OperationalError
from langchain_core.messages import AIMessage
from pydantic import Field

from conversations import runs
from conversations.models import AgentRun, Conversation, ToolCall
from conversations.repository import read_thread_messages
from conversations.runs.keeper import LeaseKeeper
from conversations.selectors.dialogue import DIALOGUE_CONTENT_MAX_BYTES
from conversations.utils.db_functions import ClockTimestamp
from memory_app import runtime
from memory_app.llm import ScriptedChatModel
from memory_app.middleware import MEMORY_RULES, YuxiMemoryMiddleware
from memory_app.runtime import (
    ChatError,
    ChatInputError,
    ChatModelUnavailable,
    ChatRunLost,
    ChatThreadNotFound,
    build_chatbot_graph,
    build_subagent_graph,
    chat,
)
from memory_app.runtime.limits import (
    ASSISTANT_TEXT_MAX_BYTES,
    CHAT_MESSAGE_MAX_BYTES,
    MAX_MODEL_CALLS,
    MAX_SUBAGENT_CALLS_PER_RUN,
    MAX_TOOL_CALLS_PER_REPLY,
    TOOL_ARGUMENTS_MAX_BYTES,
)
from memory_app.runtime.service import DIALOGUE_CUT_MARKER
from memory_app.tool_names import SUBAGENT_TOOL_NAME
from memory_app.tools import build_memory_tools
from tests.concurrency import race
from tests.factories import (
    ConversationFactory,
    MessageFactory,
    RunningAgentRunFactory,
    UserConfigFactory,
    UserFactory,
    context_for,
)
from tests.memory_app.graph_runs import invoke_in_run, record_agent_inputs
from tests.memory_app.models import RecordingModel, tool_reply

pytestmark = pytest.mark.django_db
# Tools run on LangGraph's pool threads, which cannot see a test's transaction.
tools_run = pytest.mark.django_db(transaction=True)

MEMORY_TOOLS = ["remember_memory", "search_thread_messages", "read_thread_messages"]


def memory_user(enable_memory: bool = True):
    return UserConfigFactory(enable_memory=enable_memory).user


def has_memory(graph) -> bool:
    return any(isinstance(m, YuxiMemoryMiddleware) for m in graph.middleware)


# --- graphs -------------------------------------------------------------------------------


def test_chatbot_graph_with_memory_off_has_no_memory_prompt_tool_or_read(opened_files, agents_file):
    run = RunningAgentRunFactory()
    UserConfigFactory(user=run.user, enable_memory=False)
    agents_file(run.user_id, "AGENTS.md").write_text("Be brief.")
    agents_file(run.user_id, "MEMORY.md").write_text("remembered-fact")
    graph = build_chatbot_graph(context_for(run))
    assert graph.tools == [] and not has_memory(graph)
    assert "Be brief." in graph.system_prompt
    assert "remembered-fact" not in graph.system_prompt
    assert MEMORY_RULES not in graph.system_prompt
    assert "MEMORY.md" not in opened_files


def test_chatbot_graph_with_memory_on_has_the_middleware_its_prompt_and_three_tools(agents_file):
    run = RunningAgentRunFactory()
    UserConfigFactory(user=run.user)
    agents_file(run.user_id, "AGENTS.md").write_text("Be brief.")
    agents_file(run.user_id, "MEMORY.md").write_text("remembered-fact")
    graph = build_chatbot_graph(context_for(run))
    assert [type(m) for m in graph.middleware if isinstance(m, YuxiMemoryMiddleware)] == [
        YuxiMemoryMiddleware
    ]
    assert [tool.name for tool in graph.tools] == MEMORY_TOOLS
    assert "Be brief." in graph.system_prompt
    assert graph.system_prompt.count(MEMORY_RULES) == 1
    assert "remembered-fact" in graph.system_prompt


def test_subagent_graph_never_has_memory_even_with_memory_on(opened_files, agents_file):
    run = RunningAgentRunFactory()
    UserConfigFactory(user=run.user)
    agents_file(run.user_id, "USER.md").write_text("I am a botanist.")
    agents_file(run.user_id, "MEMORY.md").write_text("remembered-fact")
    graph = build_subagent_graph(context_for(run))
    assert graph.tools == [] and not has_memory(graph)
    assert "I am a botanist." in graph.system_prompt
    assert "remembered-fact" not in graph.system_prompt
    assert "USER MEMORY" not in graph.system_prompt and MEMORY_RULES not in graph.system_prompt
    assert "MEMORY.md" not in opened_files


def test_a_second_worker_gets_no_memory_and_cannot_write_through_a_tool(agents_file):
    run = RunningAgentRunFactory()
    UserConfigFactory(user=run.user)
    assert build_chatbot_graph(context_for(run, worker_id="intruder")).tools == []
    remember = build_memory_tools(context_for(run, worker_id="intruder"))[0]
    assert json.loads(remember.invoke({"content": "forged"}))["status"] == "denied"
    assert not agents_file(run.user_id, "MEMORY.md").exists()


# --- the Chat service ---------------------------------------------------------------------


@tools_run
def test_remember_request_writes_memory_and_persists_the_whole_turn(agents_file):
    user = memory_user()
    turn = chat(user_id=user.pk, message="Please remember that I drink oolong tea", model=None)
    assert agents_file(user.pk, "MEMORY.md").read_text() == "I drink oolong tea\n"
    assert turn.tool_calls == [{"name": "remember_memory", "status": "success"}]
    assert turn.reply == "Saved to memory."  # the scripted model says it in words
    assert type(turn.reply) is str  # plain text, not LangChain's callable accessor
    thread = Conversation.objects.get(thread_id=turn.thread_id)
    assert (thread.user_id, thread.source, thread.parent_id) == (user.pk, "chat", None)
    rows = [(m.role, m.message_type) for m in thread.messages.all()]
    assert rows == [
        ("user", "text"),
        ("assistant", "tool_call"),
        ("tool", "tool_result"),
        ("assistant", "text"),
    ]
    call = ToolCall.objects.get(message__conversation=thread)
    assert call.message == thread.messages.all()[1]
    assert (call.name, call.input, call.status) == (
        "remember_memory",
        {"content": "I drink oolong tea"},
        "success",
    )
    assert json.loads(call.output)["status"] == "added"
    run = AgentRun.objects.get(run_id=turn.run_id)
    assert (run.run_type, run.status, run.parent_run_id, run.error) == (
        "chat",
        "succeeded",
        None,
        "",
    )
    assert (run.worker_id, run.lease_expires_at) == (None, None)


@tools_run
def test_a_chat_turns_tool_call_is_read_back_through_lookback_with_include_tools():
    """A reply with text carries its calls into lookback; one that only called tools is a
    hidden `tool_call` message, and lookback returns nothing of hidden messages."""
    user = memory_user()
    reply = AIMessage(
        content="Saving that.",
        tool_calls=[{"id": "c1", "name": "remember_memory", "args": {"content": "tea"}}],
    )
    turn = chat(user_id=user.pk, message="remember tea", model=RecordingModel(replies=[reply]))
    chat(user_id=user.pk, message="remember that I drink oolong", thread_id=turn.thread_id)
    response = read_thread_messages(user.pk, turn.thread_id, include_tools=True)
    [call] = response["tool_calls"]
    assert (call["name"], call["input"], call["status"]) == (
        "remember_memory",
        {"content": "tea"},
        "success",
    )
    issuer = next(m for m in response["messages"] if m["message_id"] == call["message_id"])
    assert (issuer["role"], issuer["content"]) == ("assistant", "Saving that.")
    assert ToolCall.objects.filter(name="remember_memory").count() == 2


def test_memory_off_offers_no_memory_tool_and_writes_no_file(agents_file):
    user = memory_user(enable_memory=False)
    model = RecordingModel()
    turn = chat(user_id=user.pk, message="remember that I drink oolong tea", model=model)
    assert model.tool_names() == [SUBAGENT_TOOL_NAME]
    assert MEMORY_RULES not in model.system_prompt()
    assert turn.tool_calls == []
    assert turn.reply == "You said: remember that I drink oolong tea"
    assert not agents_file(user.pk, "MEMORY.md").exists()
    assert not ToolCall.objects.exists()


@tools_run
def test_a_new_thread_sees_what_an_earlier_thread_remembered():
    user = memory_user()
    first = chat(user_id=user.pk, message="remember that my cat is called Miso")
    model = RecordingModel()
    second = chat(user_id=user.pk, message="What do you remember?", model=model)
    assert second.thread_id != first.thread_id
    assert model.system_prompt().count("my cat is called Miso") == 1
    assert model.system_prompt().count(MEMORY_RULES) == 1
    assert second.reply == "From memory:\nmy cat is called Miso"


@tools_run
def test_a_tool_kept_after_its_run_finished_is_denied(agents_file, monkeypatch):
    user = memory_user()
    inputs = record_agent_inputs(monkeypatch)
    chat(user_id=user.pk, message="remember that I like tea")
    (turn,) = inputs
    remember = turn.graph.tools[0]
    # The shared graph's tool, called again with the finished run's context...
    late = invoke_in_run(remember, {"content": "written too late"}, context=turn.context)
    assert json.loads(late)["status"] == "denied"
    # ...and outside any run.
    assert json.loads(remember.invoke({"content": "written too late"}))["status"] == "denied"
    assert agents_file(user.pk, "MEMORY.md").read_text() == "I like tea\n"


def test_continuing_a_thread_shows_the_model_its_earlier_dialogue():
    user = memory_user(enable_memory=False)
    first = chat(user_id=user.pk, message="hello there")
    model = RecordingModel()
    chat(user_id=user.pk, message="again", thread_id=first.thread_id, model=model)
    shown = [(m.type, m.text) for m in model.calls[0]["messages"][1:]]
    assert shown == [
        ("human", "hello there"),
        ("ai", "You said: hello there"),
        ("human", "again"),
    ]


@pytest.mark.parametrize("owner", ["other_user", "archived"])
def test_a_thread_that_is_not_the_users_visible_thread_is_not_found(owner):
    user = UserFactory()
    if owner == "other_user":
        thread = ConversationFactory()
    else:
        thread = ConversationFactory(user=user, status=Conversation.Status.ARCHIVED)
    with pytest.raises(ChatThreadNotFound):
        chat(user_id=user.pk, message="hi", thread_id=thread.thread_id)
    assert not AgentRun.objects.exists()


@pytest.mark.parametrize(
    "message", ["", "   ", None, "nul\x00byte", "x" * (CHAT_MESSAGE_MAX_BYTES + 1)]
)
def test_a_bad_message_is_refused_before_any_run(message):
    with pytest.raises(ChatInputError):
        chat(user_id=UserFactory().pk, message=message)
    assert not AgentRun.objects.exists() and not Conversation.objects.exists()


def test_an_inactive_user_is_refused_before_any_run():
    user = UserFactory(is_active=False)
    with pytest.raises(ChatError):
        chat(user_id=user.pk, message="hi")
    assert not AgentRun.objects.exists() and not Conversation.objects.exists()


@tools_run
def test_a_chat_inside_a_callers_transaction_is_refused():
    from django.db import transaction

    user = UserFactory()
    with transaction.atomic(), pytest.raises(ChatError, match="inside a database transaction"):
        chat(user_id=user.pk, message="hi")
    assert not AgentRun.objects.exists()


def test_a_model_failure_fails_the_run_with_its_error_and_keeps_the_user_message():
    user = UserFactory()

    def broken(step):
        raise ConnectionError("down")

    with pytest.raises(ChatModelUnavailable):
        chat(user_id=user.pk, message="hi", model=RecordingModel(before_step=broken))
    run = AgentRun.objects.get()
    assert (run.status, run.worker_id) == ("failed", None)
    assert "ConnectionError" in run.error
    assert list(run.conversation.messages.values_list("role", "content")) == [("user", "hi")]


@tools_run
def test_a_model_that_never_answers_fails_the_run_at_the_ninth_model_call():
    user = UserFactory()
    replies = [tool_reply((f"c{i}", "no_such_tool", {})) for i in range(MAX_MODEL_CALLS + 1)]
    model = RecordingModel(replies=replies)
    with pytest.raises(ChatModelUnavailable):
        chat(user_id=user.pk, message="loop", model=model)
    assert len(model.calls) == MAX_MODEL_CALLS
    run = AgentRun.objects.get()
    assert run.status == "failed" and str(MAX_MODEL_CALLS) in run.error
    assert ToolCall.objects.filter(status="error").count() == MAX_MODEL_CALLS


@tools_run
def test_unknown_tools_and_unparsable_arguments_are_refused_and_recorded_as_errors(agents_file):
    user = memory_user()
    reply = AIMessage(
        content="",
        tool_calls=[{"id": "c1", "name": "edit_file", "args": {"path": "/etc/passwd"}}],
        invalid_tool_calls=[
            {"id": "c2", "name": "remember_memory", "args": "[1, 2", "error": "not JSON"}
        ],
    )
    model = RecordingModel(replies=[reply])
    turn = chat(user_id=user.pk, message="do things", model=model)
    assert turn.tool_calls == [
        {"name": "edit_file", "status": "error"},
        {"name": "remember_memory", "status": "error"},
    ]
    statuses = [json.loads(c.output)["status"] for c in ToolCall.objects.order_by("id")]
    assert statuses == ["rejected", "rejected"]
    assert not agents_file(user.pk, "MEMORY.md").exists()


@tools_run
def test_a_subagent_call_runs_in_a_child_thread_without_memory(agents_file):
    user = memory_user()
    agents_file(user.pk, "MEMORY.md").write_text("remembered-fact\n")
    model = RecordingModel()
    turn = chat(user_id=user.pk, message="ask the subagent: what do you remember?", model=model)
    parent_run = AgentRun.objects.get(run_id=turn.run_id)
    child_run = AgentRun.objects.get(run_type=AgentRun.RunType.SUBAGENT)
    assert child_run.parent_run_id == parent_run.pk
    assert (child_run.status, child_run.request_id) == ("succeeded", parent_run.request_id)
    child = child_run.conversation
    assert (child.parent_id, child.source, child.user_id) == (
        parent_run.conversation_id,
        Conversation.Source.AGENT_CALL,
        user.pk,
    )
    sub_step = model.calls[1]
    assert sub_step["tools"] == []
    assert "remembered-fact" not in sub_step["messages"][0].text
    assert list(child.messages.values_list("role", "content")) == [
        ("user", "what do you remember?"),
        ("assistant", "I have no saved memory."),
    ]
    call = ToolCall.objects.get(name=SUBAGENT_TOOL_NAME)
    assert json.loads(call.output) == {"status": "ok", "answer": "I have no saved memory."}
    assert turn.tool_calls == [{"name": SUBAGENT_TOOL_NAME, "status": "success"}]


@tools_run
def test_a_subagent_is_never_offered_the_subagent_tool_or_memory_tools(agents_file):
    user = memory_user()
    model = RecordingModel()
    chat(user_id=user.pk, message="ask the subagent: remember that I like tea", model=model)
    assert model.tool_names(0) == [*MEMORY_TOOLS, SUBAGENT_TOOL_NAME]
    assert model.tool_names(1) == []
    assert not agents_file(user.pk, "MEMORY.md").exists()


# --- leases -------------------------------------------------------------------------------


@tools_run
def test_a_worker_that_lost_its_lease_cannot_write_and_does_not_finish_the_run(agents_file):
    user = memory_user()

    def worker_dies(step):
        AgentRun.objects.filter(status="running").update(
            lease_expires_at=ClockTimestamp() - timedelta(seconds=1)
        )

    model = RecordingModel(before_step=worker_dies)
    with pytest.raises(ChatRunLost):
        chat(user_id=user.pk, message="remember that I like tea", model=model)
    assert not agents_file(user.pk, "MEMORY.md").exists()
    # The fenced-off worker stored nothing past the user's message, and left the run running.
    run = AgentRun.objects.get()
    assert list(run.conversation.messages.values_list("role", flat=True)) == ["user"]
    assert not ToolCall.objects.exists()
    assert runs.fail_expired_runs() == 1
    assert AgentRun.objects.get().status == "failed"


# Long enough that no scheduling delay lets a lease lapse between two keeper beats (a third
# of it apart); the tests wait on the keeper's renewals, never on the clock.
LONG_LEASE_SECONDS = 30
# Only a guard against a keeper that never renews: the wait fails instead of hanging.
KEEPER_WAIT_SECONDS = 5 * LONG_LEASE_SECONDS


def watch_keeper_renewals(monkeypatch, *, fail_first: bool = False) -> queue.Queue:
    """Every beat of the lease keeper, as `("renewed", {run_id: lease_expires_at})` or
    `("failed", None)` (a database blip, when `fail_first`), in order."""
    real_renew = LeaseKeeper._renew
    events: queue.Queue = queue.Queue()
    failed = []

    def renew(keeper, held):
        if fail_first and not failed:
            failed.append(True)
            events.put(("failed", None))
            raise OperationalError("connection lost")  # a database blip at the OS boundary
        renewed, busy = real_renew(keeper, held)
        leases = dict(
            AgentRun.objects.filter(run_id__in=renewed).values_list("run_id", "lease_expires_at")
        )
        from django.db import connection

        connection.close()
        events.put(("renewed", {str(k): v for k, v in leases.items()}))
        return renewed, busy

    monkeypatch.setattr(LeaseKeeper, "_renew", renew)
    return events


def keeper_events_until_renewed_past(events: queue.Queue, run_id: str, lease) -> list[tuple]:
    """The keeper's beats up to the first that moves `run_id`'s lease past `lease`."""
    seen = [events.get(timeout=KEEPER_WAIT_SECONDS)]
    while not (seen[-1][0] == "renewed" and seen[-1][1].get(run_id, lease) > lease):
        seen.append(events.get(timeout=KEEPER_WAIT_SECONDS))
    return seen


@tools_run
def test_a_model_call_in_progress_has_its_lease_extended_and_the_turn_completes(
    agents_file, settings, monkeypatch
):
    settings.AGENT_RUN_LEASE_SECONDS = LONG_LEASE_SECONDS
    user = memory_user()
    events = watch_keeper_renewals(monkeypatch)
    observed = {}

    def long_step(step):
        if step > 1:
            return
        run = AgentRun.objects.get(run_type="chat")
        # The model call does not return until the keeper has extended the lease it began with.
        keeper_events_until_renewed_past(events, str(run.run_id), run.lease_expires_at)
        observed["started_with"] = run.lease_expires_at
        observed["stored"] = AgentRun.objects.get(run_type="chat").lease_expires_at

    runs.lease_keeper()._wake.set()  # a beat now rather than a third of a lease from now
    model = RecordingModel(before_step=long_step)
    turn = chat(user_id=user.pk, message="remember that slow models are fine", model=model)
    assert observed["stored"] > observed["started_with"]
    assert turn.tool_calls == [{"name": "remember_memory", "status": "success"}]
    assert agents_file(user.pk, "MEMORY.md").read_text() == "slow models are fine\n"
    assert AgentRun.objects.get(run_id=turn.run_id).status == "succeeded"


@tools_run
def test_a_failed_lease_renewal_is_retried_rather_than_ending_the_renewals(
    agents_file, settings, monkeypatch
):
    settings.AGENT_RUN_LEASE_SECONDS = LONG_LEASE_SECONDS
    user = memory_user()
    events = watch_keeper_renewals(monkeypatch, fail_first=True)
    observed = {}

    def long_step(step):
        if step > 1:
            return
        run = AgentRun.objects.get(run_type="chat")
        observed["events"] = keeper_events_until_renewed_past(
            events, str(run.run_id), run.lease_expires_at
        )
        observed["started_with"] = run.lease_expires_at
        observed["stored"] = AgentRun.objects.get(run_type="chat").lease_expires_at

    turn = chat(user_id=user.pk, message="hi", model=RecordingModel(before_step=long_step))
    [failure, *_, (outcome, _)] = observed["events"]
    assert (failure, outcome) == (("failed", None), "renewed")
    assert observed["stored"] > observed["started_with"]
    assert AgentRun.objects.get(run_id=turn.run_id).status == "succeeded"


def test_the_runtime_module_re_exports_the_context_type():
    assert runtime.ToolRuntimeContext is runs.ToolRuntimeContext


def test_a_huge_earlier_reply_reaches_the_model_cut_and_marked():
    user = memory_user(enable_memory=False)
    thread = ConversationFactory(user=user)
    MessageFactory(conversation=thread, role="assistant", content="x" * 10**6)
    model = RecordingModel()
    chat(user_id=user.pk, message="and now?", thread_id=thread.thread_id, model=model)
    earlier = model.calls[0]["messages"][1]
    assert earlier.type == "ai"
    assert earlier.text == "x" * DIALOGUE_CONTENT_MAX_BYTES + "\n" + DIALOGUE_CUT_MARKER


def test_recent_messages_of_other_threads_never_reach_the_model():
    user = memory_user(enable_memory=False)
    MessageFactory(conversation=ConversationFactory(user=user), content="other-thread-text")
    model = RecordingModel()
    chat(user_id=user.pk, message="hi", model=model)
    assert "other-thread-text" not in str([m.text for m in model.calls[0]["messages"]])


@tools_run
def test_concurrent_chats_of_one_user_each_keep_their_remembered_fact(agents_file):
    user = memory_user()
    facts = [f"fact number {i}" for i in range(4)]
    turns = race(
        lambda fact: chat(user_id=user.pk, message=f"remember that {fact}"),
        [(fact,) for fact in facts],
    )
    lines = agents_file(user.pk, "MEMORY.md").read_text().splitlines()
    assert sorted(lines) == facts
    assert {turn.tool_calls[0]["status"] for turn in turns} == {"success"}
    assert set(AgentRun.objects.values_list("status", flat=True)) == {"succeeded"}


@tools_run
def test_two_tool_calls_in_one_reply_run_in_order_and_both_succeed(agents_file):
    user = memory_user()
    reply = tool_reply(
        ("c1", "remember_memory", {"content": "I live in Lyon"}),
        ("c2", "remember_memory", {"content": "I live in Paris", "replaces": "I live in Lyon"}),
    )
    turn = chat(user_id=user.pk, message="moving", model=RecordingModel(replies=[reply]))
    assert turn.tool_calls == [
        {"name": "remember_memory", "status": "success"},
        {"name": "remember_memory", "status": "success"},
    ]
    outputs = [json.loads(c.output)["status"] for c in ToolCall.objects.order_by("id")]
    assert outputs == ["added", "replaced"]
    assert agents_file(user.pk, "MEMORY.md").read_text() == "I live in Paris\n"


# --- untrusted model output -----------------------------------------------------------------


@pytest.mark.parametrize(
    "reply",
    [
        AIMessage(content="a NUL \x00 in the answer"),
        AIMessage(content="a lone surrogate \ud800"),
        tool_reply(("c\x00", "remember_memory", {})),
        tool_reply(("c" * 1000, "remember_memory", {})),
        tool_reply(("c1", "n" * 1000, {})),
        tool_reply(
            *(
                (f"c{i}", SUBAGENT_TOOL_NAME, {"task": "spin"})
                for i in range(MAX_TOOL_CALLS_PER_REPLY + 1)
            )
        ),
    ],
    ids=["nul-text", "surrogate-text", "nul-call-id", "long-call-id", "long-name", "call-flood"],
)
def test_a_model_reply_the_runtime_cannot_store_or_bound_fails_the_run_as_model_error(reply):
    user = memory_user()
    with pytest.raises(ChatModelUnavailable):
        chat(user_id=user.pk, message="hi", model=RecordingModel(replies=[reply]))
    assert list(AgentRun.objects.values_list("run_type", "status")) == [("chat", "failed")]
    assert AgentRun.objects.get().error
    assert not ToolCall.objects.exists()


@tools_run
@pytest.mark.parametrize(
    "arguments",
    [
        {"content": "a NUL \x00 fact"},
        {"content": "a lone surrogate \udc00"},
        {"content": ["\x00"]},
        {"content": float("nan")},
        {"content": float("inf")},
        {"content": 10**5000},
        functools.reduce(lambda inner, _: {"content": inner}, range(10_000), "deep"),
        {"content": functools.reduce(lambda inner, _: [inner], range(33), "deep")},
    ],
    ids=["nul", "surrogate", "nested-nul", "nan", "infinity", "huge-int", "too-deep", "deep-33"],
)
def test_tool_arguments_no_database_can_store_are_rejected_and_the_run_goes_on(
    agents_file, arguments
):
    user = memory_user()
    model = RecordingModel(replies=[tool_reply(("c1", "remember_memory", arguments))])
    turn = chat(user_id=user.pk, message="remember it", model=model)
    assert turn.tool_calls == [{"name": "remember_memory", "status": "error"}]
    recorded = ToolCall.objects.get()
    assert (recorded.input, json.loads(recorded.output)["status"]) == ({}, "rejected")
    assert AgentRun.objects.get().status == "succeeded"
    assert turn.reply.startswith("Not done (remember_memory):")
    assert not agents_file(user.pk, "MEMORY.md").exists()


@tools_run
@pytest.mark.parametrize(
    "arguments",
    [{"task": "spin", "uid": "1"}, {"task": "spin", "thread_id": "thread-x"}, {"task": 5}, {}],
)
def test_the_subagent_tool_rejects_arguments_outside_its_schema(arguments):
    user = memory_user()
    model = RecordingModel(replies=[tool_reply(("c1", SUBAGENT_TOOL_NAME, arguments))])
    turn = chat(user_id=user.pk, message="delegate", model=model)
    assert turn.tool_calls == [{"name": SUBAGENT_TOOL_NAME, "status": "error"}]
    assert json.loads(ToolCall.objects.get().output)["status"] == "rejected"
    assert not AgentRun.objects.filter(run_type=AgentRun.RunType.SUBAGENT).exists()


# --- bounded model output and bounded turns -------------------------------------------------


@pytest.mark.parametrize(
    "reply",
    [
        AIMessage(content="é" * (ASSISTANT_TEXT_MAX_BYTES // 2) + "x"),
        AIMessage(
            content="x" * (ASSISTANT_TEXT_MAX_BYTES + 1),
            tool_calls=[{"id": "c1", "name": "remember_memory", "args": {"content": "tea"}}],
        ),
    ],
    ids=["text", "text-with-a-tool-call"],
)
def test_a_reply_over_the_text_cap_fails_the_run_and_nothing_of_it_is_stored(reply, agents_file):
    user = memory_user()
    with pytest.raises(ChatModelUnavailable):
        chat(user_id=user.pk, message="hi", model=RecordingModel(replies=[reply]))
    run = AgentRun.objects.get()
    assert run.status == "failed"
    assert str(ASSISTANT_TEXT_MAX_BYTES) in run.error
    assert list(run.conversation.messages.values_list("role", "content")) == [("user", "hi")]
    assert not ToolCall.objects.exists()
    assert not agents_file(user.pk, "MEMORY.md").exists()


def test_a_reply_of_exactly_the_text_cap_is_stored_and_returned():
    user = memory_user(enable_memory=False)
    text = "é" * (ASSISTANT_TEXT_MAX_BYTES // 2)
    turn = chat(user_id=user.pk, message="hi", model=RecordingModel(replies=[AIMessage(text)]))
    assert turn.reply == text
    run = AgentRun.objects.get(run_id=turn.run_id)
    assert run.conversation.messages.get(role="assistant").content == text


def delegation_of_serialized_size(size: int) -> dict:
    """`delegate_to_subagent` arguments whose compact JSON is `size` bytes of UTF-8."""
    frame = len(json.dumps({"task": ""}, separators=(",", ":")))
    return {"task": "t" * (size - frame)}


@tools_run
def test_tool_arguments_over_the_size_cap_are_rejected_stored_without_them_and_the_run_goes_on():
    user = memory_user()
    arguments = delegation_of_serialized_size(TOOL_ARGUMENTS_MAX_BYTES + 1)
    model = RecordingModel(replies=[tool_reply(("c1", SUBAGENT_TOOL_NAME, arguments))])
    turn = chat(user_id=user.pk, message="delegate", model=model)
    assert turn.tool_calls == [{"name": SUBAGENT_TOOL_NAME, "status": "error"}]
    recorded = ToolCall.objects.get()
    result = json.loads(recorded.output)
    assert (recorded.input, result["status"]) == ({}, "rejected")
    assert str(TOOL_ARGUMENTS_MAX_BYTES) in result["message"]
    assert AgentRun.objects.get().status == "succeeded"
    assert not AgentRun.objects.filter(run_type=AgentRun.RunType.SUBAGENT).exists()
    # The model saw the refusal and answered: the run went on.
    assert turn.reply.startswith("Not done (")


@tools_run
def test_tool_arguments_of_exactly_the_size_cap_are_stored_and_run():
    user = memory_user()
    arguments = delegation_of_serialized_size(TOOL_ARGUMENTS_MAX_BYTES)
    model = RecordingModel(replies=[tool_reply(("c1", SUBAGENT_TOOL_NAME, arguments))])
    turn = chat(user_id=user.pk, message="delegate", model=model)
    assert turn.tool_calls == [{"name": SUBAGENT_TOOL_NAME, "status": "success"}]
    assert ToolCall.objects.get(message__conversation__parent=None).input == arguments
    assert AgentRun.objects.filter(run_type=AgentRun.RunType.SUBAGENT).count() == 1


@tools_run
def test_a_third_delegation_in_one_run_is_rejected_and_the_run_goes_on():
    user = memory_user()
    first = tool_reply(("c1", SUBAGENT_TOOL_NAME, {"task": "one"}))
    more = tool_reply(
        ("c2", SUBAGENT_TOOL_NAME, {"task": "two"}),
        ("c3", SUBAGENT_TOOL_NAME, {"task": "three"}),
    )
    model = RecordingModel(replies=[first, AIMessage("sub one"), more, AIMessage("sub two")])
    turn = chat(user_id=user.pk, message="delegate thrice", model=model)
    assert MAX_SUBAGENT_CALLS_PER_RUN == 2
    assert turn.tool_calls == [
        {"name": SUBAGENT_TOOL_NAME, "status": "success"},
        {"name": SUBAGENT_TOOL_NAME, "status": "success"},
        {"name": SUBAGENT_TOOL_NAME, "status": "error"},
    ]
    calls = ToolCall.objects.filter(message__conversation__parent=None).order_by("id")
    third = json.loads(calls[2].output)
    assert third["status"] == "rejected"
    assert str(MAX_SUBAGENT_CALLS_PER_RUN) in third["message"]
    children = AgentRun.objects.filter(run_type=AgentRun.RunType.SUBAGENT)
    assert sorted(children.values_list("conversation__title", flat=True)) == ["one", "two"]
    assert AgentRun.objects.get(run_type="chat").status == "succeeded"
    assert turn.reply.splitlines()[-1].startswith(f"Not done ({SUBAGENT_TOOL_NAME}):")


# --- what a tool-calling turn leaves in the history -----------------------------------------


@tools_run
def test_a_reply_that_only_calls_tools_is_stored_as_a_tool_call_message_and_never_shown():
    user = memory_user()
    model = RecordingModel()
    turn = chat(user_id=user.pk, message="remember that I drink oolong tea", model=model)
    thread = Conversation.objects.get(thread_id=turn.thread_id)
    stored = list(thread.messages.values_list("role", "message_type", "content"))
    assert [(role, kind) for role, kind, _ in stored] == [
        ("user", "text"),
        ("assistant", "tool_call"),
        ("tool", "tool_result"),
        ("assistant", "text"),
    ]
    assert ToolCall.objects.get().message.message_type == "tool_call"
    shown = read_thread_messages(user.pk, turn.thread_id)["messages"]
    assert [(item["role"], item["content"]) for item in shown] == [
        ("user", "remember that I drink oolong tea"),
        ("assistant", turn.reply),
    ]
    # The next turn's prompt carries the dialogue only, no empty assistant message.
    chat(user_id=user.pk, message="thanks", thread_id=turn.thread_id, model=model)
    earlier = model.calls[-1]["messages"][1:-1]
    assert [(m.type, m.text) for m in earlier] == [
        ("human", "remember that I drink oolong tea"),
        ("ai", turn.reply),
    ]


class DelegatingForever(ScriptedChatModel):
    """A hostile model: the chat agent asks for as many delegations as a reply may hold, every
    time; a sub-agent (offered no tools) calls a tool that does not exist, every time."""

    calls: list = Field(default_factory=list)

    def reply(self, messages):
        self.calls.append(list(self.bound_tools))
        if SUBAGENT_TOOL_NAME in self.bound_tools:
            tasks = range(MAX_TOOL_CALLS_PER_REPLY)
            return tool_reply(
                *((f"d{len(self.calls)}-{i}", SUBAGENT_TOOL_NAME, {"task": "spin"}) for i in tasks)
            )
        return tool_reply((f"s{len(self.calls)}", "no_such_tool", {}))


@tools_run
def test_a_turn_makes_at_most_24_model_calls_however_the_model_delegates():
    user = memory_user(enable_memory=False)
    model = DelegatingForever()
    with pytest.raises(ChatModelUnavailable):
        chat(user_id=user.pk, message="go", model=model)
    bound = MAX_MODEL_CALLS * (1 + MAX_SUBAGENT_CALLS_PER_RUN)
    assert bound == 24 and len(model.calls) == bound
    assert sum(1 for tools in model.calls if tools) == MAX_MODEL_CALLS
    children = AgentRun.objects.filter(run_type=AgentRun.RunType.SUBAGENT)
    assert children.count() == MAX_SUBAGENT_CALLS_PER_RUN
    assert set(children.values_list("status", flat=True)) == {"failed"}
