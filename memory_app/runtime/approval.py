"""Approval before a memory write: LangChain's human-in-the-loop on `remember_memory`, and the
rule that a reply puts at most one write to the user.

A graph of a user who approves each write carries `approval_middleware()`: `ApprovalGate`
(after the model: in a reply asking for `remember_memory`, every other call is rejected with
a tool result before anything runs) and `HumanInTheLoopMiddleware` (batched mode; it stops
the graph before the first `remember_memory` of the reply, until a `resume` run brings the
user's decision as `decision_command(...)`). The tool itself still re-checks everything at
call time: only the call a decision released, in that resume run, writes.
"""

from typing import Any

from langchain.agents.middleware import (
    AgentMiddleware,
    AgentState,
    HumanInTheLoopMiddleware,
    ToolCallRequest,
)
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.messages.tool import ToolCall as LangChainToolCall
from langgraph.runtime import Runtime
from langgraph.types import Command

from conversations.selectors.approvals import PendingApproval
from memory_app.errors import MemorySensitiveContent, MemoryUnavailable, MemoryWriteError
from memory_app.runtime.concurrency.loop import on_database
from memory_app.runtime.credential_check import stated_credential
from memory_app.runtime.errors import ChatDecisionRefused
from memory_app.services.agent_write import (
    check_memory_write,
    holds_what_memory_never_keeps,
    refuse_stated_credential,
)
from memory_app.services.plan import normalize_memory_text
from memory_app.tool_names import REMEMBER_MEMORY_TOOL
from memory_app.tool_results import ToolResult, ToolStatus, memory_error_result, memory_refusal

# What the user may decide about a proposed memory write.
APPROVAL_DECISIONS = ("approve", "edit", "reject")

# How the human-in-the-loop middleware marks the tool result it writes for a decision.
_DECISION_SOURCE = "hitl_interrupt_decision"

_ONE_WRITE_PER_REPLY = ToolResult(
    ToolStatus.REJECTED,
    "Only the first memory write of a reply is put to the user; this call did not run. "
    "Ask again after the user has decided.",
)


def _proposes_text(call: LangChainToolCall) -> bool:
    content = call["args"].get("content")
    return isinstance(content, str) and bool(normalize_memory_text(content))


def _first_write(reply: BaseMessage | None) -> LangChainToolCall | None:
    """The first `remember_memory` call of a reply that proposes a text, if any (a call
    without one, or with only whitespace, is no write to ask about: the user would be shown an
    empty card; the tool refuses it as it stands)."""
    if not isinstance(reply, AIMessage):
        return None
    return next(
        (
            call
            for call in reply.tool_calls
            if call["name"] == REMEMBER_MEMORY_TOOL and _proposes_text(call)
        ),
        None,
    )


def _last_reply(messages: list[BaseMessage]) -> AIMessage | None:
    return next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)


def proposed_write(messages: list[BaseMessage]) -> dict[str, Any] | None:
    """The write a turn stopped before: the first `remember_memory` call of its last reply,
    as `{"tool_call_id", "content", "replaces"}`."""
    call = _first_write(_last_reply(messages))
    if call is None:
        return None
    return {
        "tool_call_id": call["id"],
        "content": call["args"].get("content"),
        "replaces": call["args"].get("replaces"),
    }


class ApprovalGate(AgentMiddleware):
    """After a reply that asks for `remember_memory`: every call of it but the first such is
    answered `rejected` at once, so the user decides about one write and nothing else of the
    reply runs after their decision; and so is the first, when its content repeats a
    credential the user stated in any of their threads (however worded: the write itself
    would refuse it), so that it is never put to the user as a harmless-looking proposal.
    That check reads the user's recent messages: off the event loop, once per proposed write."""

    def after_model(self, state: AgentState, runtime: Runtime) -> dict[str, Any] | None:
        reply = state["messages"][-1]
        first = _first_write(reply)
        if first is None:
            return None
        return _answers(reply, first, _stated_elsewhere(first, state, runtime))

    async def aafter_model(self, state: AgentState, runtime: Runtime) -> dict[str, Any] | None:
        reply = state["messages"][-1]
        first = _first_write(reply)
        if first is None:
            return None
        stated = await on_database(_stated_elsewhere)(first, state, runtime)
        return _answers(reply, first, stated)


def _stated_elsewhere(
    first: LangChainToolCall, state: AgentState, runtime: Runtime
) -> MemorySensitiveContent | None:
    """The refusal of `first`, a write the user would be asked about, when its content, or the
    turn's own message, repeats a credential the user stated in one of their recent messages
    of any thread (the write itself would refuse either); None when it
    repeats none, or when the write would not be put to the user anyway (it runs at once and
    is refused by the checks that need no database)."""
    uid = getattr(runtime.context, "uid", None)
    if uid is None or not _would_propose(first, state["messages"], uid):
        return None
    said = [m.text for m in state["messages"] if isinstance(m, HumanMessage)]
    content = normalize_memory_text(first["args"]["content"])
    try:
        refuse_stated_credential(uid, content, turn=said[-1] if said else None)
    except MemorySensitiveContent as exc:
        return exc
    return None


