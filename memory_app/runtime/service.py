"""The Chat service: `chat(...)` answers one user message as one turn of the chat agent.

`chat` is the three turn phases in order (`open_turn`, `run_agent` with `chatbot_input`,
`close_turn`); `achat` is the same phases for async code (the database phases on worker
threads, the agent through `astream`); `chatbot_input` is what a turn of the chat agent starts
from: the thread's earlier dialogue, the user's message, and the graph with its sub-agent tool.
"""

import asyncio
from dataclasses import dataclass

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from conversations import selectors
from conversations.models import AgentRun, Message
from memory_app.llm import chat_model_from_settings
from memory_app.runtime.graphs import build_chatbot_graph
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
    open_turn,
    run_agent,
)
from yuxi_site.utils.connections import in_worker_thread

# Ends an earlier message of the thread that was cut for the prompt.
DIALOGUE_CUT_MARKER = "[cut: the rest of this earlier message is not shown]"


@dataclass(frozen=True)
class ChatTurn:
    """The outcome of one user message: the thread, the run and the assistant's reply."""

    thread_id: str
    run_id: str
    status: str
    reply: str
    tool_calls: list[dict[str, str]]


@dataclass(frozen=True)
class ChatRequest:
    """The arguments of `chat` (and of `achat`, `stream_chat`, `astream_chat`, which take the
    same): how each of them opens its turn and prepares its agent, so every entry point passes
    the same arguments to the same phases."""

    user_id: int
    message: str
    thread_id: str | None = None
    model: BaseChatModel | None = None

    def open(self) -> Turn:
        return open_turn(user_id=self.user_id, thread_id=self.thread_id, message=self.message)

    def prepare(self, turn: Turn) -> AgentInput:
        return chatbot_input(turn, model=self.model)


def chat(
    *,
    user_id: int,
    message: str,
    thread_id: str | None = None,
    model: BaseChatModel | None = None,
) -> ChatTurn:
    """Answer `message` in `user_id`'s thread (a new one when `thread_id` is None).

    Raises `ChatInputError` (bad message), `ChatError` (inside a transaction, inactive user),
    `ChatThreadNotFound`, `ChatModelUnavailable` (model failure or limits: the run is failed),
    `ChatRunLost` (lease lost: the run is left to the reaper), `django.db.DatabaseError`.
    """
    request = ChatRequest(user_id=user_id, message=message, thread_id=thread_id, model=model)
    turn = request.open()
    outcome = run_agent(turn, prepare=request.prepare)
    return chat_turn(turn, outcome, close_turn(turn, outcome))


async def achat(
    *,
    user_id: int,
    message: str,
    thread_id: str | None = None,
    model: BaseChatModel | None = None,
) -> ChatTurn:
    """`chat` for async code: the same turn, its database, lock and file work on worker
    threads (never on the event loop), the agent through `astream`, so many `achat` calls run
    concurrently on one loop. Cancelled while the agent runs, the run ends `cancelled`.

    Raises what `chat` raises (its database work never joins a transaction of the caller).
    """
    request = ChatRequest(user_id=user_id, message=message, thread_id=thread_id, model=model)
    turn = await aopen(in_worker_thread(request.open)())
    try:
        outcome = await arun_agent(turn, prepare=request.prepare)
    except asyncio.CancelledError:
        await in_worker_thread(cancel_turn)(turn, reason=CANCELLED_BY_CALLER)
        raise
    return chat_turn(turn, outcome, await in_worker_thread(close_turn)(turn, outcome))


def chat_turn(turn: Turn, outcome: TurnOutcome, tool_calls: list[dict[str, str]]) -> ChatTurn:
    """The `ChatTurn` of a turn that closed as succeeded."""
    return ChatTurn(
        thread_id=turn.handle.conversation.thread_id,
        run_id=turn.handle.run_id,
        status=AgentRun.Status.SUCCEEDED,
        reply=outcome.reply,
        tool_calls=tool_calls,
    )


def chatbot_input(turn: Turn, *, model: BaseChatModel | None) -> AgentInput:
    """The chat agent for `turn` (its sub-agent tool on the same model) and its input: the
    thread's earlier dialogue, then the user's message."""
    model = model or chat_model_from_settings()
    earlier = selectors.recent_dialogue(
        conversation=turn.handle.conversation, before=turn.user_message
    )
    delegate = DelegateToSubagentTool(ctx=turn.handle.ctx, parent=turn.handle, model=model)
    graph = build_chatbot_graph(turn.handle.ctx, model=model, extra_tools=[delegate])
    return AgentInput(
        graph=graph, messages=[*map(_dialogue_message, earlier), HumanMessage(turn.message)]
    )


def _dialogue_message(turn: selectors.DialogueTurn) -> BaseMessage:
    content = f"{turn.content}\n{DIALOGUE_CUT_MARKER}" if turn.truncated else turn.content
    return HumanMessage(content) if turn.role == Message.Role.USER else AIMessage(content)
