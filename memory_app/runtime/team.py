"""`agent_run` / `aagent_run`: a team's own agent loop inside one of our runs — the same open
and close as a chat turn (`opening`, `closing`), on the process's event loop — with what the
team's `create_agent` graph needs for approval before a memory write (`TeamRun`).
"""

import asyncio
from collections.abc import AsyncIterator, Coroutine, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.types import Command

from conversations import checkpoints
from conversations.models import AgentRun
from memory_app.authorization import MemoryRunRefused, grant_memory_run
from memory_app.runtime.approval import approval_middleware, decision_command, proposed_write
from memory_app.runtime.closing import aopen, close_agent_run
from memory_app.runtime.concurrency.loop import on_database, on_process_loop, run_sync
from memory_app.runtime.concurrency.settling import settled
from memory_app.runtime.opening import open_agent_run, open_resume_turn
from memory_app.runtime.turns import CANCELLED_BY_CALLER, Turn, TurnOutcome


@dataclass
class TeamRun:
    """What `agent_run` yields: the run (`ctx`, `run_id`, `lease_lost`) and what a team's own
    graph needs when the user approves each memory write — `approval_middleware` (empty when
    approval does not apply), the `checkpointer` and `config` to compile and run with, the
    `command` to run a resume with (None: not a resume) — and `record(result)`."""

    turn: Turn
    approval_middleware: list[AgentMiddleware]
    checkpointer: BaseCheckpointSaver | None
    config: dict[str, Any]
    command: Command | None
    _recorded: list[BaseMessage] = field(default_factory=list)
    _approval: dict[str, Any] | None = None

    @property
    def ctx(self) -> Any:
        return self.turn.handle.ctx

    @property
    def run_id(self) -> str:
        return self.turn.handle.run_id

    @property
    def lease_lost(self) -> Any:
        return self.turn.handle.lease_lost

    def record(self, result: dict[str, Any]) -> dict[str, Any] | None:
        """Hand the graph's `result` to the run. If the graph stopped before a memory write,
        the run finishes `interrupted` on exit, its proposed call stored as the pending call,
        and the approval is returned (`{"tool_call_id", "content", "replaces"}`: show it to
        the user); else None. In a resume run, the decided call gets its outcome from it."""
        messages = list(result.get("messages", ()))
        self._recorded = messages
        self._approval = proposed_write(messages) if "__interrupt__" in result else None
        return self._approval

    def outcome(self) -> TurnOutcome:
        """What the team's graph produced, as the close settles it: the reply that asked for
        the write (and the refusals of its other calls) when it stopped."""
        key = self.config.get("configurable", {}).get("thread_id")
        produced: list[BaseMessage] = []
        if self._approval is not None:
            last = max(i for i, m in enumerate(self._recorded) if isinstance(m, AIMessage))
            produced = self._recorded[last:]
        return TurnOutcome(produced=produced, approval=self._approval, checkpoint_key=key)

    def results(self) -> list[ToolMessage]:
        """The tool results the team's graph gave back (a decided call's among them)."""
        return [m for m in self._recorded if isinstance(m, ToolMessage)]


def _approval_applies(turn: Turn) -> bool:
    """A resume always continues a graph with approval; a chat run has it when the user's
    memory is on and each write needs the user's approval."""
    if turn.decision is not None:
        return True
    try:
        return grant_memory_run(turn.handle.ctx, lock=False).state.write_approval
    except MemoryRunRefused:
        return False


def _team_run(turn: Turn, checkpointer: BaseCheckpointSaver | None) -> TeamRun:
    approval = checkpointer is not None
    config: dict[str, Any] = {"max_concurrency": 1}  # one tool at a time, in order
    if approval:
        config["configurable"] = {"thread_id": turn.checkpoint_key}
    return TeamRun(
        turn=turn,
        approval_middleware=approval_middleware() if approval else [],
        checkpointer=checkpointer,
        config=config,
        command=decision_command(turn.decision) if turn.decision is not None else None,
    )


async def _aopen_agent_run(
    *,
    user_id: int,
    thread_id: str | None,
    request_id: str | None,
    run_type: str,
    resume: dict[str, Any] | None,
) -> tuple[Turn, bool]:
    if resume is not None:
        opening = on_database(open_resume_turn)(user_id=user_id, thread_id=thread_id, resume=resume)
    else:
        opening = on_database(open_agent_run)(
            user_id=user_id, thread_id=thread_id, request_id=request_id, run_type=run_type
        )
    turn = await aopen(opening)
    try:
        return turn, await on_database(_approval_applies)(turn)
    except BaseException as exc:
        await _closing(turn, None, exc)
        raise


