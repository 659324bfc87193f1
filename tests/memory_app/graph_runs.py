"""Helpers for tests of the Chat service's shared graphs: what a turn ran with, and a tool
called from inside a real LangGraph run with a given context (as a shared graph calls it)."""

from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph

from memory_app import runtime


class _ToolState(TypedDict):
    result: Any


def invoke_in_run(tool: Any, arguments: dict[str, Any], *, context: Any) -> Any:
    """`tool.invoke(arguments)` inside a one-node graph invoked with `context=context`: the
    tool reads its run from `runtime.context` exactly as in a shared graph's tool node."""
    graph = StateGraph(_ToolState, context_schema=type(context))
    graph.add_node("call", lambda state: {"result": tool.invoke(arguments)})
    graph.add_edge(START, "call")
    graph.add_edge("call", END)
    return graph.compile().invoke({"result": None}, context=context)["result"]


def record_agent_inputs(monkeypatch: Any) -> list:
    """The `AgentInput` of every chat turn from now on (graph, messages, run context), in
    order."""
    inputs = []
    real = runtime.service.chatbot_input

    def recording(turn, **kwargs):
        inputs.append(real(turn, **kwargs))
        return inputs[-1]

    monkeypatch.setattr(runtime.service, "chatbot_input", recording)
    return inputs
