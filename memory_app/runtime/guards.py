"""The run guard: one LangChain middleware per rule a run keeps on every model and tool call,
the same objects in the Chat service's shared graphs and in a graph built for one run.

- `ConnectionRelease` — the thread's database connection handed back while the model thinks
  and after each tool call (sync hooks only: see the class);
- `RunSystemMessage` — the model is shown the run's own system message (`RunContext`);
- `LeaseGuard` — nothing more runs once the run's lease is lost;
- `ReplyCheck` — a reply the run cannot store or bound fails the run; a call with unusable
  arguments is kept and refused, as is a call of no tool;
- `UniqueToolCallIds` — every call's id unique within the turn;
- `CredentialRefusal` — a memory write repeating a credential the user stated is refused;
- `ModelErrors` — a failed model call fails the run as `ModelFailure`, with a text that
  never repeats the provider's message;
- `StartedCalls` — every tool call started is recorded on the run, so a cancelled turn can
  wait for (and settle) the calls still running.

`run_guards(ctx)` lists them in their order. Built without `ctx`, a guard serves every run of
a shared graph, each from the `RunContext` the run is invoked with; built with one, it is bound
to that run (a graph built for it), with the run's `RunCalls`. They raise `ModelFailure` /
`LeaseLost` for the turn's close to settle; none finishes a run itself.
"""

import asyncio
import concurrent.futures
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from langchain.agents.middleware import (
    AgentMiddleware,
    ModelRequest,
    ModelResponse,
    ToolCallRequest,
)
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.types import Command

from conversations import runs
from conversations.runs import ToolRuntimeContext
from conversations.utils.connections import release_connection
from memory_app.runtime.context import RunCalls, RunContext
from memory_app.runtime.credential_check import stated_credential_refusal
from memory_app.runtime.errors import LeaseLost, ModelFailure
from memory_app.runtime.replies import (
    UNUSABLE_ARGUMENTS,
    checked_reply,
    model_error_text,
    with_unique_ids,
)
from memory_app.tools import ToolResult, ToolStatus, lease_lost_refusal

ModelHandler = Callable[[ModelRequest], ModelResponse]
AsyncModelHandler = Callable[[ModelRequest], Awaitable[ModelResponse]]
ToolHandler = Callable[[ToolCallRequest], ToolMessage | Command]
AsyncToolHandler = Callable[[ToolCallRequest], Awaitable[ToolMessage | Command]]


class RunMiddleware(AgentMiddleware):
    """A middleware of one run's rules: bound to `ctx` (and its `calls`), or, built without
    one, reading each call's run from the `RunContext` the graph is invoked with."""

    def __init__(self, ctx: ToolRuntimeContext | None = None, calls: RunCalls | None = None):
        super().__init__()
        self.ctx = ctx
        self.calls = calls if calls is not None or ctx is None else RunCalls()

    def run(self, runtime: Any) -> tuple[ToolRuntimeContext, RunCalls]:
        """The run this call belongs to: the bound one, or the invocation's `RunContext`."""
        if self.ctx is not None:
            return self.ctx, self.calls
        context = getattr(runtime, "context", None)
        if not isinstance(context, RunContext):
            raise TypeError("a shared agent graph runs with its run's RunContext as context")
        return context, context.calls


def _tool_message(request: ToolCallRequest, result: ToolResult) -> ToolMessage:
    call = request.tool_call
    return ToolMessage(
        content=result.to_json(), artifact=result, tool_call_id=call["id"], name=call["name"]
    )


class _ToolRefusal(RunMiddleware):
    """A guard that may answer a tool call itself (`refusal`) instead of running it; the same
    answer in the sync and the async hook."""

    def refusal(self, request: ToolCallRequest) -> ToolResult | None:
        raise NotImplementedError

    def wrap_tool_call(self, request: ToolCallRequest, handler: ToolHandler):
        refusal = self.refusal(request)
        return handler(request) if refusal is None else _tool_message(request, refusal)

    async def awrap_tool_call(self, request: ToolCallRequest, handler: AsyncToolHandler):
        refusal = self.refusal(request)
        return await handler(request) if refusal is None else _tool_message(request, refusal)


class ConnectionRelease(AgentMiddleware):
    """Hands the thread's database connection back before each model call (no connection is
    held while the model thinks) and after each tool call (LangGraph runs tools on pool
    threads: no connection may outlive its call).

    The async twins only pass the call on, on purpose: under `ainvoke`/`astream` the event
    loop's thread holds no connection (no Django call runs there; the tools do their database
    work on worker threads that hand their own back), and closing one from the loop would
    raise `SynchronousOnlyOperation`."""

    def wrap_model_call(self, request: ModelRequest, handler: ModelHandler) -> ModelResponse:
        release_connection()
        return handler(request)

    async def awrap_model_call(self, request: ModelRequest, handler: AsyncModelHandler):
        return await handler(request)

    def wrap_tool_call(self, request: ToolCallRequest, handler: ToolHandler):
        try:
            return handler(request)
        finally:
            release_connection()

    async def awrap_tool_call(self, request: ToolCallRequest, handler: AsyncToolHandler):
        return await handler(request)


class RunSystemMessage(RunMiddleware):
    """The model is shown the run's own system message (`RunContext.system_message`: the role
    prompt and shared context read for the run) in place of the graph's; a run bound to a
    plain context keeps the graph's."""

    def _shown(self, request: ModelRequest) -> ModelRequest:
        context, _ = self.run(request.runtime)
        message = getattr(context, "system_message", None)
        return request if message is None else request.override(system_message=message)

    def wrap_model_call(self, request: ModelRequest, handler: ModelHandler) -> ModelResponse:
        return handler(self._shown(request))

    async def awrap_model_call(self, request: ModelRequest, handler: AsyncModelHandler):
        return await handler(self._shown(request))


