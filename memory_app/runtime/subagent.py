"""The sub-agent tool: `DelegateToSubagentTool`, through which the chat agent hands one task
to a sub-agent run. It is a Chat-service tool (not a memory tool): it opens, runs and closes a
child turn with the same three phases as `chat`, on the sub-agent graph (no memory).

One tool is built per run, so it also counts that run's delegations: at most
`MAX_SUBAGENT_CALLS_PER_RUN`, which bounds a whole turn's model calls."""

import functools
from typing import Any, ClassVar

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage
from pydantic import PrivateAttr

from memory_app.runtime.agent_phase import run_agent
from memory_app.runtime.closing import close_turn
from memory_app.runtime.errors import ChatError, ChatInputError
from memory_app.runtime.graphs import build_subagent_graph
from memory_app.runtime.limits import MAX_SUBAGENT_CALLS_PER_RUN
from memory_app.runtime.opening import open_subagent_turn
from memory_app.runtime.turns import AgentInput, AgentRunHandle, Turn
from memory_app.tool_names import SUBAGENT_TOOL_NAME
from memory_app.tools import RunBoundTool, StrictArguments, ToolResult, ToolStatus


class DelegateArguments(StrictArguments):
    task: str


def subagent_input(turn: Turn, *, model: BaseChatModel | None) -> AgentInput:
    """The sub-agent for a child turn: the shared context only, and the task as its input."""
    graph = build_subagent_graph(turn.handle.ctx, model=model)
    return AgentInput(graph=graph, messages=[HumanMessage(turn.message)])


class DelegateToSubagentTool(RunBoundTool):
    """The Chat-service tool that runs one task as a `subagent` run (with `parent_run`) in a
    persisted child thread (with `parent`), built with the SubAgent graph: no memory.

    Build one per run: a call past the run's `MAX_SUBAGENT_CALLS_PER_RUN`-th is `rejected`
    without opening a child run (the parent run goes on). A run's tool calls run one at a
    time, so the count needs no lock.
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
    parent: Any
    model: Any
    _delegations: int = PrivateAttr(default=0)

    def _call(self, arguments: DelegateArguments) -> ToolResult:
        parent: AgentRunHandle = self.parent
        if self._delegations >= MAX_SUBAGENT_CALLS_PER_RUN:
            return ToolResult(
                ToolStatus.REJECTED,
                f"a run may delegate at most {MAX_SUBAGENT_CALLS_PER_RUN} tasks to a sub-agent",
            )
        self._delegations += 1
        try:
            turn = open_subagent_turn(parent=parent, task=arguments.task)
        except ChatInputError as exc:
            return ToolResult(ToolStatus.REJECTED, str(exc))
        outcome = run_agent(turn, prepare=functools.partial(subagent_input, model=self.model))
        try:
            close_turn(turn, outcome)
        except ChatError:
            return ToolResult(ToolStatus.UNAVAILABLE, "the sub-agent failed")
        return ToolResult(ToolStatus.OK, body={"status": "ok", "answer": outcome.reply})
