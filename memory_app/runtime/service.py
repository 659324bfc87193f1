"""The Chat service: `chat(...)` answers one user message as one turn of the chat agent.

`chat` is the three turn phases in order (`open_turn`, `run_agent` with `chatbot_input`,
`close_turn`); `chatbot_input` is what a turn of the chat agent starts from: the thread's
earlier dialogue, the user's message, and the graph with its sub-agent tool.
"""

import functools
from dataclasses import dataclass

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from conversations import selectors
from conversations.models import AgentRun, Message
from memory_app.llm import chat_model_from_settings
from memory_app.runtime.graphs import build_chatbot_graph
from memory_app.runtime.subagent import DelegateToSubagentTool
from memory_app.runtime.turns import AgentInput, Turn, close_turn, open_turn, run_agent

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
    turn = open_turn(user_id=user_id, thread_id=thread_id, message=message)
    outcome = run_agent(turn, prepare=functools.partial(chatbot_input, model=model))
    tool_calls = close_turn(turn, outcome)
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
