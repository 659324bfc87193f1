"""The agent phase of a turn, the one every entry point runs: `prepare(turn)` builds the graph
and the messages it starts from, or the decision it resumes with (its database work through
`on_database`), then the agent's `astream` runs to its answer with the run's context
(`AgentInput.context`) — on a graph with approval, under the checkpoint key
`turn.checkpoint_key` — or until it stops before a memory write. Errors travel in the
outcome, never raised; a cancellation propagates (recording, on the turn, the tool calls that
had ended and those still running).

`run_agent` is its sync adapter (on the process's loop). Streamed with `messages` and `tasks`
modes, it also gives the turn's `ChatEvent`s: `token` from the model node's non-empty chunks,
`tool_call` when a tools task starts, `tool_result` when it has run.
"""

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import aclosing
from typing import Any

from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, ToolMessage
from langchain_core.messages.tool import ToolCall as LangChainToolCall

from conversations import services
from conversations.models import Message, ToolCall
from memory_app.runtime.approval import is_declined, proposed_write
from memory_app.runtime.concurrency.loop import (
    on_database,
    run_sync,
)
from memory_app.runtime.limits import RECURSION_LIMIT
from memory_app.runtime.turns import AgentInput, ChatEvent, Turn, TurnOutcome
from memory_app.tools import ToolResult

# The `create_agent` graph's nodes whose stream chunks become events.
_MODEL_NODE = "model"
_TOOLS_NODE = "tools"


class CheckpointMissing(Exception):
    """Inside a resume: the interrupted graph's checkpoint is gone; nothing can continue."""


def agent_config(turn: Turn, agent_input: AgentInput) -> dict[str, Any]:
    """The run config of the turn's graph: its bounds, and its checkpoint key on a graph with
    approval."""
    config: dict[str, Any] = {"max_concurrency": 1, "recursion_limit": RECURSION_LIMIT}
    if agent_input.graph.approval:
        config["configurable"] = {"thread_id": turn.checkpoint_key}
    return config


def resume_start(agent_input: AgentInput, checkpointed: Any) -> int:
    """Where a resumed turn's own messages begin in its graph state (`checkpointed`, the state
    snapshot the graph resumes from); refuses a resume with nothing to continue."""
    if not checkpointed.next:
        raise CheckpointMissing("the interrupted turn's checkpoint is gone")
    return len(checkpointed.values.get("messages", []))


def outcome_of(
    state: dict[str, Any] | None, start: int, agent_input: AgentInput, turn: Turn
) -> TurnOutcome:
    """The outcome of a graph run whose last streamed state (values) is `state`."""
    if state is None:
        return TurnOutcome(checkpoint_key=_key(turn, agent_input))
    messages = state["messages"]
    stopped = "__interrupt__" in state
    return TurnOutcome(
        produced=messages[start:],
        approval=proposed_write(messages) if stopped else None,
        checkpoint_key=_key(turn, agent_input),
    )


def _key(turn: Turn, agent_input: AgentInput) -> str | None:
    return turn.checkpoint_key if agent_input.graph.approval else None


class _Progress:
    """A run of the agent as its stream tells it: where the turn's own messages start, the
    graph input (the messages, or a resume's decision), the last `values` state, and the
    `ChatEvent`s the `messages` and `tasks` chunks give.

    `token` comes only from the model node's non-empty `AIMessageChunk`s; `tool_call` when a
    tools task starts (its call is the one the run's middleware let through, with the id the
    run uses), `tool_result` when it has run, with the status its `ToolCall` row gets. A
    resumed turn (`checkpointed`: the state snapshot it resumes from) starts where the
    interrupted state ends.
    """

    def __init__(self, turn: Turn, agent_input: AgentInput, checkpointed: Any = None) -> None:
        self.turn = turn
        self.agent_input = agent_input
        if agent_input.resume is not None:
            self.start = resume_start(agent_input, checkpointed)
            self.graph_input: Any = agent_input.resume
        else:
            self.start = len(agent_input.messages)
            self.graph_input = {"messages": agent_input.messages}
        self.state: dict[str, Any] | None = None

    @property
    def produced(self) -> Sequence[BaseMessage]:
        return self.state["messages"][self.start :] if self.state is not None else ()

    def feed(self, mode: str, chunk: Any) -> list[ChatEvent]:
        if mode == "values":
            self.state = chunk
        elif mode == "messages":
            message, metadata = chunk
            if (
                isinstance(message, AIMessageChunk)
                and metadata.get("langgraph_node") == _MODEL_NODE
                and message.text
            ):
                return [{"event": "token", "text": str(message.text)}]
        elif mode == "tasks" and chunk["name"] == _TOOLS_NODE:
            if "input" in chunk:
                return [
                    {"event": "tool_call", "id": call["id"], "name": call["name"]}
                    for call in chunk["input"]
                ]
            result = chunk.get("result") or {}
            return [
                {
                    "event": "tool_result",
                    "id": message.tool_call_id,
                    "name": message.name or "",
                    "status": str(call_outcome(message)[0]),
                }
                for message in result.get("messages", ())
                if isinstance(message, ToolMessage)
            ]
        return []

    def outcome(self) -> TurnOutcome:
        return outcome_of(self.state, self.start, self.agent_input, self.turn)

    def stream_arguments(self, modes: list[str]) -> dict[str, Any]:
        """How every turn runs its agent: with the run's context, tool calls one at a time,
        under its checkpoint key on a graph with approval."""
        return {
            "input": self.graph_input,
            "context": self.agent_input.context,
            "config": agent_config(self.turn, self.agent_input),
            "stream_mode": modes,
        }


