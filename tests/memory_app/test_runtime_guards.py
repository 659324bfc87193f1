"""The run's guard middleware, one concern each, with sync and async hooks that behave the
same: what a sync `invoke` of a shared graph records of its run matches what `ainvoke` does."""

import asyncio
import dataclasses
import json

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool

from conversations.runs.keeper import LeaseKeeper
from memory_app.runtime.context import RunContext
from memory_app.runtime.errors import LeaseLost, ModelFailure
from memory_app.runtime.graphs import GraphShape, shared_graph
from memory_app.runtime.guards import (
    CredentialRefusal,
    LeaseGuard,
    ModelErrors,
    ReplyCheck,
    RunSystemMessage,
    UniqueToolCallIds,
)
from memory_app.runtime.limits import ASSISTANT_TEXT_MAX_BYTES
from memory_app.tools import build_memory_tools
from tests.factories import context_for, memory_run
from tests.memory_app.models import RecordingModel, tool_reply

pytestmark = pytest.mark.django_db(transaction=True)


def _run_context() -> RunContext:
    ctx = context_for(memory_run())
    return RunContext(**dataclasses.asdict(ctx), system_message=SystemMessage("be brief"))


def _graph(model: RecordingModel):
    return shared_graph(
        GraphShape(memory=True), system_message=SystemMessage("be brief"), model=model
    ).agent


def _reply_with_a_search() -> RecordingModel:
    return RecordingModel(
        replies=[tool_reply(("call_s", "search_thread_messages", {"query": "x"}))]
    )


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_started_tool_call_is_recorded_on_the_run_under_invoke_and_ainvoke(mode):
    context = _run_context()
    agent = _graph(_reply_with_a_search())
    arguments = {
        "input": {"messages": [HumanMessage("find x")]},
        "context": context,
        "config": {"max_concurrency": 1},
    }
    if mode == "sync":
        agent.invoke(**arguments)
    else:
        asyncio.run(agent.ainvoke(**arguments))
    ended, running = context.calls.tool_calls()
    assert running == {}
    assert list(ended) == ["call_s"]
    assert isinstance(ended["call_s"], ToolMessage) and ended["call_s"].name == (
        "search_thread_messages"
    )


# --- each guard on its own, through a real `create_agent` graph, sync and async ---------------


def _agent(model: RecordingModel, *middleware, tools=()):
    return create_agent(model, tools=list(tools), middleware=list(middleware))


def _invoke(agent, mode: str, context, text: str = "go") -> dict:
    arguments = {
        "input": {"messages": [HumanMessage(text)]},
        "context": context,
        "config": {"max_concurrency": 1},
    }
    if mode == "sync":
        return agent.invoke(**arguments)
    return asyncio.run(agent.ainvoke(**arguments))


@tool
def look(query: str) -> str:
    """Look something up."""
    return f"looked up {query}"


def _results(state: dict) -> dict[str, dict | str]:
    """Each tool result by call id: a refusal's JSON, or what the tool answered."""
    return {
        m.tool_call_id: json.loads(m.text) if m.text.startswith("{") else m.text
        for m in state["messages"]
        if m.type == "tool"
    }


MODES = pytest.mark.parametrize("mode", ["sync", "async"])


@MODES
def test_the_lease_guard_stops_model_calls_and_refuses_tools_once_the_lease_is_lost(
    mode, monkeypatch
):
    ctx = context_for(memory_run())
    lost = {ctx.run_id}
    monkeypatch.setattr(LeaseKeeper, "lease_lost", lambda keeper, run_id: run_id in lost)
    with pytest.raises(LeaseLost):
        _invoke(_agent(RecordingModel(), LeaseGuard(ctx)), mode, ctx)
    # A tool call the model asked for before the loss is refused, not run.
    lost.clear()
    state = _invoke(
        _agent(
            RecordingModel(replies=[tool_reply(("c2", "look", {"query": "x"}))]),
            _LoseLeaseBeforeTools(lost, ctx.run_id),
            LeaseGuard(ctx),
            tools=[look],
        ),
        mode,
        ctx,
    )
    assert _results(state)["c2"] == {"status": "denied", "message": "this run lost its lease"}


class _LoseLeaseBeforeTools(AgentMiddleware):
    """Marks the run's lease lost once the model has asked for tools (test only)."""

    def __init__(self, lost: set, run_id: str) -> None:
        super().__init__()
        self.lost, self.run_id = lost, run_id

    def after_model(self, state, runtime):
        if state["messages"][-1].tool_calls:
            self.lost.add(self.run_id)

    async def aafter_model(self, state, runtime):
        self.after_model(state, runtime)

    def before_model(self, state, runtime):
        self.lost.discard(self.run_id)

    async def abefore_model(self, state, runtime):
        self.before_model(state, runtime)


