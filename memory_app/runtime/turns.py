"""The three phases of a turn, and `agent_run`: the same open and close around a team's loop.

The Chat service is the only writer of `ToolRuntimeContext`; these phases are where it does so.
Each phase is one seam an async or streamed turn reuses (running the database phases in
worker threads) while replacing only the agent's invocation:

- `open_turn(user_id=, thread_id=, message=) -> Turn` (and `open_subagent_turn` for a child
  run, `open_resume_turn` for a user's decision): the entry checks (a storable message or
  decision, outside any transaction, an active user), the thread (a new message first
  declines the thread's undecided approval, if any), the run created and claimed together
  with the user's message in one transaction (a `resume` run names the interrupted run it
  `resumes`: unique, so one decision wins), then the run handed to the process's lease
  keeper. Database work only, no model.
- `run_agent(turn, prepare=) -> TurnOutcome`: `prepare(turn)` builds the graph and the
  messages it starts from, or the decision it resumes with (it reads the database), then the
  agent runs to its answer with `context=turn.handle.ctx` — on a graph with approval, under
  the checkpoint key `turn.checkpoint_key` — or until it stops before a memory write. It never
  raises for a failure: the error travels in the outcome, with what the agent produced before.
- `close_turn(turn, outcome) -> tool log`: settles the outcome. Succeeded, interrupted or
  failed, the run is finished (`interrupted` when it stopped for a decision) and what it
  produced persisted through `conversations.services` in one transaction whose first
  statement re-checks the lease (a fenced-off worker writes nothing); a decided approval's
  pending call gets its outcome; a turn that ended without an interrupt deletes its
  checkpoints. A lease lost mid-run leaves the run to the reaper. A failed outcome raises the
  Chat service's refusal (`ChatModelUnavailable`, `ChatRunLost`) or the original error.
  `cancel_turn(turn, reason=)` is the close of a turn whose caller stopped waiting: the run
  is `cancelled` and nothing of the agent's is stored.

Async callers use the same phases: the database phases run on worker threads
(`in_worker_thread`: no Django call on the event loop), and the agent phase is
`astream_agent` / `arun_agent`, the agent's `astream` instead of its `stream`. The sync phase
streams only `values`: LangGraph 1.2's sync `stream` with the `messages` or `custom` mode
deadlocks at `max_concurrency=1` (its stream waiter takes the pool's only slot), which is why
token streaming exists only on the async side.
"""

import asyncio
import logging
import os
import socket
import threading
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import aclosing, asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.db import DatabaseError, IntegrityError, transaction
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, ToolMessage
from langchain_core.messages.tool import ToolCall as LangChainToolCall
from langgraph.types import Command

from conversations import checkpoints, runs, selectors, services
from conversations.models import AgentRun, Conversation, Message, ToolCall
from conversations.runs import RunError, ToolRuntimeContext
from conversations.utils.connections import in_worker_thread, release_connection
from conversations.utils.string_utils import STORABLE_TEXT_REQUIREMENT, is_storable_text
from memory_app.runtime.approval import APPROVAL_DECISIONS, is_declined, proposed_write
from memory_app.runtime.errors import (
    ChatError,
    ChatInputError,
    ChatModelUnavailable,
    ChatNothingToResume,
    ChatRunLost,
    ChatThreadNotFound,
    LeaseLost,
    error_text,
    is_model_failure,
)
from memory_app.runtime.graphs import AgentGraph
from memory_app.runtime.limits import CHAT_MESSAGE_MAX_BYTES, RECURSION_LIMIT
from memory_app.tool_names import REMEMBER_MEMORY_TOOL
from memory_app.tools import ToolResult

logger = logging.getLogger("yuxi.runs")

# One event of a streamed turn, a dict keyed by "event": run, token, tool_call, tool_result,
# then done or error (memory_app.runtime.streaming builds the first and the last).
ChatEvent = dict[str, Any]

# The `create_agent` graph's nodes whose stream chunks become events.
_MODEL_NODE = "model"
_TOOLS_NODE = "tools"
# The `error` of a run whose caller stopped waiting for it.
CANCELLED_BY_CALLER = "cancelled: the caller stopped waiting for the turn"
CANCELLED_BY_READER = "cancelled: the consumer stopped reading the stream"


