"""Closing a turn: `close_turn` settles its outcome — succeeded, interrupted or failed, the run
is finished (`interrupted` when it stopped for a decision) and what it produced persisted in
one statement that stores nothing unless the run's lease still holds (a fenced-off worker
writes nothing); a decided approval's pending call gets its final status; a turn that ended
without an interrupt deletes its checkpoints. A lease lost mid-run leaves the run to the
reaper. `cancel_turn` is the close of a turn whose caller stopped waiting (`cancellation`);
`close_agent_run` the close of a team's own run.
"""

from collections.abc import Awaitable, Sequence
from contextlib import nullcontext

from django.db import DatabaseError, transaction
from langchain_core.messages import BaseMessage, ToolMessage

from conversations import checkpoints, runs, services
from conversations.models import AgentRun, ToolCall
from conversations.runs.errors import RunError
from conversations.utils.connections import release_connection
from memory_app.runtime.agent_phase import call_outcome, run_messages
from memory_app.runtime.concurrency.loop import cancel_reason, logger, on_database
from memory_app.runtime.concurrency.settling import opened
from memory_app.runtime.errors import (
    ChatModelUnavailable,
    ChatRunLost,
    LeaseLost,
    error_text,
    is_model_failure,
)
from memory_app.runtime.turns import (
    CANCELLED_BY_CALLER,
    AgentRunHandle,
    Turn,
    TurnOutcome,
    cancellation,
)
from memory_app.tool_names import REMEMBER_MEMORY_TOOL
from memory_app.tool_results import decided_write_not_run


async def aopen(opening: Awaitable[Turn], *, reason: str = CANCELLED_BY_CALLER) -> Turn:
    """Await an open phase so that a cancellation while it runs still closes the run it
    opens (the open goes on to its end on its worker thread; the run is then cancelled)."""
    return await opened(
        opening, undo=lambda turn: on_database(cancel_turn)(turn, reason=cancel_reason(reason))
    )


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
        raise ChatModelUnavailable(f"the model is unavailable: {error_text(exc)}") from exc
    raise exc


def cancel_turn(turn: Turn, *, reason: str) -> None:
    """Close a turn whose caller stopped waiting: the run is `cancelled` with `reason` as its
    error and nothing the agent produced is stored (the user's message, stored when the turn
    opened, and whatever a tool already committed stay). A resume's decided call gets its
    final status: its result if it had run, else `declined` (`settle_late_calls` corrects it
    if it was still running and wrote). A lease already lost leaves the run to the reaper;
    its checkpoints are deleted."""
    try:
        _finish(
            turn.handle,
            status=AgentRun.Status.CANCELLED,
            error=reason,
            turn=turn,
            results=list(turn.tool_results.values()),
        )
    except RunError:
        logger.warning("run %s was cancelled after losing its lease", turn.handle.run_id)
    logger.info("run %s %s", turn.handle.run_id, reason)
    # A cancelled turn will never be resumed (a cancelled resume has spent its decision).
    _forget_checkpoints(turn, TurnOutcome(checkpoint_key=turn.checkpoint_key or None))


async def acancel_turn(turn: Turn, *, reason: str) -> None:
    """`cancel_turn`, then `settle_late_calls`: one phase, so that awaited with `to_the_end`
    a second cancellation cannot skip the settling (a decided write that ran would keep the
    `declined` its cancel gave it)."""
    await on_database(cancel_turn)(turn, reason=reason)
    await settle_late_calls(turn)


