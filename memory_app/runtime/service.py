"""The Chat service: `chat(...)` answers one user message (or carries one decision about a
pending memory write) as one turn of the chat agent.

`chat` is the three turn phases in order (`open_turn` or `open_resume_turn`, `run_agent` with
`chatbot_input`, `close_turn`); `achat` is the same phases for async code (the database phases
on worker threads, the agent through `astream`); `chatbot_input` is what a turn of the chat
agent starts from: the thread's earlier dialogue, the user's message, and the graph with its
sub-agent tool — or, for a resume, the interrupted graph's shape and the user's decision.
"""

import asyncio
from dataclasses import dataclass
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver

from conversations import checkpoints, selectors
from conversations.models import AgentRun, Message
from conversations.utils.connections import in_worker_thread
from memory_app.llm import chat_model_from_settings
from memory_app.runtime.approval import decision_command
from memory_app.runtime.errors import ChatInputError
from memory_app.runtime.graphs import build_chatbot_graph, build_resume_graph
from memory_app.runtime.subagent import DelegateToSubagentTool
from memory_app.runtime.turns import (
    CANCELLED_BY_CALLER,
    AgentInput,
    Turn,
    TurnOutcome,
    aopen,
    arun_agent,
    cancel_turn,
    close_turn,
    open_resume_turn,
    open_turn,
    run_agent,
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
    # Where a graph with approval keeps its checkpoints (None: the process's sync saver; an
    # async turn brings its loop's async saver).
    checkpointer: BaseCheckpointSaver | None = None

    def open(self) -> Turn:
        """A turn for the message, or a resume turn for the decision (exactly one is given)."""
        if (self.message is None) == (self.resume is None):
            raise ChatInputError("send either a message or a decision (resume)")
        if self.resume is not None:
            return open_resume_turn(
                user_id=self.user_id, thread_id=self.thread_id, resume=self.resume
            )
        return open_turn(user_id=self.user_id, thread_id=self.thread_id, message=self.message)

    def prepare(self, turn: Turn) -> AgentInput:
        return chatbot_input(turn, model=self.model, checkpointer=self.checkpointer)


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

    Raises `ChatInputError` (bad message or decision, or both or neither given), `ChatError`
    (inside a transaction, inactive user), `ChatThreadNotFound`, `ChatNothingToResume`
    (no approval pending in the thread), `ChatModelUnavailable` (model failure or limits: the
    run is failed), `ChatRunLost` (lease lost: the run is left to the reaper),
    `django.db.DatabaseError`.
    """
    request = ChatRequest(
        user_id=user_id, message=message, thread_id=thread_id, resume=resume, model=model
    )
    turn = request.open()
    outcome = run_agent(turn, prepare=request.prepare)
    return chat_turn(turn, outcome, close_turn(turn, outcome))


async def achat(
    *,
    user_id: int,
    message: str | None = None,
    thread_id: str | None = None,
    resume: dict[str, Any] | None = None,
    model: BaseChatModel | None = None,
) -> ChatTurn:
    """`chat` for async code: the same turn, its database, lock and file work on worker
    threads (never on the event loop), the agent through `astream` (a graph with approval
    keeps its checkpoints through the loop's `AsyncPostgresSaver`), so many `achat` calls run
    concurrently on one loop. Cancelled while the agent runs, the run ends `cancelled`.

    Raises what `chat` raises (its database work never joins a transaction of the caller).
    """
    request = ChatRequest(
        user_id=user_id,
        message=message,
        thread_id=thread_id,
        resume=resume,
        model=model,
        checkpointer=await checkpoints.async_checkpointer(),
    )
    turn = await aopen(in_worker_thread(request.open)())
    try:
        outcome = await arun_agent(turn, prepare=request.prepare)
    except asyncio.CancelledError:
        await in_worker_thread(cancel_turn)(turn, reason=CANCELLED_BY_CALLER)
        raise
    return chat_turn(turn, outcome, await in_worker_thread(close_turn)(turn, outcome))


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


def chatbot_input(
    turn: Turn,
    *,
    model: BaseChatModel | None,
    checkpointer: BaseCheckpointSaver | None = None,
) -> AgentInput:
    """The chat agent for `turn` (its sub-agent tool on the same model) and its input: the
    thread's earlier dialogue, then the user's message; for a resume, the interrupted graph's
    shape and the user's decision. `checkpointer` is where a graph with approval keeps its
    checkpoints (default: the process's sync saver; an async turn passes the async one)."""
    model = model or chat_model_from_settings()
    checkpointer = checkpointer or checkpoints.checkpointer()
    delegate = DelegateToSubagentTool(ctx=turn.handle.ctx, parent=turn.handle, model=model)
    if turn.decision is not None:
        graph = build_resume_graph(
            turn.handle.ctx,
            checkpointer=checkpointer,
            model=model,
            extra_tools=[delegate],
        )
        return AgentInput(graph=graph, messages=[], resume=decision_command(turn.decision))
    earlier = selectors.recent_dialogue(
        conversation=turn.handle.conversation, before=turn.user_message
    )
    graph = build_chatbot_graph(
        turn.handle.ctx,
        model=model,
        extra_tools=[delegate],
        checkpointer=checkpointer,
    )
    return AgentInput(
        graph=graph, messages=[*map(_dialogue_message, earlier), HumanMessage(turn.message)]
    )


def _dialogue_message(turn: selectors.DialogueTurn) -> BaseMessage:
    content = f"{turn.content}\n{DIALOGUE_CUT_MARKER}" if turn.truncated else turn.content
    return HumanMessage(content) if turn.role == Message.Role.USER else AIMessage(content)