@dataclass(frozen=True)
class AgentRunHandle:
    """A claimed, running run: its trusted context, id and the lease-lost signal."""

    ctx: ToolRuntimeContext
    run_id: str
    lease_lost: threading.Event  # set by the lease keeper when the lease is lost
    run: AgentRun
    conversation: Conversation


@dataclass(frozen=True)
class Turn:
    """One opened turn: the claimed run and the user message that opened it (`message` and
    its stored row are None for an `agent_run`, whose caller brings its own input, and for a
    resume, which brings the user's `decision` about the `approval` it settles).

    `checkpoint_key` is where the turn's graph keeps its checkpoints when it runs with
    approval: the `run_id` of the run that started the turn (a resume keeps the key of the
    run it resumes).
    """

    handle: AgentRunHandle
    message: str | None
    user_message: Message | None
    checkpoint_key: str = ""
    decision: dict[str, Any] | None = None
    approval: selectors.PendingApproval | None = None


@dataclass(frozen=True)
class AgentInput:
    """What `run_agent` runs: the graph and the messages the agent starts from, or (`resume`)
    the command continuing the graph from its checkpoint."""

    graph: AgentGraph
    messages: list[BaseMessage]
    resume: Command | None = None


@dataclass(frozen=True)
class TurnOutcome:
    """What the agent produced (after its input) and the error that stopped it, if any.

    `approval` is the write the graph stopped before (`{"tool_call_id", "content",
    "replaces"}`), None when it did not stop; `checkpoint_key` the key its graph kept
    checkpoints under, None when it kept none.
    """

    produced: Sequence[BaseMessage] = ()
    error: BaseException | None = None
    approval: dict[str, Any] | None = None
    checkpoint_key: str | None = None

    @property
    def reply(self) -> str:
        """The agent's last reply as plain text (LangChain's `.text` is a callable str)."""
        replies = [m for m in self.produced if isinstance(m, AIMessage)]
        return str(replies[-1].text) if replies else ""


# --- open ---------------------------------------------------------------------------------


def check_message(message: object) -> None:
    """Refuse (`ChatInputError`) a message that is not non-empty, storable, bounded text."""
    if not isinstance(message, str) or not message.strip():
        raise ChatInputError("message must be non-empty text")
    if not is_storable_text(message):
        raise ChatInputError(f"message must be {STORABLE_TEXT_REQUIREMENT}")
    if len(message.encode("utf-8")) > CHAT_MESSAGE_MAX_BYTES:
        raise ChatInputError(f"message is longer than {CHAT_MESSAGE_MAX_BYTES} bytes")


# What a user may send about a pending approval, beside the decision itself.
_DECISION_KEYS = {"decision", "content", "replaces"}


def check_decision(resume: object) -> dict[str, Any]:
    """The user's decision about a pending memory write, checked: `{"decision": "approve" |
    "reject"}` or `{"decision": "edit", "content": str, "replaces": str | None}`; anything
    else is `ChatInputError`. (The edited text's own caps are the tool's: it refuses them.)"""
    if not isinstance(resume, dict) or not set(resume) <= _DECISION_KEYS:
        raise ChatInputError("resume must be an object with decision, content and replaces")
    decision = resume.get("decision")
    if decision not in APPROVAL_DECISIONS:
        raise ChatInputError(f"decision must be one of {', '.join(APPROVAL_DECISIONS)}")
    if decision != "edit":
        if set(resume) != {"decision"}:
            raise ChatInputError("content and replaces go only with the edit decision")
        return {"decision": decision}
    content, replaces = resume.get("content"), resume.get("replaces")
    for name, value in (("content", content), ("replaces", replaces)):
        if value is None and name == "replaces":
            continue
        if not isinstance(value, str) or not is_storable_text(value):
            raise ChatInputError(f"{name} must be valid text without NUL")
        if len(value.encode("utf-8")) > CHAT_MESSAGE_MAX_BYTES:
            raise ChatInputError(f"{name} is longer than {CHAT_MESSAGE_MAX_BYTES} bytes")
    return {"decision": decision, "content": content, "replaces": replaces}


def _refuse_inside_transaction() -> None:
    """The memory file is published before a caller's commit: a rollback would leave the file
    changed and the run gone, so a run never starts inside a caller's transaction."""
    try:
        with transaction.atomic(durable=True):
            pass
    except RuntimeError as exc:
        raise ChatError("an agent run cannot start inside a database transaction") from exc


