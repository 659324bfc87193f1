"""A credential the user stated is never stored, however the model words it.

The detector finds a credential by its shape and the words around it, and a model may keep the
value while losing both: SmolLM2 turned "Please store my bank PIN, 4821" into the proposal
"function 4821, no return type specified". So a `remember_memory` call is also checked against
what the user said: if its content repeats a value one of the user's messages states as a
credential, it is refused (`rejected`, the same message as any credential: the kind, never the
value) before it runs, and with approval on it is never put to the user as a proposal.

The user's words are the `HumanMessage`s of the agent's state: the thread's earlier user
messages the turn was given, and this turn's. Stateless: only the state and the call are read.
"""

from collections.abc import Sequence

from langchain.agents.middleware import ToolCallRequest
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.messages.tool import ToolCall as LangChainToolCall

from memory_app.credentials import CredentialKind, stated_credential_in
from memory_app.errors import MemorySensitiveContent
from memory_app.services import normalize_memory_text
from memory_app.tool_names import REMEMBER_MEMORY_TOOL
from memory_app.tools import ToolResult, ToolStatus

__all__ = ["stated_credential", "stated_credential_refusal"]


def stated_credential(
    call: LangChainToolCall, messages: Sequence[BaseMessage]
) -> CredentialKind | None:
    """The kind of a credential the user stated in `messages` that `call`'s content repeats,
    if `call` is a `remember_memory` with text content; else None. The content is compared as
    the write would store it (normalized)."""
    content = call["args"].get("content") if call["name"] == REMEMBER_MEMORY_TOOL else None
    if not isinstance(content, str):
        return None
    said = (message.text for message in messages if isinstance(message, HumanMessage))
    return stated_credential_in(normalize_memory_text(content), said)


def stated_credential_refusal(request: ToolCallRequest) -> ToolResult | None:
    """The `rejected` result a `remember_memory` call repeating a stated credential gets instead
    of running (nothing is written, kept or recorded), or None for any other call."""
    kind = stated_credential(request.tool_call, request.state["messages"])
    if kind is None:
        return None
    return ToolResult(ToolStatus.REJECTED, str(MemorySensitiveContent(kind)))
