"""What a run may take of a model's reply: the checks the guard middleware applies after
every model call (bounded, storable text; at most `MAX_TOOL_CALLS_PER_REPLY` calls with usable
labels and arguments; tool-call ids unique within the turn) and the text of a model failure.

Pure functions over LangChain messages: no database, no run. Each raises `ModelFailure` for a
reply the run must fail on, or returns the reply as the run keeps it.
"""

import json
import uuid
from collections.abc import Sequence

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.messages.tool import tool_call

from conversations.models import ToolCall
from conversations.utils.string_utils import is_storable_text, truncate_utf8
from memory_app.llm.endpoint import model_endpoint
from memory_app.runtime.errors import ModelFailure
from memory_app.runtime.limits import (
    ASSISTANT_TEXT_MAX_BYTES,
    MAX_TOOL_CALLS_PER_REPLY,
    TOOL_ARGUMENTS_MAX_BYTES,
)
from memory_app.tools import is_storable_json

_TOOL_CALL_LABEL_MAX_CHARS = min(
    ToolCall._meta.get_field("tool_call_id").max_length, ToolCall._meta.get_field("name").max_length
)

# Said to the model for a call whose arguments the run refused.
UNUSABLE_ARGUMENTS = (
    "the arguments must be a JSON object the database can store, "
    f"at most {TOOL_ARGUMENTS_MAX_BYTES} bytes serialized"
)


def checked_reply(reply: AIMessage, *, refused: set[str]) -> AIMessage:
    """`reply` as the run may take it: `ModelFailure` for a reply the run cannot store or
    bound (unstorable text or text over `ASSISTANT_TEXT_MAX_BYTES`, more than
    `MAX_TOOL_CALLS_PER_REPLY` calls, unusable ids or names); a call whose arguments cannot be
    stored (or did not parse, or are over `TOOL_ARGUMENTS_MAX_BYTES`) is kept without them,
    and its id added to `refused`."""
    if not is_storable_text(reply.text):
        raise ModelFailure("the model answered with text that cannot be stored")
    refuse_oversize_reply_text(reply)
    calls = [*reply.tool_calls, *reply.invalid_tool_calls]
    if len(calls) > MAX_TOOL_CALLS_PER_REPLY:
        raise ModelFailure(f"the model asked for more than {MAX_TOOL_CALLS_PER_REPLY} tool calls")
    for call in calls:
        for label in (call.get("id") or "", call.get("name") or ""):
            if not is_storable_text(label) or len(label) > _TOOL_CALL_LABEL_MAX_CHARS:
                raise ModelFailure("the model named a tool call with an unusable id or name")
    if not reply.invalid_tool_calls and all(arguments_are_usable(c["args"]) for c in calls):
        return reply
    # Arguments that cannot be stored (or are too large to) are as unusable as arguments
    # that did not parse: the call is kept (recorded without them) and refused.
    kept = []
    for call in calls:
        usable = call in reply.tool_calls and arguments_are_usable(call["args"])
        if not usable:
            refused.add(call["id"])
        args = call["args"] if usable else {}
        kept.append(tool_call(id=call["id"], name=call.get("name") or "", args=args))
    return AIMessage(
        content=reply.content,
        tool_calls=kept,
        id=reply.id,
        response_metadata=reply.response_metadata,
    )


def refuse_oversize_reply_text(reply: AIMessage) -> None:
    """Fail the run (`ModelFailure`) on a reply whose text is over `ASSISTANT_TEXT_MAX_BYTES`:
    what the run stores and returns stays bounded, whatever the model sends. Cheap on a huge
    text (only the allowed prefix is encoded)."""
    _, over = truncate_utf8(reply.text, ASSISTANT_TEXT_MAX_BYTES)
    if over:
        raise ModelFailure(f"the model answered with more than {ASSISTANT_TEXT_MAX_BYTES} bytes")


def arguments_are_usable(arguments: object) -> bool:
    """Whether a tool call's arguments can be stored (`is_storable_json`) and, serialized as
    compact JSON, are at most `TOOL_ARGUMENTS_MAX_BYTES` of UTF-8."""
    if not is_storable_json(arguments):
        return False
    serialized = json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))
    return len(serialized.encode("utf-8")) <= TOOL_ARGUMENTS_MAX_BYTES


def with_unique_ids(reply: AIMessage, *, earlier: Sequence[BaseMessage]) -> AIMessage:
    """`reply` with each call's id unique within the turn: a missing one, and one the turn has
    already seen (in `earlier` messages or earlier in this reply), replaced by a fresh one.
    Results, refusals and stored rows are matched by id, so two calls must never share one."""
    calls = [*reply.tool_calls, *reply.invalid_tool_calls]
    ids = _unique_ids([call.get("id") for call in calls], seen=_call_ids(earlier))
    if ids == [call.get("id") for call in calls]:
        return reply
    renamed = iter(ids)
    return reply.model_copy(
        update={
            "tool_calls": [{**call, "id": next(renamed)} for call in reply.tool_calls],
            "invalid_tool_calls": [
                {**call, "id": next(renamed)} for call in reply.invalid_tool_calls
            ],
        }
    )


def _call_ids(messages: Sequence[BaseMessage]) -> set[str]:
    """Every tool-call id the turn's messages already carry."""
    ids: set[str] = set()
    for message in messages:
        if isinstance(message, AIMessage):
            ids.update(call["id"] for call in message.tool_calls if call.get("id"))
        elif isinstance(message, ToolMessage):
            ids.add(message.tool_call_id)
    return ids


def _unique_ids(ids: list[str | None], *, seen: set[str]) -> list[str]:
    taken = set(seen)
    unique = []
    for call_id in ids:
        if not call_id or call_id in taken:
            call_id = f"call_{uuid.uuid4().hex}"
        taken.add(call_id)
        unique.append(call_id)
    return unique


def model_error_text(exc: BaseException, model: object) -> str:
    """Why a model call failed, for staff and the caller: the model and its endpoint's host,
    the chain of error types and any HTTP status, never the provider's message (it may echo
    the request)."""
    chain: list[BaseException] = []
    while exc is not None and exc not in chain:
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    kinds = " <- ".join(type(e).__name__ for e in chain)
    status = next(
        (e.status_code for e in chain if isinstance(getattr(e, "status_code", None), int)), None
    )
    return (
        f"the model call to {model_endpoint(model)} failed "
        f"({kinds}{f', HTTP {status}' if status else ''})"
    )