def _refuse_inactive_user(user_id: int) -> None:
    if not get_user_model().objects.filter(pk=user_id, is_active=True).exists():
        raise ChatError("this user may not chat")


def _entry_thread(*, user_id: int, thread_id: str | None, first_message: str) -> Conversation:
    """The entry checks every top-level run passes, then its thread (a new one if None)."""
    _refuse_inside_transaction()
    _refuse_inactive_user(user_id)
    if thread_id is None:
        return services.start_thread(user_id=user_id, first_message=first_message)
    conversation = selectors.get_chat_thread(user_id=user_id, thread_id=thread_id)
    if conversation is None:
        raise ChatThreadNotFound("no such thread")
    return conversation


def _new_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def _claim(
    *,
    user_id: int,
    conversation: Conversation,
    request_id: str,
    run_type: str,
    parent_run: AgentRun | None = None,
    resumes: AgentRun | None = None,
    message: str | None = None,
) -> tuple[AgentRunHandle, Message | None]:
    """Create and claim the run (and store the user's message) in one transaction, then hand
    the run to the lease keeper. A second run that `resumes` the same run raises
    `IntegrityError` (nothing is created)."""
    worker_id = _new_worker_id()
    with transaction.atomic():
        run = runs.start_run(
            user_id=user_id,
            conversation=conversation,
            request_id=request_id,
            worker_id=worker_id,
            run_type=run_type,
            parent_run=parent_run,
            resumes=resumes,
        )
        user_message = None
        if message is not None:
            [user_message] = services.record_run_messages(
                conversation=conversation,
                run_id=str(run.run_id),
                messages=[services.RunMessage(role=Message.Role.USER, content=message)],
            )
    ctx = ToolRuntimeContext(
        uid=str(user_id),
        thread_id=conversation.thread_id,
        run_id=str(run.run_id),
        request_id=request_id,
        worker_id=worker_id,
    )
    lost = runs.lease_keeper().register(run_id=ctx.run_id, worker_id=worker_id)
    handle = AgentRunHandle(
        ctx=ctx, run_id=ctx.run_id, lease_lost=lost, run=run, conversation=conversation
    )
    return handle, user_message


# `AgentRun.error` of the resume run that declines an approval because a new message came.
DECLINED_BY_MESSAGE_ERROR = "declined: the user sent a new message instead of deciding"


def _decline_undecided(conversation: Conversation) -> None:
    """Decline the thread's undecided approval before a new message: its call answered
    `declined` (so the stored history stays well-formed), its checkpoints deleted."""
    for run in selectors.undecided_interrupts(conversation_id=conversation.pk):
        run.conversation = conversation
        services.decline_approval(
            run=run, key=runs.checkpoint_key(run), error=DECLINED_BY_MESSAGE_ERROR
        )


def open_turn(*, user_id: int, thread_id: str | None, message: str) -> Turn:
    """Open a chat turn for `message` in `user_id`'s thread (a new one when None); a pending
    approval of the thread is declined first.

    Raises `ChatInputError`, `ChatError` (inside a transaction, inactive user),
    `ChatThreadNotFound`, `django.db.DatabaseError`.
    """
    check_message(message)
    conversation = _entry_thread(user_id=user_id, thread_id=thread_id, first_message=message)
    if thread_id is not None:
        _decline_undecided(conversation)
    handle, user_message = _claim(
        user_id=user_id,
        conversation=conversation,
        request_id=f"req-{uuid.uuid4().hex}",
        run_type=AgentRun.RunType.CHAT,
        message=message,
    )
    return Turn(
        handle=handle, message=message, user_message=user_message, checkpoint_key=handle.run_id
    )


