"""Reads of the memory ledger (`MemoryEvent`) for staff: a user's latest events, their runs
and remember_memory calls, and where the chain of file hashes breaks."""

from dataclasses import dataclass

from django.db.models import QuerySet

from conversations.models import AgentRun, ToolCall
from conversations.selectors import tool_calls_during_runs
from memory_app.models import MemoryEvent

__all__ = [
    "LEDGER_EVENTS_SHOWN",
    "REMEMBER_MEMORY_TOOL",
    "LedgerEntry",
    "LedgerPage",
    "ledger_events",
    "remember_calls_for",
    "user_ledger",
]

# How many of a user's latest memory events the config page lists.
LEDGER_EVENTS_SHOWN = 50
# The agent's one memory write tool, by the name its tool calls are stored under.
REMEMBER_MEMORY_TOOL = "remember_memory"


@dataclass(frozen=True)
class LedgerEntry:
    """One event, the remember_memory call(s) that may have made it, and whether the chain
    breaks before it (its `before_sha256` is not the previous event's `after_sha256`)."""

    event: MemoryEvent
    tool_calls: list[ToolCall]
    chain_break: bool


@dataclass(frozen=True)
class LedgerPage:
    """A user's latest events, newest first, and whether older ones exist."""

    entries: list[LedgerEntry]
    has_older: bool

    @property
    def breaks(self) -> int:
        return sum(entry.chain_break for entry in self.entries)


def ledger_events() -> QuerySet:
    """Events with their actor's name, run and thread id, and nothing heavy of either."""
    return MemoryEvent.objects.select_related("user", "actor", "run__conversation").only(
        "id",
        "kind",
        "before_sha256",
        "after_sha256",
        "size_bytes",
        "created_at",
        "user__username",
        "actor__username",
        "run__run_id",
        "run__status",
        "run__created_at",
        "run__finished_at",
        "run__conversation_id",
        "run__conversation__thread_id",
    )


def remember_calls_for(events: list[MemoryEvent]) -> dict[int, list[ToolCall]]:
    """Per event (by pk), the remember_memory call that made it, when it can be told.

    A tool call carries no run or event: a run's calls are those of its thread made while it
    ran. When a run made as many events as calls, they pair in order; when it made one call,
    that call; otherwise all of the run's calls are returned, for staff to tell apart. One
    query for every event given.
    """
    runs: dict[int, AgentRun] = {event.run.pk: event.run for event in events if event.run}
    calls = tool_calls_during_runs(runs=list(runs.values()), name=REMEMBER_MEMORY_TOOL)
    by_run: dict[int, list[MemoryEvent]] = {}
    for event in sorted(events, key=lambda event: event.pk):
        if event.run:
            by_run.setdefault(event.run.pk, []).append(event)
    found: dict[int, list[ToolCall]] = {}
    for run_pk, run_events in by_run.items():
        run_calls = calls[run_pk]
        for index, event in enumerate(run_events):
            if len(run_calls) == len(run_events):
                found[event.pk] = [run_calls[index]]
            else:
                found[event.pk] = run_calls
    return found


def user_ledger(*, user_id: int) -> LedgerPage:
    """The user's latest `LEDGER_EVENTS_SHOWN` events, newest first, with chain breaks marked.

    Two queries whatever the ledger's length (one row more than shown is read to judge the
    oldest shown event's link and to say that older ones exist).
    """
    rows = list(ledger_events().filter(user_id=user_id).order_by("-id")[: LEDGER_EVENTS_SHOWN + 1])
    shown = rows[:LEDGER_EVENTS_SHOWN]
    calls = remember_calls_for(shown)
    entries = []
    for index, event in enumerate(shown):
        previous = rows[index + 1] if index + 1 < len(rows) else None
        entries.append(
            LedgerEntry(
                event=event,
                tool_calls=calls.get(event.pk, []),
                chain_break=previous is not None and previous.after_sha256 != event.before_sha256,
            )
        )
    return LedgerPage(entries=entries, has_older=len(rows) > LEDGER_EVENTS_SHOWN)
