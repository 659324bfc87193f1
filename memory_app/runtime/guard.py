"""`RunGuard`: the runtime's own middleware, enforcing a run's rules on every model and tool call.

It owns the per-call rules (lease still held, reply storable and bounded, arguments storable
and bounded) and raises `ModelFailure` / `LeaseLost` for the turn's close to settle; it never
finishes a run itself.

A shared graph's guard (`RunGuard()`) keeps nothing of a run: each run brings its own
`RunContext` at invocation. A graph built for one run has a guard bound to it (`RunGuard(ctx)`).
"""

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any

from langchain.agents.middleware import (
    AgentMiddleware,
    ModelRequest,
    ModelResponse,
    ToolCallRequest,
)
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.messages.tool import tool_call
from langgraph.types import Command

from conversations import runs
from conversations.models import ToolCall
from conversations.runs import ToolRuntimeContext
from conversations.utils.connections import release_connection
from conversations.utils.string_utils import is_storable_text, truncate_utf8
from memory_app.llm import model_endpoint
from memory_app.runtime.context import RunCalls, RunContext
from memory_app.runtime.credential_check import stated_credential_refusal
from memory_app.runtime.errors import LeaseLost, ModelFailure
from memory_app.runtime.limits import (
    ASSISTANT_TEXT_MAX_BYTES,
    MAX_TOOL_CALLS_PER_REPLY,
    TOOL_ARGUMENTS_MAX_BYTES,
)
from memory_app.tools import ToolResult, ToolStatus, is_storable_json, lease_lost_refusal

_TOOL_CALL_LABEL_MAX_CHARS = min(
    ToolCall._meta.get_field("tool_call_id").max_length, ToolCall._meta.get_field("name").max_length
)


class RunGuard(AgentMiddleware):
    """The runtime's own rules for every model call and tool call of one run.

    Before a model call: stop if the lease is lost, and hand the thread's database connection
    back while the model thinks; the model is shown the run's system message (`RunContext`).
    After it: refuse a reply the run cannot store or bound (more
    than `MAX_TOOL_CALLS_PER_REPLY` calls, unstorable text or text over
    `ASSISTANT_TEXT_MAX_BYTES`, unusable ids or names), give every call a tool-call id unique
    within the turn (a resumed turn included: the ids come from the turn's own state) and turn
    arguments that cannot be stored (or did not parse, or are over `TOOL_ARGUMENTS_MAX_BYTES`)
    into `rejected` calls. Around each tool call: refuse once the lease is lost, and close the
    pool thread's connection afterwards.

    `RunGuard()` serves every run of a shared graph, each from its `RunContext`;
    `RunGuard(ctx)` is bound to one run (a graph built for it), and keeps its `RunCalls`.

    Every hook has an async twin with the same rules. The twins release no connection: under
    `ainvoke`/`astream` the event loop's thread holds none (no Django call runs there; the
    tools do their database work on worker threads that hand their own connection back), and
    closing one from the loop would raise `SynchronousOnlyOperation`.
    """

    def __init__(self, ctx: ToolRuntimeContext | None = None) -> None:
        super().__init__()
        self.ctx = ctx
        self.tools = []
        self._calls = RunCalls() if ctx is not None else None

    def _run(self, runtime: Any) -> tuple[ToolRuntimeContext, RunCalls]:
        """The run this call belongs to: the bound one, or the invocation's `RunContext`."""
        if self.ctx is not None:
            return self.ctx, self._calls
        context = getattr(runtime, "context", None)
        if not isinstance(context, RunContext):
            raise TypeError("a shared agent graph runs with its run's RunContext as context")
        return context, context.calls

    def _shown(self, request: ModelRequest) -> ModelRequest:
        """Before a model call: the request the model is shown (the run's own system message),
        or `LeaseLost` once the run's lease is lost."""
        context, _ = self._run(request.runtime)
        if runs.lease_keeper().lease_lost(context.run_id):  # the keeper's memory only: no I/O
            raise LeaseLost
        message = getattr(context, "system_message", None)
        return request if message is None else request.override(system_message=message)

    def _checked(self, request: ModelRequest, response: ModelResponse) -> ModelResponse:
        """After a model call: the response with its reply as the run may take it."""
        _, calls = self._run(request.runtime)
        seen = _call_ids(request.state["messages"])
        result = [
            _checked_reply(m, seen=seen, refused=calls.refused) if isinstance(m, AIMessage) else m
            for m in response.result
        ]
        return replace(response, result=result)

    # The checks run inside the model call's own wrapper, not as before- and after-model
    # hooks: each hook would be a graph node, a step of its own on every model call.
    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> ModelResponse:
        request = self._shown(request)
        release_connection()
        try:
            response = handler(request)
        except Exception as exc:
            raise ModelFailure(_model_error_text(exc, request.model)) from exc
        return self._checked(request, response)

    async def awrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], Awaitable[ModelResponse]],
    ) -> ModelResponse:
        request = self._shown(request)
        try:
            response = await handler(request)
        except Exception as exc:
            raise ModelFailure(_model_error_text(exc, request.model)) from exc
        return self._checked(request, response)

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command],
    ) -> ToolMessage | Command:
        try:
            refusal = self._refusal(request)
            if refusal is not None:
                return _tool_message(request, refusal)
            return handler(request)
        finally:
            release_connection()

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command]],
    ) -> ToolMessage | Command:
        refusal = self._refusal(request)
        if refusal is not None:
            return _tool_message(request, refusal)
        _, calls = self._run(request.runtime)
        call = asyncio.ensure_future(handler(request))
        calls.started[request.tool_call["id"]] = call
        return await asyncio.shield(call)

    def _refusal(self, request: ToolCallRequest) -> ToolResult | None:
        ctx, calls = self._run(request.runtime)
        lost = lease_lost_refusal(ctx.run_id)
        if lost is not None:
            return lost
        if request.tool is None:
            return ToolResult(ToolStatus.REJECTED, "no such tool")
        if request.tool_call["id"] in calls.refused:
            return ToolResult(ToolStatus.REJECTED, _UNUSABLE_ARGUMENTS)
        # A memory write repeating a credential the user stated, however the model worded it.
        return stated_credential_refusal(request)