def open_resume_turn(*, user_id: int, thread_id: str, resume: object) -> Turn:
    """Open a `resume` run carrying the user's decision about the thread's pending approval.

    Raises `ChatInputError` (bad decision, no thread), `ChatError` (inside a transaction,
    inactive user), `ChatThreadNotFound`, `ChatNothingToResume` (nothing pending, or another
    decision came first), `django.db.DatabaseError`.
    """
    decision = check_decision(resume)
    if not isinstance(thread_id, str):
        raise ChatInputError("a decision needs the thread_id of its thread")
    conversation = _entry_thread(user_id=user_id, thread_id=thread_id, first_message="")
    approval = selectors.pending_approval(conversation_id=conversation.pk)
    interrupted = (
        selectors.undecided_interrupts(conversation_id=conversation.pk, run_id=approval.run_id)
        .select_related("conversation")
        .first()
        if approval is not None
        else None
    )
    if interrupted is None:
        raise ChatNothingToResume("no approval is pending in this thread")
    try:
        handle, _ = _claim(
            user_id=user_id,
            conversation=conversation,
            request_id=f"req-{uuid.uuid4().hex}",
            run_type=AgentRun.RunType.RESUME,
            resumes=interrupted,
        )
    except IntegrityError as exc:
        raise ChatNothingToResume("another decision settled this approval first") from exc
    return Turn(
        handle=handle,
        message=None,
        user_message=None,
        checkpoint_key=runs.checkpoint_key(interrupted),
        decision=decision,
        approval=approval,
    )


def open_subagent_turn(*, parent: AgentRunHandle, task: str) -> Turn:
    """Open a `subagent` run of `parent` for `task`, in a persisted child thread of parent's.

    Raises `ChatInputError` for a task that is not a storable message.
    """
    check_message(task)
    user_id = int(parent.ctx.uid)
    child = services.start_thread(
        user_id=user_id,
        first_message=task,
        source=Conversation.Source.AGENT_CALL,
        parent=parent.conversation,
    )
    handle, user_message = _claim(
        user_id=user_id,
        conversation=child,
        request_id=parent.ctx.request_id,
        run_type=AgentRun.RunType.SUBAGENT,
        parent_run=parent.run,
        message=task,
    )
    return Turn(handle=handle, message=task, user_message=user_message)


# --- run ----------------------------------------------------------------------------------


class CheckpointMissing(Exception):
    """Inside a resume: the interrupted graph's checkpoint is gone; nothing can continue."""


def agent_config(turn: Turn, agent_input: AgentInput) -> dict[str, Any]:
    """The run config of the turn's graph: its bounds, and its checkpoint key on a graph with
    approval."""
    config: dict[str, Any] = {"max_concurrency": 1, "recursion_limit": RECURSION_LIMIT}
    if agent_input.graph.approval:
        config["configurable"] = {"thread_id": turn.checkpoint_key}
    return config


def resume_start(agent_input: AgentInput, checkpointed: Any) -> int:
    """Where a resumed turn's own messages begin in its graph state (`checkpointed`, the state
    snapshot the graph resumes from); refuses a resume with nothing to continue."""
    if not checkpointed.next:
        raise CheckpointMissing("the interrupted turn's checkpoint is gone")
    return len(checkpointed.values.get("messages", []))


def outcome_of(
    state: dict[str, Any] | None, start: int, agent_input: AgentInput, turn: Turn
) -> TurnOutcome:
    """The outcome of a graph run whose last streamed state (values) is `state`."""
    if state is None:
        return TurnOutcome(checkpoint_key=_key(turn, agent_input))
    messages = state["messages"]
    stopped = "__interrupt__" in state
    return TurnOutcome(
        produced=messages[start:],
        approval=proposed_write(messages) if stopped else None,
        checkpoint_key=_key(turn, agent_input),
    )


def _key(turn: Turn, agent_input: AgentInput) -> str | None:
    return turn.checkpoint_key if agent_input.graph.approval else None


