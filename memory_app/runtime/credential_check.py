"""A credential the user stated is never stored, however the model words it.

The detector finds a credential by its shape and the words around it, and a model may keep the
value while losing both: SmolLM2 turned "Please store my bank PIN, 4821" into the proposal
"function 4821, no return type specified". So a `remember_memory` call is also checked against
what the user said: if its content repeats a value one of the user's messages states as a
credential, it is refused (`rejected`, the same message as any credential: the kind, never the
value) before it runs, and with approval on it is never put to the user as a proposal.

A value is not the only thing a model can keep: it may spell a PIN out in words or split a key.
So in a turn whose own user message holds a credential, no memory write runs at all, whatever
its content (the user is told to ask again without the credential): what a user asks to
remember in the same breath as a secret is too likely to carry it.

The user's words are the `HumanMessage`s of the agent's state: the thread's earlier user
messages the turn was given, and this turn's (the last). Stateless: only the state and the call
are read.
"""

from collections.abc import Sequence

from langchain.agents.middleware import ToolCallRequest
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.messages.tool import ToolCall as LangChainToolCall

from memory_app.credentials import CredentialKind, credential_kinds, stated_credential_in
from memory_app.errors import MemorySensitiveContent
from memory_app.services.plan import normalize_memory_text
from memory_app.tool_names import REMEMBER_MEMORY_TOOL
from memory_app.tools import ToolResult, ToolStatus

# What a memory write in a turn whose message holds a credential is told (`{kind}`: its label).
TURN_HOLDS_CREDENTIAL = (
    "memory never stores credentials: this message holds {kind}, so nothing from it is saved; "
    "ask again without the credential"
)


def stated_credential(
    call: LangChainToolCall, messages: Sequence[BaseMessage]
) -> tuple[CredentialKind, bool] | None:
    """Why `call`, a `remember_memory` with text content, may not run, with whether it is the
    turn's message that is to blame: a credential in the content itself (as the write would
    store it), False; else one in this turn's user message (the last in `messages`), True;
    else one that a user message in `messages` states and the content repeats, False. None
    when none holds, or `call` is no such write."""
    content = call["args"].get("content") if call["name"] == REMEMBER_MEMORY_TOOL else None
    if not isinstance(content, str):
        return None
    content = normalize_memory_text(content)
    said = [message.text for message in messages if isinstance(message, HumanMessage)]
    for kinds, in_turn in ((credential_kinds(content), False), (_turn_kinds(said), True)):
        if kinds:
            return kinds[0], in_turn
    repeated = stated_credential_in(content, said)
    return None if repeated is None else (repeated, False)


def _turn_kinds(said: list[str]) -> list[CredentialKind]:
    return credential_kinds(said[-1]) if said else []


def stated_credential_refusal(request: ToolCallRequest) -> ToolResult | None:
    """The `rejected` result a `remember_memory` call gets instead of running when the turn's
    message holds a credential or the call repeats one the user stated (nothing is written,
    kept or recorded; the message names the kind, never the value), or None."""
    found = stated_credential(request.tool_call, request.state["messages"])
    if found is None:
        return None
    kind, in_turn = found
    message = TURN_HOLDS_CREDENTIAL.format(kind=kind.label) if in_turn else None
    return ToolResult(ToolStatus.REJECTED, message or str(MemorySensitiveContent(kind)))
