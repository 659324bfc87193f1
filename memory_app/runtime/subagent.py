"""The sub-agent tool: `DelegateToSubagentTool`, through which the chat agent hands one task
to a sub-agent run. It is a Chat-service tool (not a memory tool): it opens, runs and closes a
child turn with the same three phases as `chat`, on the shared sub-agent graph (no memory).

One tool serves every run of the Chat service's shared graphs: the run it delegates from, its
model and its count of delegations (at most `MAX_SUBAGENT_CALLS_PER_RUN`, which bounds a whole
turn's model calls) come with the run's `TurnContext`."""

import functools
from typing import Any, ClassVar

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage

from conversations.runs import ToolRuntimeContext
from memory_app.runtime.agent_phase import run_agent
from memory_app.runtime.closing import close_turn
from memory_app.runtime.errors import ChatError, ChatInputError
from memory_app.runtime.graphs import GraphShape, run_system_message, shared_graph
from memory_app.runtime.limits import MAX_SUBAGENT_CALLS_PER_RUN
from memory_app.runtime.opening import open_subagent_turn
from memory_app.runtime.turns import AgentInput, Turn, TurnContext
from memory_app.tool_names import SUBAGENT_TOOL_NAME
from memory_app.tools import RunBoundTool, StrictArguments, ToolResult, ToolStatus


class DelegateArguments(StrictArguments):
    task: str


SUBAGENT_SHAPE = GraphShape(subagent=True)


def subagent_input(turn: Turn, *, model: BaseChatModel | None) -> AgentInput:
    """The sub-agent for a child turn: the shared context only, and the task as its input."""
    system_message = run_system_message(turn.handle.ctx, subagent=True)
    return AgentInput(
        graph=shared_graph(SUBAGENT_SHAPE, system_message=system_message, model=model),
        messages=[HumanMessage(turn.message)],
        context=TurnContext.of(turn, system_message=system_message, model=model),
    )


class DelegateToSubagentTool(RunBoundTool):
    """The Chat-service tool that runs one task as a `subagent` run (with `parent_run`) in a
    persisted child thread (with `parent`), built with the SubAgent graph: no memory.

    It serves runs of the Chat service's shared graphs only (their `TurnContext`). A call past
    the run's `MAX_SUBAGENT_CALLS_PER_RUN`-th is `rejected` without opening a child run (the
    parent run goes on). A run's tool calls run one at a time, so the count needs no lock.
    """

    name: str = SUBAGENT_TOOL_NAME
    description: str = "Hand one self-contained task to a sub-agent and get its answer."
    args_schema: Any = {
        "type": "object",
        "properties": {"task": {"type": "string", "description": "The task, in full."}},
        "required": ["task"],
        "additionalProperties": False,
    }
    arguments: ClassVar[type[StrictArguments]] = DelegateArguments

    def _call(
        self, arguments: DelegateArguments, ctx: ToolRuntimeContext, *, tool_call_id: str | None
    ) -> ToolResult:
        if not isinstance(ctx, TurnContext) or ctx.handle is None:
            return ToolResult(ToolStatus.DENIED, "the sub-agent tool runs only in a chat turn")
        if ctx.delegations.count >= MAX_SUBAGENT_CALLS_PER_RUN:
            return ToolResult(
                ToolStatus.REJECTED,
                f"a run may delegate at most {MAX_SUBAGENT_CALLS_PER_RUN} tasks to a sub-agent",
            )
        ctx.delegations.count += 1
        try:
            turn = open_subagent_turn(parent=ctx.handle, task=arguments.task)
        except ChatInputError as exc:
            return ToolResult(ToolStatus.REJECTED, str(exc))
        outcome = run_agent(turn, prepare=functools.partial(subagent_input, model=ctx.model))
        try:
            close_turn(turn, outcome)
        except ChatError:
            return ToolResult(ToolStatus.UNAVAILABLE, "the sub-agent failed")
        return ToolResult(ToolStatus.OK, body={"status": "ok", "answer": outcome.reply})
