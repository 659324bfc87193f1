"""The Chat service: `chat(...)` answers one user message (or carries one decision about a
pending memory write) as one turn of the chat agent.

`aturn` is the one implementation of a turn (open, the agent phase, cancellation, close), on
the process's event loop; `chat` (sync) and `achat` (any loop) adapt it, as the streamed entry
points do. `chatbot_input` is what a turn of the chat agent starts from: the thread's earlier
dialogue, the user's message, and the graph with its sub-agent tool — or, for a resume, the
interrupted graph's shape and the user's decision.
"""

import asyncio
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, field, replace
from typing import Any

from django.utils import translation
from django.utils.translation import gettext_noop
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver

from conversations import checkpoints
from conversations.models import AgentRun, Message
from conversations.selectors import dialogue
from memory_app.llm.language import carry_language
from memory_app.middleware import MemoryPrompt
from memory_app.runtime.agent_phase import astream_agent
from memory_app.runtime.approval import decision_command
from memory_app.runtime.closing import acancel_turn, aopen, close_turn
from memory_app.runtime.concurrency.loop import (
    cancel_reason,
    on_database,
    on_process_loop,
    run_sync,
)
from memory_app.runtime.concurrency.settling import settled, to_the_end
from memory_app.runtime.errors import ChatInputError
from memory_app.runtime.graphs import GraphShape, run_system_message, shared_graph, warm_graph
from memory_app.runtime.opening import open_resume_turn, open_turn
from memory_app.runtime.subagent import SUBAGENT_SHAPE, DelegateToSubagentTool
from memory_app.runtime.turns import (
    CANCELLED_BY_CALLER,
    AgentInput,
    ChatEvent,
    Turn,
    TurnContext,
    TurnOutcome,
    cancellation,
)

# Ends an earlier message of the thread that was cut for the prompt.
DIALOGUE_CUT_MARKER = "[cut: the rest of this earlier message is not shown]"


@dataclass(frozen=True)
class ChatTurn:
    """The outcome of one user message or decision: the thread, the run, the assistant's
    reply, and (`status` `interrupted`) the memory write waiting for the user's decision."""

    thread_id: str
    run_id: str
    status: str
    reply: str
    tool_calls: list[dict[str, str]]
    approval: dict[str, Any] | None = None


@dataclass(frozen=True)
class ChatRequest:
    """The arguments of `chat` (and of `achat`, `stream_chat`, `astream_chat`, which take the
    same): how each of them opens its turn and prepares its agent, so every entry point passes
    the same arguments to the same phases."""

    user_id: int
    message: str | None = None
    thread_id: str | None = None
    resume: dict[str, Any] | None = None
    model: BaseChatModel | None = None
    # Where a graph with approval keeps its checkpoints (None: the process loop's async
    # saver).
    checkpointer: BaseCheckpointSaver | None = None
    # The caller's active language, taken where the request is made (Django's stays in the
    # caller's thread): what the turn's replies are for (`carry_language`).
    language: str | None = field(default_factory=translation.get_language)

    def open(self) -> Turn:
        """A turn for the message, or a resume turn for the decision (exactly one is given)."""
        if (self.message is None) == (self.resume is None):
            raise ChatInputError(gettext_noop("send either a message or a decision (resume)"))
        if self.resume is not None:
            return open_resume_turn(
                user_id=self.user_id, thread_id=self.thread_id, resume=self.resume
            )
        return open_turn(user_id=self.user_id, thread_id=self.thread_id, message=self.message)

    def prepare(self, turn: Turn) -> AgentInput:
        return chatbot_input(turn, model=self.model, checkpointer=self.checkpointer)


async def aturn(request: ChatRequest, *, events: bool, reason: str) -> AsyncIterator[Any]:
    """The one implementation of a chat turn, on the process's event loop, which every entry
    point adapts: open (its database work through `on_database`), the `run` event, the agent
    phase (its `ChatEvent`s when `events`), then the close; yields the `ChatTurn` last.

    A cancellation (`reason` unless whoever cancelled gave one) or a consumer that stops
    reading cancels the run (`cancellation`); a failure after the open is raised by the close
    (`ChatModelUnavailable`, `ChatRunLost`, or the original error), the run finished first.
    """
    carry_language(request.language)
    if request.checkpointer is None:
        request = replace(request, checkpointer=await checkpoints.async_checkpointer())
    turn = await aopen(on_database(request.open)(), reason=reason)
    outcome = TurnOutcome()
    try:
        yield run_event(turn)
        async with aclosing(astream_agent(turn, prepare=request.prepare, events=events)) as steps:
            async for step in steps:
                if isinstance(step, TurnOutcome):
                    outcome = step
                else:
                    yield step
    except (asyncio.CancelledError, GeneratorExit) as exc:
        await to_the_end(acancel_turn(turn, reason=cancellation(exc, default=reason)))
        raise
    # Cancelled while it closes, the turn still closes (succeeded: it had ended), then stops;
    # interrupted inside the close's own step, it is cancelled instead.
    tool_calls = await settled(
        lambda: on_database(close_turn)(turn, outcome),
        instead=lambda: acancel_turn(turn, reason=cancel_reason(reason)),
    )
    yield chat_turn(turn, outcome, tool_calls)


def run_event(turn: Turn) -> ChatEvent:
    """The first event of a streamed turn: its thread and run."""
    conversation = turn.handle.conversation
    return {"event": "run", "thread_id": conversation.thread_id, "run_id": turn.handle.run_id}


