"""`ModelCallLimit`: upstream's model call limits, checked and counted inside the model call's
wrapper, so an agent's graph has no node of its own for them."""

import asyncio
import uuid

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import ModelCallLimitMiddleware
from langchain.agents.middleware.model_call_limit import ModelCallLimitExceededError
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool

from conversations import checkpoints
from memory_app.runtime.call_limit import ModelCallLimit
from memory_app.runtime.graphs import agent_middleware
from tests.memory_app.models import RecordingModel, tool_reply


@tool
def look(query: str) -> str:
    """Look something up."""
    return "nothing"


def always_calling(count: int) -> RecordingModel:
    """A model whose next `count` replies each ask for `look`."""
    return RecordingModel(
        replies=[tool_reply((f"c{i}", "look", {"query": "x"})) for i in range(count)]
    )


def run(agent, message: str = "hi", *, asynchronous: bool, **config) -> dict:
    arguments = {"messages": [HumanMessage(message)]}
    if asynchronous:
        return asyncio.run(agent.ainvoke(arguments, config=config or None))
    return agent.invoke(arguments, config=config or None)


def test_the_limit_adds_no_node_to_the_graph_where_upstreams_adds_two():
    def nodes(*middleware) -> set[str]:
        agent = create_agent(RecordingModel(), tools=[look], middleware=list(middleware))
        return set(agent.get_graph().nodes)

    plain = nodes()
    assert nodes(ModelCallLimit(run_limit=8, exit_behavior="error")) == plain
    assert (
        len(nodes(ModelCallLimitMiddleware(run_limit=8, exit_behavior="error"))) == len(plain) + 2
    )


def test_it_is_upstreams_middleware_and_every_graph_of_the_runtime_uses_it():
    limit = ModelCallLimit(run_limit=8, exit_behavior="error")
    assert isinstance(limit, ModelCallLimitMiddleware)
    for approval in (False, True):
        [found] = [
            m
            for m in agent_middleware(memory=None, approval=approval)
            if isinstance(m, ModelCallLimitMiddleware)
        ]
        assert type(found) is ModelCallLimit
        assert (found.run_limit, found.thread_limit, found.exit_behavior) == (8, None, "error")


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_a_call_over_the_run_limit_raises_upstreams_error_before_the_model_is_asked(asynchronous):
    model = always_calling(10)
    agent = create_agent(
        model, tools=[look], middleware=[ModelCallLimit(run_limit=3, exit_behavior="error")]
    )
    with pytest.raises(ModelCallLimitExceededError) as raised:
        run(agent, asynchronous=asynchronous)
    assert len(model.calls) == 3
    assert (raised.value.run_count, raised.value.run_limit) == (3, 3)
    assert "run limit (3/3)" in str(raised.value)


@pytest.mark.parametrize("exit_behavior", ["end", "stop"])
def test_an_exit_behavior_other_than_error_is_refused(exit_behavior):
    """Upstream's "end" jumps from a node of its own to the graph's end, which a model call's
    wrapper cannot do: refused, not imitated with a reply the model never gave."""
    with pytest.raises(ValueError, match='exit_behavior="error" only'):
        ModelCallLimit(run_limit=2, exit_behavior=exit_behavior)


def test_the_default_exit_behavior_is_error():
    assert ModelCallLimit(run_limit=2).exit_behavior == "error"


def test_calls_under_the_limit_are_answered_as_without_it():
    model = always_calling(2)
    agent = create_agent(model, tools=[look], middleware=[ModelCallLimit(run_limit=3)])
    messages = run(agent, "hello", asynchronous=True)["messages"]
    assert len(model.calls) == 3
    assert [type(m).__name__ for m in messages] == [
        "HumanMessage",
        "AIMessage",
        "ToolMessage",
        "AIMessage",
        "ToolMessage",
        "AIMessage",
    ]


@pytest.mark.django_db(transaction=True)
def test_the_run_count_starts_again_at_each_invocation_and_the_thread_count_is_checkpointed():
    model = RecordingModel(replies=[AIMessage("one"), AIMessage("two"), AIMessage("three")])
    saver = checkpoints.checkpointer()
    middleware = [ModelCallLimit(run_limit=1, thread_limit=2, exit_behavior="error")]
    agent = create_agent(model, tools=[look], middleware=middleware, checkpointer=saver)
    key = f"call-limit-{uuid.uuid4()}"
    config = {"configurable": {"thread_id": key}}
    try:
        # One call per invocation: within the run limit of 1 each time, as the run count is
        # not kept; the thread's count, kept in the checkpoint, stops the third.
        run(agent, asynchronous=False, **config)
        run(agent, asynchronous=False, **config)
        with pytest.raises(ModelCallLimitExceededError) as raised:
            run(agent, asynchronous=False, **config)
        assert len(model.calls) == 2
        assert "thread limit (2/2)" in str(raised.value)
        assert saver.get_tuple(config).checkpoint["channel_values"]["thread_model_call_count"] == 2
    finally:
        checkpoints.delete_checkpoints([key])