def _answers(
    reply: AIMessage, first: LangChainToolCall, stated: MemorySensitiveContent | None
) -> dict[str, Any] | None:
    """The tool results answered at once: `rejected` for every write of `reply` but `first`,
    and for `first` too when `stated` refuses it."""
    answered = [
        (call, _ONE_WRITE_PER_REPLY) for call in reply.tool_calls if call["id"] != first["id"]
    ]
    if stated is not None:
        answered.append((first, memory_error_result(stated)))
    if not answered:
        return None
    return {
        "messages": [
            ToolMessage(
                content=result.to_json(),
                artifact=result,
                tool_call_id=call["id"],
                name=call["name"],
                status="error",
            )
            for call, result in answered
        ]
    }


def _is_first_write(request: ToolCallRequest) -> bool:
    """Only the reply's first `remember_memory` is put to the user (the same answer when the
    graph resumes: it reads the same state), and never one whose content holds a credential or
    invisible characters, that would make one on a line of the file (a `replaces` completing a
    key: the user would see a harmless fragment), or that repeats one the user stated, however
    worded: that call runs at once, and is refused (`rejected`) before any lock; nor one the
    gate already answered (a credential stated in another thread)."""
    messages = request.state["messages"]
    first = _first_write(_last_reply(messages))
    if first is None or first["id"] != request.tool_call["id"]:
        return False
    if any(isinstance(m, ToolMessage) and m.tool_call_id == first["id"] for m in messages):
        return False
    return _would_propose(first, messages, getattr(request.runtime.context, "uid", None))


def _would_propose(first: LangChainToolCall, messages: list[BaseMessage], uid: int | None) -> bool:
    """Whether `first` passes the checks that need no database: its content and `replaces`
    hold nothing memory never keeps, and it repeats no credential said in `messages`."""
    refused = holds_what_memory_never_keeps(
        uid=uid, content=first["args"]["content"], replaces=first["args"].get("replaces")
    )
    return not refused and stated_credential(first, messages) is None


def approval_middleware() -> list[AgentMiddleware]:
    """The middleware that makes a graph stop before each memory write, in list order (the
    gate's `after_model` runs before the human-in-the-loop one)."""
    return [
        HumanInTheLoopMiddleware(
            interrupt_on={
                REMEMBER_MEMORY_TOOL: {
                    "allowed_decisions": list(APPROVAL_DECISIONS),
                    "when": _is_first_write,
                }
            },
            # The stored output stays the tool's own JSON; the row records what ran.
            edit_notice=None,
        ),
        ApprovalGate(),
    ]


def is_declined(result: ToolMessage) -> bool:
    """Whether `result` is the human-in-the-loop answer to a call the user rejected."""
    kwargs = result.additional_kwargs
    return (
        kwargs.get("lc_source") == _DECISION_SOURCE
        and (kwargs.get("lc_data") or {}).get("decision") == "reject"
    )


def decision_command(decision: dict[str, Any]) -> Command:
    """The LangGraph resume command for a user's (checked) decision."""
    if decision["decision"] == "edit":
        args = {"content": decision["content"], "replaces": decision.get("replaces")}
        answer = {"type": "edit", "edited_action": {"name": REMEMBER_MEMORY_TOOL, "args": args}}
    else:
        answer = {"type": decision["decision"]}
    return Command(resume={"decisions": [answer]})


def refuse_unfit_decision(
    *, user_id: int, decision: dict[str, Any], proposed: PendingApproval
) -> None:
    """Refuse (`ChatDecisionRefused`, with the reason) a checked `decision` that could not be
    carried out now, before it is spent: an `approve` of the `proposed` write, or an `edit`,
    that the write would refuse (memory is off, `replaces` not exactly once in the file, a
    cap). `reject` always goes through. The approval stays pending, so the user can decide
    again; the write re-checks all of this when it runs."""
    if decision["decision"] == "reject":
        return
    if decision["decision"] == "edit":
        content, replaces = decision["content"], decision["replaces"]
    else:
        content, replaces = proposed.content, proposed.replaces
    try:
        check_memory_write(user_id=user_id, content=content, replaces=replaces)
    except MemoryUnavailable:
        raise  # a database or file failure is no reason about the decision
    except MemoryWriteError as exc:
        reason = memory_refusal(exc).reason
        if reason is not None:
            raise ChatDecisionRefused(reason) from exc
        # The write's own message, which a person reads in their language too.
        raise ChatDecisionRefused(exc.template, **exc.params) from exc