@MODES
def test_reply_checks_fail_an_unboundable_reply_and_refuse_unusable_calls(mode):
    ctx = context_for(memory_run())
    too_many = tool_reply(*[(f"c{i}", "look", {"query": "x"}) for i in range(9)])
    with pytest.raises(ModelFailure, match="more than 8 tool calls"):
        _invoke(_agent(RecordingModel(replies=[too_many]), ReplyCheck(ctx)), mode, ctx)
    oversize = AIMessage(content="x" * (ASSISTANT_TEXT_MAX_BYTES + 1))
    with pytest.raises(ModelFailure, match="more than"):
        _invoke(_agent(RecordingModel(replies=[oversize]), ReplyCheck(ctx)), mode, ctx)
    unusable = tool_reply(
        ("c1", "look", {"query": "\x00"}), ("c2", "nowhere", {}), ("c3", "look", {"query": "y"})
    )
    state = _invoke(
        _agent(RecordingModel(replies=[unusable]), ReplyCheck(ctx), tools=[look]), mode, ctx
    )
    results = _results(state)
    assert results["c1"]["status"] == "rejected" and "JSON object" in results["c1"]["message"]
    assert results["c2"] == {"status": "rejected", "message": "no such tool"}
    assert state["messages"][1].tool_calls[0]["args"] == {}  # kept without its arguments
    assert results["c3"] == "looked up y"


@MODES
def test_unique_ids_give_a_missing_or_repeated_call_id_a_fresh_one(mode):
    ctx = context_for(memory_run())
    reply = tool_reply(("same", "look", {"query": "a"}), ("same", "look", {"query": "b"}))
    reply.tool_calls.append(
        {"id": None, "name": "look", "args": {"query": "c"}, "type": "tool_call"}
    )
    model = RecordingModel(replies=[reply])
    state = _invoke(_agent(model, UniqueToolCallIds(), tools=[look]), mode, ctx)
    ids = [call["id"] for call in state["messages"][1].tool_calls]
    assert ids[0] == "same" and len(set(ids)) == 3 and all(ids)
    assert sorted(m.text for m in state["messages"] if m.type == "tool") == [
        "looked up a",
        "looked up b",
        "looked up c",
    ]


class _Broken(RecordingModel):
    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        raise RuntimeError("the provider said: secret prompt text")


@MODES
def test_model_errors_fail_the_run_without_the_providers_message(mode):
    ctx = context_for(memory_run())
    with pytest.raises(ModelFailure) as failed:
        _invoke(_agent(_Broken(), ModelErrors()), mode, ctx)
    assert "RuntimeError" in str(failed.value)
    assert "secret prompt text" not in str(failed.value)


@MODES
def test_the_run_system_message_replaces_the_graphs_for_a_shared_graphs_run(mode):
    context = _run_context()
    model = RecordingModel()
    agent = create_agent(model, system_prompt="graph prompt", middleware=[RunSystemMessage()])
    _invoke(agent, mode, context)
    assert model.system_prompt() == "be brief"


@MODES
def test_a_bound_guard_keeps_the_graphs_own_system_message(mode):
    ctx = context_for(memory_run())
    model = RecordingModel()
    agent = create_agent(model, system_prompt="graph prompt", middleware=[RunSystemMessage(ctx)])
    _invoke(agent, mode, ctx)
    assert model.system_prompt() == "graph prompt"


@MODES
def test_a_shared_guard_refuses_a_run_without_its_run_context(mode):
    ctx = context_for(memory_run())
    with pytest.raises(TypeError, match="RunContext"):
        _invoke(_agent(RecordingModel(), LeaseGuard()), mode, ctx)


@MODES
def test_the_credential_refusal_refuses_a_write_of_a_credential_the_user_stated(mode):
    ctx = context_for(memory_run())
    stated = "my bank PIN is 4921, remember it"
    reply = tool_reply(("c1", "remember_memory", {"content": "PIN 4921"}))
    state = _invoke(
        _agent(
            RecordingModel(replies=[reply]), CredentialRefusal(ctx), tools=build_memory_tools(ctx)
        ),
        mode,
        ctx,
        text=stated,
    )
    assert _results(state)["c1"]["status"] == "rejected"
