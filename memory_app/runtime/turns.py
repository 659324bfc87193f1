"""A turn's parts, shared by its phases: `AgentRunHandle` (a claimed run), `Turn` (an opened
turn), `AgentInput` (what the agent phase runs), `TurnOutcome` (what it produced), the
`ChatEvent` of a streamed turn, and the cancellation policy every entry point follows
(`cancellation`).

The phases, each its own module: `opening` (entry checks, the thread, the run claimed),
`agent_phase` (the agent's `astream`, for every entry point), `closing` (finish the run and
persist, or cancel it); `team` wraps the same open and close around a team's own loop.
"""

import asyncio
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolMessage
from langgraph.types import Command

from conversations.models import AgentRun, Conversation, Message
from conversations.runs import ToolRuntimeContext
from conversations.selectors.approvals import PendingApproval
from memory_app.middleware import MemoryPrompt
from memory_app.runtime.concurrency.loop import CANCELLED_BY_INTERRUPT, cancel_reason
from memory_app.runtime.context import RunContext
from memory_app.runtime.graphs import AgentGraph

# then done or error (memory_app.runtime.streaming builds the first and the last).
ChatEvent = dict[str, Any]

# The `error` of a run whose caller stopped waiting for it.
CANCELLED_BY_CALLER = "cancelled: the caller stopped waiting for the turn"
CANCELLED_BY_READER = "cancelled: the consumer stopped reading the stream"


@dataclass(frozen=True)
class AgentRunHandle:
    """A claimed, running run: its trusted context, id and the lease-lost signal."""

    ctx: ToolRuntimeContext
    run_id: str
    lease_lost: threading.Event  # set by the lease keeper when the lease is lost
    run: AgentRun
    conversation: Conversation


@dataclass(frozen=True)
class Turn:
    """One opened turn: the claimed run and the user message that opened it (`message` and
    its stored row are None for an `agent_run`, whose caller brings its own input, and for a
    resume, which brings the user's `decision` about the `approval` it settles).

    `checkpoint_key` is where the turn's graph keeps its checkpoints when it runs with
    approval: the `run_id` of the run that started the turn (a resume keeps the key of the
    run it resumes). `new_thread`: the turn opened its thread, which holds nothing earlier.
    """

    handle: AgentRunHandle
    message: str | None
    user_message: Message | None
    checkpoint_key: str = ""
    new_thread: bool = False
    decision: dict[str, Any] | None = None
    approval: PendingApproval | None = None
    # Filled when the agent phase is cancelled: the results of the tool calls that had ended,
    # and the calls still running (a started call runs to its end; see `guards.StartedCalls`).
    tool_results: dict[str, ToolMessage] = field(default_factory=dict)
    tools_running: dict[str, asyncio.Future] = field(default_factory=dict)


@dataclass
class Delegations:
    """How many tasks a run has handed to a sub-agent so far."""

    count: int = 0


@dataclass(frozen=True)
class TurnContext(RunContext):
    """A Chat-service run's `RunContext`, with what its sub-agent tool needs: the run it
    delegates from (`handle`), the model the sub-agent runs on, and its `delegations`."""

    handle: AgentRunHandle | None = field(default=None, compare=False, repr=False)
    model: BaseChatModel | None = field(default=None, compare=False, repr=False)
    delegations: Delegations = field(default_factory=Delegations, compare=False, repr=False)

    @classmethod
    def of(
        cls,
        turn: "Turn",
        *,
        system_message: SystemMessage,
        memory: MemoryPrompt | None = None,
        model: BaseChatModel | None,
    ) -> "TurnContext":
        """The context `turn`'s agent runs with: its run's identity, `system_message`, its
        memory section (`memory`, None: none), and `model` for its sub-agent."""
        ctx = turn.handle.ctx
        identity = {f.name: getattr(ctx, f.name) for f in fields(ToolRuntimeContext)}
        return cls(
            **identity,
            system_message=system_message,
            memory=memory,
            handle=turn.handle,
            model=model,
        )


@dataclass(frozen=True)
class AgentInput:
    """What `run_agent` runs: the graph and the messages the agent starts from, or (`resume`)
    the command continuing the graph from its checkpoint, and the `context` the graph runs
    with."""

    graph: AgentGraph
    messages: list[BaseMessage]
    context: TurnContext
    resume: Command | None = None


@dataclass(frozen=True)
class TurnOutcome:
    """What the agent produced (after its input) and the error that stopped it, if any.

    `approval` is the write the graph stopped before (`{"tool_call_id", "content",
    "replaces"}`), None when it did not stop; `checkpoint_key` the key its graph kept
    checkpoints under, None when it kept none.
    """

    produced: Sequence[BaseMessage] = ()
    error: BaseException | None = None
    approval: dict[str, Any] | None = None
    checkpoint_key: str | None = None

    @property
    def reply(self) -> str:
        """The agent's last reply as plain text (LangChain's `.text` is a callable str)."""
        replies = [m for m in self.produced if isinstance(m, AIMessage)]
        return str(replies[-1].text) if replies else ""


def cancellation(exc: BaseException, *, default: str) -> str | None:
    """The cancellation policy, for every entry point: whether `exc`, stopping a turn or a
    run, cancels it, and the run's `error` if so (None: `exc` fails the run instead).

    A consumer that stops reading (`GeneratorExit`), a caller's task cancelled
    (`CancelledError`) and a sync caller interrupted (`KeyboardInterrupt`, `SystemExit`)
    each cancel: the run ends `cancelled` with the reason (`default` unless whoever cancelled
    gave one), and nothing the agent produced is stored. Every other exception fails it.
    """
    if isinstance(exc, KeyboardInterrupt | SystemExit):
        return CANCELLED_BY_INTERRUPT.format(kind=type(exc).__name__)
    if isinstance(exc, asyncio.CancelledError | GeneratorExit):
        return cancel_reason(default)
    return None