def _failed(
    turn: Turn, agent_input: AgentInput | None, progress: _Progress | None, exc: BaseException
) -> TurnOutcome:
    """The outcome of a turn whose `prepare` or agent raised `exc`: what it produced before."""
    key = _key(turn, agent_input) if agent_input is not None else None
    produced = progress.produced if progress is not None else ()
    return TurnOutcome(produced=produced, error=exc, checkpoint_key=key)


def run_agent(turn: Turn, *, prepare: Callable[[Turn], AgentInput]) -> TurnOutcome:
    """`arun_agent` for sync callers, on the process's event loop (`prepare`'s database work
    on the caller's thread): build the turn's agent, run it to its answer (or to its stop
    before a memory write) and return the outcome; errors travel in the outcome."""
    return run_sync(arun_agent(turn, prepare=prepare))


async def astream_agent(
    turn: Turn, *, prepare: Callable[[Turn], AgentInput], events: bool = True
) -> AsyncIterator[ChatEvent | TurnOutcome]:
    """The agent phase for async callers: `prepare` on a worker thread, then the agent's
    `astream`. Yields the turn's `ChatEvent`s as the agent produces them (when `events`),
    then its `TurnOutcome`, last. Errors travel in the outcome; a cancellation of the caller
    (or the generator being closed) is not an error of the turn and propagates."""
    agent_input: AgentInput | None = None
    progress: _Progress | None = None
    try:
        agent_input = await on_database(prepare)(turn)
        agent = agent_input.graph.agent
        checkpointed = (
            await agent.aget_state(agent_config(turn, agent_input))
            if agent_input.resume is not None
            else None
        )
        progress = _Progress(turn, agent_input, checkpointed)
        modes = ["values", "messages", "tasks"] if events else ["values"]
        async with aclosing(agent.astream(**progress.stream_arguments(modes))) as chunks:
            async for mode, chunk in chunks:
                for event in progress.feed(mode, chunk):
                    yield event
    except (asyncio.CancelledError, GeneratorExit):
        if agent_input is not None:
            ended, running = agent_input.context.calls.tool_calls()
            turn.tool_results.update(ended)
            turn.tools_running.update(running)
        raise
    except BaseException as exc:  # close_turn finishes the run, then re-raises it
        yield _failed(turn, agent_input, progress, exc)
        return
    yield progress.outcome()


async def arun_agent(turn: Turn, *, prepare: Callable[[Turn], AgentInput]) -> TurnOutcome:
    """`run_agent` for async callers (`astream_agent` without events)."""
    async with aclosing(astream_agent(turn, prepare=prepare, events=False)) as steps:
        async for step in steps:
            outcome = step
    return outcome


def call_outcome(result: ToolMessage | None) -> tuple[str, str, str]:
    """(status, output, error) of a tool call from its result message."""
    if result is None:
        return ToolCall.Status.PENDING, "", ""
    if is_declined(result):
        return ToolCall.Status.DECLINED, result.text, services.DECLINED
    typed = result.artifact if isinstance(result.artifact, ToolResult) else None
    if typed is not None and typed.status.is_refusal:
        return ToolCall.Status.ERROR, result.text, typed.message or typed.status
    if result.status == "error":
        return ToolCall.Status.ERROR, result.text, "the tool failed"
    return ToolCall.Status.SUCCESS, result.text, ""


def run_messages(produced: Sequence[BaseMessage]) -> list[services.RunMessage]:
    """The rows to store for the agent's messages: assistant replies with their tool calls
    (settled by the matching tool result), and the tool results themselves.

    A reply that only asks for tools (no text) is a `tool_call` message, not a `text` one:
    only text is dialogue, so history lookback, the staff preview and the next turn's prompt
    never show it as an empty assistant message.
    """
    results = {m.tool_call_id: m for m in produced if isinstance(m, ToolMessage)}
    records = []
    for message in produced:
        if isinstance(message, AIMessage):
            calls = [_run_tool_call(call, results.get(call["id"])) for call in message.tool_calls]
            only_calls = bool(calls) and not message.text.strip()
            records.append(
                services.RunMessage(
                    role=Message.Role.ASSISTANT,
                    message_type=Message.Type.TOOL_CALL if only_calls else Message.Type.TEXT,
                    content=message.text,
                    tool_calls=calls,
                )
            )
        elif isinstance(message, ToolMessage):
            records.append(
                services.RunMessage(
                    role=Message.Role.TOOL,
                    message_type=Message.Type.TOOL_RESULT,
                    content=message.text,
                    metadata={"tool_call_id": message.tool_call_id, "name": message.name or ""},
                )
            )
    return records


def _run_tool_call(call: LangChainToolCall, result: ToolMessage | None) -> services.RunToolCall:
    status, output, error = call_outcome(result)
    return services.RunToolCall(
        tool_call_id=call["id"],
        name=call["name"],
        arguments=call["args"],
        output=output,
        status=status,
        error=error,
    )