def _checked_reply(reply: AIMessage, *, seen: set[str], refused: set[str]) -> AIMessage:
    """`reply` as the run may take it (see `RunGuard`); the ids of calls it refuses for their
    arguments are added to `refused`."""
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
    ids = _unique_ids([call.get("id") for call in calls], seen=seen)
    if (
        not reply.invalid_tool_calls
        and all(arguments_are_usable(c["args"]) for c in calls)
        and ids == [call.get("id") for call in calls]
    ):
        return reply
    # Arguments that cannot be stored (or are too large to) are as unusable as arguments
    # that did not parse: the call is kept (recorded without them) and refused.
    kept = []
    for call, call_id in zip(calls, ids, strict=True):
        usable = call in reply.tool_calls and arguments_are_usable(call["args"])
        if not usable:
            refused.add(call_id)
        args = call["args"] if usable else {}
        kept.append(tool_call(id=call_id, name=call.get("name") or "", args=args))
    return AIMessage(
        content=reply.content,
        tool_calls=kept,
        id=reply.id,
        response_metadata=reply.response_metadata,
    )


_UNUSABLE_ARGUMENTS = (
    "the arguments must be a JSON object the database can store, "
    f"at most {TOOL_ARGUMENTS_MAX_BYTES} bytes serialized"
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
    """`ids` with each missing one, and each the turn has already seen (earlier in the turn or
    earlier in this reply), replaced by a fresh one: results, refusals and stored rows are
    matched by id, so two calls must never share one."""
    taken = set(seen)
    unique = []
    for call_id in ids:
        if not call_id or call_id in taken:
            call_id = f"call_{uuid.uuid4().hex}"
        taken.add(call_id)
        unique.append(call_id)
    return unique


def _model_error_text(exc: BaseException, model: object) -> str:
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


def _tool_message(request: ToolCallRequest, result: ToolResult) -> ToolMessage:
    call = request.tool_call
    return ToolMessage(
        content=result.to_json(), artifact=result, tool_call_id=call["id"], name=call["name"]
    )