class _Progress:
    """A run of the agent as its stream tells it: where the turn's own messages start, the
    graph input (the messages, or a resume's decision), the last `values` state, and the
    `ChatEvent`s the `messages` and `tasks` chunks give.

    `token` comes only from the model node's non-empty `AIMessageChunk`s; `tool_call` when a
    tools task starts (its call is the one the run's middleware let through, with the id the
    run uses), `tool_result` when it has run, with the status its `ToolCall` row gets. A
    resumed turn (`checkpointed`: the state snapshot it resumes from) starts where the
    interrupted state ends.
    """

    def __init__(self, turn: Turn, agent_input: AgentInput, checkpointed: Any = None) -> None:
        self.turn = turn
        self.agent_input = agent_input
        if agent_input.resume is not None:
            self.start = resume_start(agent_input, checkpointed)
            self.graph_input: Any = agent_input.resume
        else:
            self.start = len(agent_input.messages)
            self.graph_input = {"messages": agent_input.messages}
        self.state: dict[str, Any] | None = None

    @property
    def produced(self) -> Sequence[BaseMessage]:
        return self.state["messages"][self.start :] if self.state is not None else ()

    def feed(self, mode: str, chunk: Any) -> list[ChatEvent]:
        if mode == "values":
            self.state = chunk
        elif mode == "messages":
            message, metadata = chunk
            if (
                isinstance(message, AIMessageChunk)
                and metadata.get("langgraph_node") == _MODEL_NODE
                and message.text
            ):
                return [{"event": "token", "text": str(message.text)}]
        elif mode == "tasks" and chunk["name"] == _TOOLS_NODE:
            if "input" in chunk:
                return [
                    {"event": "tool_call", "id": call["id"], "name": call["name"]}
                    for call in chunk["input"]
                ]
            result = chunk.get("result") or {}
            return [
                {
                    "event": "tool_result",
                    "id": message.tool_call_id,
                    "name": message.name or "",
                    "status": str(_call_outcome(message)[0]),
                }
                for message in result.get("messages", ())
                if isinstance(message, ToolMessage)
            ]
        return []

    def outcome(self) -> TurnOutcome:
        return outcome_of(self.state, self.start, self.agent_input, self.turn)

    def stream_arguments(self, modes: list[str]) -> dict[str, Any]:
        """How every turn runs its agent: with the run's context, tool calls one at a time,
        under its checkpoint key on a graph with approval."""
        return {
            "input": self.graph_input,
            "context": self.turn.handle.ctx,
            "config": agent_config(self.turn, self.agent_input),
            "stream_mode": modes,
        }


def _failed(
    turn: Turn, agent_input: AgentInput | None, progress: _Progress | None, exc: BaseException
) -> TurnOutcome:
    """The outcome of a turn whose `prepare` or agent raised `exc`: what it produced before."""
    key = _key(turn, agent_input) if agent_input is not None else None
    produced = progress.produced if progress is not None else ()
    return TurnOutcome(produced=produced, error=exc, checkpoint_key=key)


def run_agent(turn: Turn, *, prepare: Callable[[Turn], AgentInput]) -> TurnOutcome:
    """Build the turn's agent with `prepare`, run it to its answer (or to its stop before a
    memory write) and return the outcome; any error (in `prepare` or the agent) is returned in
    the outcome, never raised."""
    agent_input: AgentInput | None = None
    progress: _Progress | None = None
    try:
        agent_input = prepare(turn)
        agent = agent_input.graph.agent
        checkpointed = (
            agent.get_state(agent_config(turn, agent_input))
            if agent_input.resume is not None
            else None
        )
        progress = _Progress(turn, agent_input, checkpointed)
        for mode, chunk in agent.stream(**progress.stream_arguments(["values"])):
            progress.feed(mode, chunk)
    except BaseException as exc:  # close_turn finishes the run, then re-raises it
        return _failed(turn, agent_input, progress, exc)
    return progress.outcome()


async def astream_agent(
    turn: Turn, *, prepare: Callable[[Turn], AgentInput], events: bool = True
) -> AsyncIterator[ChatEvent | TurnOutcome]:
    """The agent phase for async callers: `prepare` on a worker thread, then the agent's
    `astream`. Yields the turn's `ChatEvent`s as the agent produces them (when `events`),
    then its `TurnOutcome`, last. Errors travel in the outcome; a cancellation of the caller
    (or the generator being closed) is not an error of the turn and propagates."""
    agent_input: AgentInput | None = None
    progress: _Progress | None = None
    try:
        agent_input = await in_worker_thread(prepare)(turn)
        agent = agent_input.graph.agent
        checkpointed = (
            await agent.aget_state(agent_config(turn, agent_input))
            if agent_input.resume is not None
            else None
        )
        progress = _Progress(turn, agent_input, checkpointed)
        modes = ["values", "messages", "tasks"] if events else ["values"]
        async with aclosing(agent.astream(**progress.stream_arguments(modes))) as chunks:
            async for mode, chunk in chunks:
                for event in progress.feed(mode, chunk):
                    yield event
    except (asyncio.CancelledError, GeneratorExit):
        raise
    except BaseException as exc:  # close_turn finishes the run, then re-raises it
        yield _failed(turn, agent_input, progress, exc)
        return
    yield progress.outcome()