class LeaseGuard(_ToolRefusal):
    """Once the run's lease is lost (as the process's lease keeper knows it: no I/O), a model
    call raises `LeaseLost` and a tool call is refused (`denied`)."""

    def _check(self, request: ModelRequest) -> None:
        context, _ = self.run(request.runtime)
        if runs.lease_keeper().lease_lost(context.run_id):
            raise LeaseLost

    def wrap_model_call(self, request: ModelRequest, handler: ModelHandler) -> ModelResponse:
        self._check(request)
        return handler(request)

    async def awrap_model_call(self, request: ModelRequest, handler: AsyncModelHandler):
        self._check(request)
        return await handler(request)

    def refusal(self, request: ToolCallRequest) -> ToolResult | None:
        ctx, _ = self.run(request.runtime)
        return lease_lost_refusal(ctx.run_id)


def _replies(response: ModelResponse, check: Callable[[AIMessage], AIMessage]) -> ModelResponse:
    result = [check(m) if isinstance(m, AIMessage) else m for m in response.result]
    return replace(response, result=result)


class ReplyCheck(_ToolRefusal):
    """After a model call: a reply the run cannot store or bound fails the run, a call with
    unusable arguments is kept without them and refused (`replies.checked_reply`). Around a
    tool call: that refusal, and one for a call of no tool the graph has (`rejected`)."""

    def _checked(self, request: ModelRequest, response: ModelResponse) -> ModelResponse:
        _, calls = self.run(request.runtime)
        return _replies(response, lambda reply: checked_reply(reply, refused=calls.refused))

    def wrap_model_call(self, request: ModelRequest, handler: ModelHandler) -> ModelResponse:
        return self._checked(request, handler(request))

    async def awrap_model_call(self, request: ModelRequest, handler: AsyncModelHandler):
        return self._checked(request, await handler(request))

    def refusal(self, request: ToolCallRequest) -> ToolResult | None:
        _, calls = self.run(request.runtime)
        if request.tool is None:
            return ToolResult(ToolStatus.REJECTED, "no such tool")
        if request.tool_call["id"] in calls.refused:
            return ToolResult(ToolStatus.REJECTED, UNUSABLE_ARGUMENTS)
        return None


class UniqueToolCallIds(AgentMiddleware):
    """After a model call: every call of the reply gets an id unique within the turn (a
    resumed turn included: the ids come from the turn's own state)."""

    @staticmethod
    def _unique(request: ModelRequest, response: ModelResponse) -> ModelResponse:
        earlier = request.state["messages"]
        return _replies(response, lambda reply: with_unique_ids(reply, earlier=earlier))

    def wrap_model_call(self, request: ModelRequest, handler: ModelHandler) -> ModelResponse:
        return self._unique(request, handler(request))

    async def awrap_model_call(self, request: ModelRequest, handler: AsyncModelHandler):
        return self._unique(request, await handler(request))


class CredentialRefusal(_ToolRefusal):
    """A memory write repeating a credential the user stated in the thread, however the model
    worded it, is refused (`rejected`) before it runs."""

    def refusal(self, request: ToolCallRequest) -> ToolResult | None:
        return stated_credential_refusal(request)


class ModelErrors(AgentMiddleware):
    """A model call that raises fails the run as `ModelFailure`: the model, its endpoint's host
    and the error types, never the provider's message."""

    def wrap_model_call(self, request: ModelRequest, handler: ModelHandler) -> ModelResponse:
        try:
            return handler(request)
        except Exception as exc:
            raise ModelFailure(model_error_text(exc, request.model)) from exc

    async def awrap_model_call(self, request: ModelRequest, handler: AsyncModelHandler):
        try:
            return await handler(request)
        except Exception as exc:
            raise ModelFailure(model_error_text(exc, request.model)) from exc


class StartedCalls(RunMiddleware):
    """Every tool call started is recorded on the run's `RunCalls`, by id, with its outcome
    once it ends. Under `ainvoke`/`astream` a started call runs to its end even when the turn
    is cancelled (its effect is committed or not; the turn's close says which)."""

    def wrap_tool_call(self, request: ToolCallRequest, handler: ToolHandler):
        _, calls = self.run(request.runtime)
        call: concurrent.futures.Future = concurrent.futures.Future()
        call.set_running_or_notify_cancel()
        calls.started[request.tool_call["id"]] = call
        try:
            result = handler(request)
        except BaseException as exc:
            call.set_exception(exc)
            raise
        call.set_result(result)
        return result

    async def awrap_tool_call(self, request: ToolCallRequest, handler: AsyncToolHandler):
        _, calls = self.run(request.runtime)
        call = asyncio.ensure_future(handler(request))
        calls.started[request.tool_call["id"]] = call
        return await asyncio.shield(call)


def run_guards(ctx: ToolRuntimeContext | None = None) -> list[AgentMiddleware]:
    """The run guard, in its order, bound to `ctx` (one `RunCalls` for them all), or, without
    one, for every run of a shared graph (which lists `RunSystemMessage` before its memory
    middleware: the run's message first, the memory section added to it).

    A model call passes them outermost first: the connection handed back, the lease; its reply
    comes back through the model-error wrapping, the unique ids and the reply checks, in that
    order. A tool call: the connection (handed back after), the lease, the reply's refusals,
    the credential check, then the record of the call."""
    calls = RunCalls() if ctx is not None else None
    return [
        ConnectionRelease(),
        LeaseGuard(ctx, calls),
        ReplyCheck(ctx, calls),
        UniqueToolCallIds(),
        ModelErrors(),
        CredentialRefusal(ctx, calls),
        StartedCalls(ctx, calls),
    ]
