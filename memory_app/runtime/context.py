"""What one run of a shared agent graph brings at invocation (`context=`): `RunContext`.

The Chat service compiles its agent graphs once per shape and runs every turn of that shape on
the same compiled graph, so nothing of one run may live in the graph: the run's identity, its
system message (its shared context and memory section, read for this run) and its tool calls
come in with the run, as its context, and the middleware and tools read them from
`runtime.context`. A leaf of the runtime: it imports nothing of it.
"""

import asyncio
import concurrent.futures
from dataclasses import dataclass, field

from langchain_core.messages import SystemMessage, ToolMessage

from conversations.runs import ToolRuntimeContext
from memory_app.middleware import MemoryPrompt


class RunCalls:
    """One run's tool calls as its guard sees them: the ids refused for unusable arguments,
    and every call started, by id (a future of its result) — under `ainvoke`/`astream` each
    runs to its end even when the turn is cancelled (its effect is committed or not; the
    turn's close says which)."""

    def __init__(self) -> None:
        self.refused: set[str] = set()
        self.started: dict[str, asyncio.Future | concurrent.futures.Future] = {}

    def tool_calls(self) -> tuple[dict[str, ToolMessage], dict[str, asyncio.Future]]:
        """The run's tool calls so far: the results of those that ended, by id, and those
        still running (a cancelled turn waits for them)."""
        ended, running = {}, {}
        for call_id, call in self.started.items():
            if not call.done():
                running[call_id] = call
            elif not call.cancelled() and isinstance(
                call.exception() or call.result(), ToolMessage
            ):
                ended[call_id] = call.result()
        return ended, running


@dataclass(frozen=True)
class RunContext(ToolRuntimeContext):
    """A run's trusted identity as a shared graph receives it at invocation, with what its
    middleware keeps for this run only: `system_message`, the run's own system message (its
    role prompt and shared context, read for this run; None keeps the graph's own), `memory`,
    the run's memory section (`MemoryPrompt.for_run`; None: memory off), and `calls`, the
    run's `RunCalls`. The memory middleware and tools read the run from it."""

    system_message: SystemMessage | None = None
    memory: MemoryPrompt | None = field(default=None, compare=False, repr=False)
    calls: RunCalls = field(default_factory=RunCalls, compare=False, repr=False)