async def arun_agent(turn: Turn, *, prepare: Callable[[Turn], AgentInput]) -> TurnOutcome:
    """`run_agent` for async callers (`astream_agent` without events)."""
    async with aclosing(astream_agent(turn, prepare=prepare, events=False)) as steps:
        async for step in steps:
            outcome = step
    return outcome


async def aopen(opening: Awaitable[Turn], *, reason: str = CANCELLED_BY_CALLER) -> Turn:
    """Await an open phase so that a cancellation while it runs still closes the run it
    opens (the open goes on to its end on its worker thread; the run is then cancelled)."""
    task = asyncio.ensure_future(opening)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        try:
            turn = await task
        except Exception:  # the open failed: there is no run to close
            turn = None
        if turn is not None:
            await in_worker_thread(cancel_turn)(turn, reason=reason)
        raise


# --- close --------------------------------------------------------------------------------


def close_turn(turn: Turn, outcome: TurnOutcome) -> list[dict[str, str]]:
    """Settle `outcome`: finish the run and persist what it produced; returns the tool log.

    Raises `ChatRunLost` (the lease was lost: nothing of the agent's is stored),
    `ChatModelUnavailable` (a model failure: the run is failed, whole steps kept) or the
    outcome's own error (the run is failed, whole steps kept).
    """
    exc = outcome.error
    if exc is None:
        status = AgentRun.Status.INTERRUPTED if outcome.approval else AgentRun.Status.SUCCEEDED
        try:
            return _finish(
                turn.handle, status=status, produced=outcome.produced, turn=turn, outcome=outcome
            )
        except RunError as lost:
            _forget_checkpoints(turn, outcome)
            raise ChatRunLost("the run's lease was lost") from lost
    if isinstance(exc, LeaseLost):
        _release(turn.handle)
        _forget_checkpoints(turn, outcome)
        raise ChatRunLost("the run's lease was lost") from exc
    _fail(turn, exc, outcome)
    if is_model_failure(exc):
        raise ChatModelUnavailable("the model is unavailable") from exc
    raise exc


def cancel_turn(turn: Turn, *, reason: str) -> None:
    """Close a turn whose caller stopped waiting: the run is `cancelled` with `reason` as its
    error and nothing the agent produced is stored (the user's message, stored when the turn
    opened, and whatever a tool already committed stay). A lease already lost leaves the run
    to the reaper; its checkpoints are deleted."""
    try:
        _finish(turn.handle, status=AgentRun.Status.CANCELLED, error=reason)
    except RunError:
        logger.warning("run %s was cancelled after losing its lease", turn.handle.run_id)
    logger.info("run %s %s", turn.handle.run_id, reason)
    # A cancelled turn will never be resumed (a cancelled resume has spent its decision).
    _forget_checkpoints(turn, TurnOutcome(checkpoint_key=turn.checkpoint_key or None))


def _turn_key(turn: Turn | None, outcome: TurnOutcome | None) -> str | None:
    """The checkpoint key a turn may have written under: a resume's always (its decision is
    spent whatever happens), a chat turn's when its graph ran with approval."""
    if turn is not None and turn.decision is not None:
        return turn.checkpoint_key
    return outcome.checkpoint_key if outcome is not None else None


def _forget_checkpoints(turn: Turn, outcome: TurnOutcome) -> None:
    """A turn that lost its lease will never be resumed: its checkpoints go (no lease needed;
    the reaper deletes them too if this fails)."""
    key = _turn_key(turn, outcome)
    if key:
        try:
            checkpoints.delete_checkpoints([key])
        except DatabaseError:
            logger.warning("run %s left checkpoints for the reaper", turn.handle.run_id)
        finally:
            release_connection()


def _release(handle: AgentRunHandle) -> None:
    runs.lease_keeper().unregister(handle.run_id)
    release_connection()