async def settle_late_calls(turn: Turn) -> None:
    """After `cancel_turn`: a resume's decided write still running when the turn was cancelled
    gets its real outcome once it ends, if it committed before the fence (the run is fenced
    off, so a write still to come is refused, and the call ends promptly). The turn's other
    calls still running are not waited for: nothing of theirs is stored."""
    call = turn.tools_running.get(turn.approval.tool_call_id) if turn.approval else None
    if call is None:
        return
    try:
        decided = await call
    except Exception:  # the call's own failure: it wrote nothing this could report
        return
    if isinstance(decided, ToolMessage) and call_outcome(decided)[0] == ToolCall.Status.SUCCESS:
        await on_database(_settle_decided_call)(
            turn, [decided], ended=AgentRun.Status.CANCELLED, late=True
        )


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
    results: Sequence[BaseMessage] = (),
) -> list[dict[str, str]]:
    """Finish the run and store what the agent produced and mark the thread updated, in one
    statement that stores nothing unless the run's lease still holds: a fenced-off worker
    writes nothing. A decided approval's pending call gets its outcome, and a turn that did
    not stop for a decision deletes its checkpoints, in the same transaction. Returns the
    tool log."""
    settles = turn is not None and turn.approval is not None
    key = _turn_key(turn, outcome)
    forgets = bool(key) and status != AgentRun.Status.INTERRUPTED
    try:
        # One statement is a transaction of its own; the others join it in one.
        with transaction.atomic() if settles or forgets else nullcontext():
            messages = run_messages(produced)
            runs.finish_run(
                run_id=handle.run_id,
                worker_id=handle.ctx.worker_id,
                status=status,
                error=error,
                conversation=handle.conversation,
                messages=messages,
            )
            log = [
                {"name": call.name, "status": str(call.status)}
                for message in messages
                for call in message.tool_calls
            ]
            if settles:
                ended = [*produced, *results]
                log.insert(0, _settle_decided_call(turn, ended, ended=status))
            if forgets:
                checkpoints.delete_checkpoints([key])
        return log
    finally:
        _release(handle)


# `ToolCall.error` of a decided call that never ran because its resume run ended first.
DECIDED_CALL_NOT_RUN = "not run: the resume run was {ended} before it"


def _settle_decided_call(
    turn: Turn, produced: Sequence[BaseMessage], *, ended: str, late: bool = False
) -> dict[str, str]:
    """Give the approval's pending call what the decision made of it, whatever became of the
    resume run (`ended`: its final status): the arguments actually run (the user's edit, if
    any), and the call's own status and output if it ran, else `declined` with an output
    saying the run ended before it. `late`: the call ended after the run's cancel had
    settled it as not run, and its real outcome replaces that. Returns its log entry."""
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
        status, output = ToolCall.Status.DECLINED, decided_write_not_run(ended).to_json()
        error = DECIDED_CALL_NOT_RUN.format(ended=ended)
    else:
        status, output, error = call_outcome(result)
    services.settle_pending_call(
        conversation=turn.handle.conversation,
        run_id=approval.run_id,
        tool_call_id=approval.tool_call_id,
        arguments=arguments,
        output=output,
        status=status,
        error=error,
        was=(ToolCall.Status.DECLINED, DECIDED_CALL_NOT_RUN.format(ended=ended)) if late else None,
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


def close_agent_run(
    turn: Turn,
    exc: BaseException | None,
    outcome: TurnOutcome,
    results: Sequence[BaseMessage] = (),
) -> None:
    """The close of `agent_run` and `aagent_run`: after a normal exit `succeeded`, or
    `interrupted` with its pending call when the team's graph stopped before a write; after
    an exception (which the caller re-raises) `cancelled` or `failed` as `cancellation` says.
    A resume's decided call gets its final status either way (`outcome`: what the team's
    graph gave back; `results`: its tool results)."""
    handle, produced = turn.handle, outcome.produced
    if exc is not None:
        reason = cancellation(exc, default=CANCELLED_BY_CALLER)
        status = AgentRun.Status.FAILED if reason is None else AgentRun.Status.CANCELLED
        error = error_text(exc) if reason is None else reason
        try:
            _finish(handle, status=status, error=error, turn=turn, outcome=outcome, results=results)
        except RunError:
            logger.warning("run %s ended after losing its lease", handle.run_id)
        logger.warning("run %s %s: %s", handle.run_id, status, error)
        return
    status = AgentRun.Status.INTERRUPTED if outcome.approval else AgentRun.Status.SUCCEEDED
    kept = produced if outcome.approval else ()
    try:
        _finish(handle, status=status, produced=kept, turn=turn, outcome=outcome, results=results)
    except RunError as lost:
        raise ChatRunLost("the run's lease was lost") from lost