async def _settled(request: ChatRequest) -> ChatTurn:
    """The turn's `ChatTurn`, once it is over (no events)."""
    async with aclosing(aturn(request, events=False, reason=CANCELLED_BY_CALLER)) as steps:
        async for step in steps:
            settled = step
    return settled


def chat(
    *,
    user_id: int,
    message: str | None = None,
    thread_id: str | None = None,
    resume: dict[str, Any] | None = None,
    model: BaseChatModel | None = None,
) -> ChatTurn:
    """Answer `message` in `user_id`'s thread (a new one when `thread_id` is None), or carry
    the user's decision `resume` (`{"decision": "approve" | "edit" | "reject", "content",
    "replaces"}`) about the memory write pending in `thread_id`, in a `resume` run.

    The turn runs on the process's event loop (`aturn`); its database work on this thread.
    Raises `ChatInputError` (bad message or decision, or both or neither given), `ChatError`
    (inside a transaction, inactive user), `ChatThreadNotFound`, `ChatNothingToResume`
    (no approval pending in the thread), `ChatModelUnavailable` (model failure or limits: the
    run is failed), `ChatRunLost` (lease lost: the run is left to the reaper),
    `django.db.DatabaseError`.
    """
    request = ChatRequest(
        user_id=user_id, message=message, thread_id=thread_id, resume=resume, model=model
    )
    return run_sync(_settled(request))


async def achat(
    *,
    user_id: int,
    message: str | None = None,
    thread_id: str | None = None,
    resume: dict[str, Any] | None = None,
    model: BaseChatModel | None = None,
) -> ChatTurn:
    """`chat` for async code on any event loop (a new `asyncio.run` each time included): the
    same turn, on the process's loop, its database, lock and file work on worker threads
    (never on an event loop), so many `achat` calls run concurrently. Cancelled, the run ends
    `cancelled`.

    Raises what `chat` raises (its database work never joins a transaction of the caller).
    """
    request = ChatRequest(
        user_id=user_id, message=message, thread_id=thread_id, resume=resume, model=model
    )
    return await on_process_loop(_settled(request), reason=CANCELLED_BY_CALLER)


def chat_turn(turn: Turn, outcome: TurnOutcome, tool_calls: list[dict[str, str]]) -> ChatTurn:
    """What a settled turn answers."""
    interrupted = outcome.approval is not None
    return ChatTurn(
        thread_id=turn.handle.conversation.thread_id,
        run_id=turn.handle.run_id,
        status=AgentRun.Status.INTERRUPTED if interrupted else AgentRun.Status.SUCCEEDED,
        reply=outcome.reply,
        tool_calls=tool_calls,
        approval=outcome.approval,
    )


# The chat agent's sub-agent tool: one for every turn (each run's own comes with its context).
_DELEGATE = DelegateToSubagentTool()


def warm_up_graphs() -> None:
    """Compile, for the configured model, the graphs most turns run on: the chat agent with
    memory on and with memory off (without approval), and the sub-agent. A server process
    calls it before it serves (`yuxi_site.warmup`): its first turns then compile nothing,
    where a burst of them would otherwise wait on the compile of their shape. A graph with
    approval is compiled on its first turn (its checkpointer belongs to the process loop)."""
    for memory in (True, False):
        warm_graph(GraphShape(memory=memory), extra_tools=(_DELEGATE,))
    warm_graph(SUBAGENT_SHAPE)


def chatbot_input(
    turn: Turn,
    *,
    model: BaseChatModel | None,
    checkpointer: BaseCheckpointSaver | None = None,
) -> AgentInput:
    """The chat agent for `turn` and its input: the thread's earlier dialogue (none to read in
    a thread the turn opened), then the user's message; for a resume, the interrupted graph's
    shape (memory tools and approval, whatever the switches say now: LangGraph drops a
    decision resumed on a graph without them; the tools re-check at call time) and the
    user's decision.

    The graph is the process's shared one for the turn's shape and model (its sub-agent
    tool on the same model); what is the run's own — the switch, the memory section, AGENTS.md
    and USER.md, all read now — comes with its `TurnContext`. `checkpointer` is where a graph
    with approval keeps its checkpoints (default: the process's sync saver; an async turn
    passes the async one)."""
    ctx = turn.handle.ctx
    memory = MemoryPrompt.for_run(ctx)
    if turn.decision is not None:
        shape = GraphShape(memory=True, approval=True)
    else:
        shape = GraphShape(
            memory=memory is not None, approval=memory is not None and memory.write_approval
        )
    system_message = run_system_message(ctx)
    graph = shared_graph(
        shape,
        system_message=system_message,
        memory=memory,
        model=model,
        checkpointer=(checkpointer or checkpoints.checkpointer()) if shape.approval else None,
        extra_tools=(_DELEGATE,),
    )
    context = TurnContext.of(turn, system_message=system_message, memory=memory, model=model)
    if turn.decision is not None:
        return AgentInput(
            graph=graph, messages=[], context=context, resume=decision_command(turn.decision)
        )
    earlier = (
        []
        if turn.new_thread
        else dialogue.recent_dialogue(
            conversation=turn.handle.conversation, before=turn.user_message
        )
    )
    return AgentInput(
        graph=graph,
        messages=[*map(_dialogue_message, earlier), HumanMessage(turn.message)],
        context=context,
    )


def _dialogue_message(turn: dialogue.DialogueTurn) -> BaseMessage:
    content = f"{turn.content}\n{DIALOGUE_CUT_MARKER}" if turn.truncated else turn.content
    return HumanMessage(content) if turn.role == Message.Role.USER else AIMessage(content)