def _finish(
    handle: AgentRunHandle,
    *,
    status: str,
    error: str = "",
    produced: Sequence[BaseMessage] = (),
    turn: Turn | None = None,
    outcome: TurnOutcome | None = None,
) -> list[dict[str, str]]:
    """Finish the run and store what the agent produced, in one transaction whose first
    statement re-checks the lease: a fenced-off worker writes nothing. A decided approval's
    pending call gets its outcome there, and a turn that did not stop for a decision deletes
    its checkpoints there. Returns the tool log."""
    try:
        with transaction.atomic():
            runs.finish_run(
                run_id=handle.run_id, worker_id=handle.ctx.worker_id, status=status, error=error
            )
            messages = _run_messages(produced)
            services.record_run_messages(
                conversation=handle.conversation, run_id=handle.run_id, messages=messages
            )
            log = [
                {"name": call.name, "status": str(call.status)}
                for message in messages
                for call in message.tool_calls
            ]
            if turn is not None and turn.approval is not None:
                log.insert(0, _settle_decided_call(turn, produced))
            key = _turn_key(turn, outcome)
            if key and status != AgentRun.Status.INTERRUPTED:
                checkpoints.delete_checkpoints([key])
            services.touch_thread(conversation=handle.conversation)
        return log
    finally:
        _release(handle)


# `ToolCall.error` of a decided call that never ran because its resume run failed first.
DECIDED_CALL_NOT_RUN = "not run: the resume run failed before it"


def _settle_decided_call(turn: Turn, produced: Sequence[BaseMessage]) -> dict[str, str]:
    """Give the approval's pending call what the decision made of it: the arguments actually
    run (the user's edit, if any), its status, output and error. Returns its log entry."""
    approval, decision = turn.approval, turn.decision
    result = next(
        (
            m
            for m in produced
            if isinstance(m, ToolMessage) and m.tool_call_id == approval.tool_call_id
        ),
        None,
    )
    arguments = {"content": approval.content, "replaces": approval.replaces}
    if decision["decision"] == "edit":
        arguments = {"content": decision["content"], "replaces": decision["replaces"]}
    if result is None:
        status, output, error = ToolCall.Status.ERROR, "", DECIDED_CALL_NOT_RUN
    else:
        status, output, error = _call_outcome(result)
    services.settle_pending_call(
        conversation=turn.handle.conversation,
        run_id=approval.run_id,
        tool_call_id=approval.tool_call_id,
        arguments=arguments,
        output=output,
        status=status,
        error=error,
    )
    return {"name": REMEMBER_MEMORY_TOOL, "status": str(status)}


def _fail(turn: Turn, exc: BaseException, outcome: TurnOutcome) -> None:
    """Finish the run as failed, keeping what it produced; never masks the original error."""
    handle, produced = turn.handle, outcome.produced
    logger.warning("run %s failed: %s", handle.run_id, error_text(exc))
    # Only whole steps are kept: a last reply that no tool result followed was refused or never
    # acted on, and may not even be storable.
    ends = [i for i, message in enumerate(produced) if isinstance(message, ToolMessage)]
    produced = produced[: ends[-1] + 1] if ends else []
    try:
        _finish(
            handle,
            status=AgentRun.Status.FAILED,
            error=error_text(exc),
            produced=produced,
            turn=turn,
            outcome=outcome,
        )
    except Exception:
        logger.warning("run %s could not be finished as failed", handle.run_id, exc_info=True)


def _run_messages(produced: Sequence[BaseMessage]) -> list[services.RunMessage]:
    """The rows to store for the agent's messages: assistant replies with their tool calls
    (settled by the matching tool result), and the tool results themselves.

    A reply that only asks for tools (no text) is a `tool_call` message, not a `text` one:
    only text is dialogue, so history lookback, the staff preview and the next turn's prompt
    never show it as an empty assistant message.
    """
    results = {m.tool_call_id: m for m in produced if isinstance(m, ToolMessage)}
    records = []
    for message in produced:
        if isinstance(message, AIMessage):
            calls = [_run_tool_call(call, results.get(call["id"])) for call in message.tool_calls]
            only_calls = bool(calls) and not message.text.strip()
            records.append(
                services.RunMessage(
                    role=Message.Role.ASSISTANT,
                    message_type=Message.Type.TOOL_CALL if only_calls else Message.Type.TEXT,
                    content=message.text,
                    tool_calls=calls,
                )
            )
        elif isinstance(message, ToolMessage):
            records.append(
                services.RunMessage(
                    role=Message.Role.TOOL,
                    message_type=Message.Type.TOOL_RESULT,
                    content=message.text,
                    metadata={"tool_call_id": message.tool_call_id, "name": message.name or ""},
                )
            )
    return records


def _run_tool_call(call: LangChainToolCall, result: ToolMessage | None) -> services.RunToolCall:
    status, output, error = _call_outcome(result)
    return services.RunToolCall(
        tool_call_id=call["id"],
        name=call["name"],
        arguments=call["args"],
        output=output,
        status=status,
        error=error,
    )