def _closing(
    turn: Turn, run: TeamRun | None, exc: BaseException | None
) -> Coroutine[Any, Any, None]:
    """The run's finish (`close_agent_run`, on a worker thread), run to its end even if the
    caller is interrupted or cancelled while it waits (then passed on), the run cancelled
    instead if the finish's own step was interrupted. `run` is None when the run failed
    before it was handed to the team (nothing produced, nothing to settle)."""
    outcome, results = (run.outcome(), run.results()) if run is not None else (TurnOutcome(), [])
    return settled(
        lambda: on_database(close_agent_run)(turn, exc, outcome, results),
        instead=lambda: on_database(close_agent_run)(
            turn, asyncio.CancelledError(), outcome, results
        ),
    )


def _close_untaken(opened: tuple[Turn, bool], stopped: BaseException) -> Coroutine[Any, Any, None]:
    """The close of a run opened just as its caller was cancelled or interrupted, so that it
    never reached the caller: cancelled, as if it had."""
    return _closing(opened[0], None, stopped)


@contextmanager
def agent_run(
    *,
    user_id: int,
    thread_id: str | None,
    request_id: str | None = None,
    run_type: str = AgentRun.RunType.CHAT,
    resume: dict[str, Any] | None = None,
) -> Iterator[TeamRun]:
    """A run for a backend team's own agent loop in `user_id`'s thread (a new one if None).

    Creates and claims the run — with `resume` a user's decision (`{"decision": "approve" |
    "edit" | "reject", ...}`), the `resume` run of the thread's pending approval, refused as
    `chat` refuses one — keeps its lease alive from the process's lease keeper and yields a
    `TeamRun` (`ctx`, `run_id`, `lease_lost`, and what approval needs). A normal exit
    finishes the run as `succeeded` (`interrupted` after `record` of a graph that stopped
    before a write); an exception is re-raised after finishing the run as the cancellation
    policy says (`KeyboardInterrupt`/`SystemExit`: `cancelled`; any other: `failed` with
    `error` set). (`aagent_run` on the process's loop, its database work on this thread.)

    Raises `ChatError` inside a transaction or for an inactive user, `ChatThreadNotFound`,
    `ChatInputError`/`ChatNothingToResume` for a decision `chat` would refuse, `ValueError`
    for a run type other than chat/resume, `ChatRunLost` when the lease was lost by the time
    of a normal exit, `django.db.DatabaseError` when the database fails.
    """
    turn, approval = run_sync(
        _aopen_agent_run(
            user_id=user_id,
            thread_id=thread_id,
            request_id=request_id,
            run_type=run_type,
            resume=resume,
        ),
        undo=_close_untaken,
    )
    run = None
    try:
        run = _team_run(turn, checkpoints.checkpointer() if approval else None)
        yield run
    except BaseException as exc:
        run_sync(_closing(turn, run, exc))
        raise
    run_sync(_closing(turn, run, None))


@asynccontextmanager
async def aagent_run(
    *,
    user_id: int,
    thread_id: str | None,
    request_id: str | None = None,
    run_type: str = AgentRun.RunType.CHAT,
    resume: dict[str, Any] | None = None,
) -> AsyncIterator[TeamRun]:
    """`agent_run` for async code (`async with aagent_run(...) as run:`): the same run, opened
    and finished on the process's loop, its database work on worker threads (never on an
    event loop). Its `checkpointer` is the `AsyncPostgresSaver` of the caller's own loop. A
    cancellation of the caller cancels the run (`cancelled`) and propagates.

    Raises what `agent_run` raises.
    """
    turn, approval = await on_process_loop(
        _aopen_agent_run(
            user_id=user_id,
            thread_id=thread_id,
            request_id=request_id,
            run_type=run_type,
            resume=resume,
        ),
        reason=CANCELLED_BY_CALLER,
        undo=_close_untaken,
    )
    run = None
    try:
        run = _team_run(turn, await checkpoints.async_checkpointer() if approval else None)
        yield run
    except BaseException as exc:
        await on_process_loop(_closing(turn, run, exc))
        raise
    await on_process_loop(_closing(turn, run, None))