def _call_outcome(result: ToolMessage | None) -> tuple[str, str, str]:
    """(status, output, error) of a tool call from its result message."""
    if result is None:
        return ToolCall.Status.PENDING, "", ""
    if is_declined(result):
        return ToolCall.Status.ERROR, result.text, services.DECLINED
    typed = result.artifact if isinstance(result.artifact, ToolResult) else None
    if typed is not None and typed.status.is_refusal:
        return ToolCall.Status.ERROR, result.text, typed.message or typed.status
    if result.status == "error":
        return ToolCall.Status.ERROR, result.text, "the tool failed"
    return ToolCall.Status.SUCCESS, result.text, ""


# --- a team's own loop --------------------------------------------------------------------


def _open_agent_run(
    *, user_id: int, thread_id: str | None, request_id: str | None, run_type: str
) -> Turn:
    """The open of `agent_run` and `aagent_run`: the entry checks, the thread, the run claimed."""
    if run_type not in runs.TOOL_RUN_TYPES:
        raise ValueError("agent_run serves top-level chat or resume runs")
    conversation = _entry_thread(user_id=user_id, thread_id=thread_id, first_message="")
    handle, _ = _claim(
        user_id=user_id,
        conversation=conversation,
        request_id=request_id or f"req-{uuid.uuid4().hex}",
        run_type=run_type,
    )
    return Turn(handle=handle, message=None, user_message=None, checkpoint_key=handle.run_id)


def _close_agent_run(handle: AgentRunHandle, exc: BaseException | None) -> None:
    """The close of `agent_run` and `aagent_run`: `succeeded` after a normal exit, `failed`
    with `exc` as its error after an exception (which the caller re-raises)."""
    if exc is not None:
        try:
            _finish(handle, status=AgentRun.Status.FAILED, error=error_text(exc))
        except RunError:
            logger.warning("run %s failed after losing its lease", handle.run_id)
        logger.warning("run %s failed: %s", handle.run_id, error_text(exc))
        return
    try:
        _finish(handle, status=AgentRun.Status.SUCCEEDED)
    except RunError as lost:
        raise ChatRunLost("the run's lease was lost") from lost


@contextmanager
def agent_run(
    *,
    user_id: int,
    thread_id: str | None,
    request_id: str | None = None,
    run_type: str = AgentRun.RunType.CHAT,
) -> Iterator[AgentRunHandle]:
    """A run for a backend team's own agent loop in `user_id`'s thread (a new one if None).

    Creates and claims the run, keeps its lease alive from the process's lease keeper and
    yields a handle (`ctx`, `run_id`, `lease_lost`). A normal exit finishes the run as
    `succeeded`; an exception finishes it as `failed` with `error` set, and is re-raised.

    Raises `ChatError` inside a transaction or for an inactive user, `ChatThreadNotFound`,
    `ValueError` for a run type other than chat/resume, `ChatRunLost` when the lease was
    lost by the time of a normal exit, `django.db.DatabaseError` when the database fails.
    """
    handle = _open_agent_run(
        user_id=user_id, thread_id=thread_id, request_id=request_id, run_type=run_type
    ).handle
    try:
        yield handle
    except BaseException as exc:
        _close_agent_run(handle, exc)
        raise
    _close_agent_run(handle, None)


@asynccontextmanager
async def aagent_run(
    *,
    user_id: int,
    thread_id: str | None,
    request_id: str | None = None,
    run_type: str = AgentRun.RunType.CHAT,
) -> AsyncIterator[AgentRunHandle]:
    """`agent_run` for async code (`async with aagent_run(...) as run:`): the same run, opened
    and finished on worker threads, never on the event loop. A cancellation of the caller
    fails the run like any exception (`internal error (CancelledError)`) and propagates.

    Raises what `agent_run` raises.
    """
    opening = in_worker_thread(_open_agent_run)(
        user_id=user_id, thread_id=thread_id, request_id=request_id, run_type=run_type
    )
    handle = (await aopen(opening)).handle
    try:
        yield handle
    except BaseException as exc:
        await in_worker_thread(_close_agent_run)(handle, exc)
        raise
    await in_worker_thread(_close_agent_run)(handle, None)
