"""Reads of memory settings, of MEMORY.md as the agent sees it, and of the memory ledger
(`MemoryEvent`) as staff see it: where the chain of file hashes breaks.

MEMORY.md as its user sees it (`MemoryFile`, `read_memory_file`) lives in `memory_file`, its
kept versions (`list_memory_versions`, `read_memory_version`) in `versions`, where each of its
lines came from (`memory_line_origins`) in `line_origins` and the export in `user_data`; they
are re-exported here, where the public API names them.
"""

import codecs
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.db.models import CharField, QuerySet
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast

from conversations.models import AgentRun, Message, ToolCall
from conversations.selectors.staff import tool_calls_during_runs
from conversations.utils.ids import parse_uid
from conversations.utils.invisible_text import escape_invisible_within
from memory_app.authorization import memory_run_refusal, read_memory_state
from memory_app.credentials import find_credentials
from memory_app.errors import MemoryVersionNotFound
from memory_app.line_origins import (
    AGENT_KINDS,
    memory_line_origins,
    memory_lines,
)
from memory_app.memory_file import (
    MemoryFile,
    memory_etag,
    read_memory_file,
)
from memory_app.models import MemoryEvent, UserConfig
from memory_app.tool_names import REMEMBER_MEMORY_TOOL
from memory_app.user_data import export_user_data
from memory_app.versions import list_memory_versions, read_memory_version
from memory_app.workspace import Workspace
from memory_app.workspace.paths import MEMORY_RELPATH

# The module's public list (the memory app's `PUBLIC_API` entry).
__all__ = [
    "memory_enabled",
    "read_memory_file",
    "read_memory_for_prompt",
    "memory_write_refusal",
    "user_ledger",
    "export_user_data",
    "list_memory_versions",
    "read_memory_version",
    "memory_line_origins",
    "memory_lines",
    "MemoryFile",
    "memory_etag",
]

# How much of MEMORY.md reaches the prompt (and the admin preview that shows the same view).
MEMORY_PROMPT_MAX_BYTES = 24576


@dataclass(frozen=True)
class MemorySnapshot:
    """MEMORY.md as the agent sees it: text kept, its UTF-8 size, and whether more was there.

    `invalid_encoding`: the bytes read are not UTF-8, so no text is kept (`text` is "").
    """

    text: str
    size_bytes: int
    truncated: bool
    invalid_encoding: bool = False

    @property
    def is_empty(self) -> bool:
        """Nothing but whitespace: the agent gets no memory block (and the preview says so)."""
        return not self.text.strip()


@dataclass(frozen=True)
class MemorySettings:
    """A user's memory switch and whether each memory write waits for their approval."""

    enable_memory: bool
    memory_write_approval: bool


def memory_settings(*, user_id: int) -> MemorySettings:
    """The user's memory settings, read fresh (no row: both off)."""
    row = (
        UserConfig.objects.filter(user_id=user_id)
        .values_list("enable_memory", "memory_write_approval")
        .first()
    )
    return MemorySettings(*row) if row else MemorySettings(False, False)


def memory_enabled(uid: int | str) -> bool:
    """Current value of the switch, read fresh from the database (no row means off).

    A uid that is no user's key reads as off, so a malformed run context fails closed.
    """
    user_id = parse_uid(uid)
    return user_id is not None and (
        UserConfig.objects.filter(user_id=user_id, enable_memory=True).exists()
    )


def memory_write_refusal(run: AgentRun) -> str | None:
    """Why a memory write by `run`'s own worker would be refused right now; None if allowed.

    For previews: the same rule as `authorize_memory_run`, read without locking, so the
    answer can change the moment after it is given.
    """
    return memory_run_refusal(run, run.worker_id, read_memory_state(run.user_id))


def read_memory_for_prompt(uid: int | str) -> MemorySnapshot:
    """The one bounded, no-follow read of `uid`'s MEMORY.md for the prompt and its previews.

    Reads at most `MEMORY_PROMPT_MAX_BYTES + 1` bytes whatever the file's size and drops a
    code point split by the cut. Bytes that are not UTF-8 give no text at all
    (`invalid_encoding`), never replacement characters: the same rule as the user's read
    (`problem="invalid_encoding"`) and the write path (`MemoryConflict`), so the agent never
    works from a text the user cannot see or edit. Characters a person cannot see
    (`INVISIBLE_CHARACTERS`: tag characters, bidi controls, zero-width space, ...) are shown
    escaped (`\\u{E0041}`), within the same budget. Renders no marker: callers do.
    """
    data, truncated = Workspace.for_user(uid).read_bounded(MEMORY_RELPATH, MEMORY_PROMPT_MAX_BYTES)
    # Not final when cut: an incomplete sequence at the cut is the cut's, not the file's.
    decoder = codecs.getincrementaldecoder("utf-8")(errors="strict")
    try:
        text = decoder.decode(data, final=not truncated)
    except UnicodeDecodeError:
        return MemorySnapshot(text="", size_bytes=0, truncated=truncated, invalid_encoding=True)
    # Invisible characters (a user's own write may keep them) reach the model escaped, and the
    # escapes count against the budget.
    text, escaped_cut = escape_invisible_within(text, MEMORY_PROMPT_MAX_BYTES)
    return MemorySnapshot(
        text=text, size_bytes=len(text.encode("utf-8")), truncated=truncated or escaped_cut
    )


# How many of a user's latest memory events the config page lists.
LEDGER_EVENTS_SHOWN = 50


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
    name = get_user_model().USERNAME_FIELD
    return MemoryEvent.objects.select_related("user", "actor", "run__conversation").only(
        "id",
        "kind",
        "before_sha256",
        "after_sha256",
        "size_bytes",
        "created_at",
        f"user__{name}",
        f"actor__{name}",
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


def memory_writing_replies(
    *, user_id: int, conversation_id: int, message_ids: list[int]
) -> dict[int, str]:
    """Of the messages `message_ids` of a thread, the assistant replies of a run that wrote to
    the user's memory, each with that run's id: the ledger holds an agent change by the run (a
    `remember_memory` call that changed the file, an approved write included), so a turn whose
    call changed nothing is not one. The Chat service marks every message it stores with its
    run (`metadata.run_id`). One query."""
    writing = (
        MemoryEvent.objects.filter(
            user_id=user_id, kind__in=AGENT_KINDS, run__conversation_id=conversation_id
        )
        .annotate(key=Cast("run__run_id", CharField()))
        .values("key")
    )
    replies = (
        Message.objects.filter(
            pk__in=message_ids, conversation_id=conversation_id, role=Message.Role.ASSISTANT
        )
        .annotate(run_key=KeyTextTransform("run_id", "metadata"))
        .filter(run_key__in=writing)
        .values_list("id", "run_key")
    )
    return dict(replies)


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


@dataclass(frozen=True)
class CredentialLine:
    """A line of a user's MEMORY.md (`version` None) or of one of its kept versions (`version`:
    its SHA-256) that holds a credential of `kind`; never the line's text."""

    version: str | None
    line: int
    kind: str


def credential_lines(*, user) -> list[CredentialLine]:
    """Every line of `user`'s MEMORY.md and of its kept versions that holds a credential, as
    the detector `remember_memory` refuses with finds it: for staff to act on files written
    before the detector (or by the user, who is only warned). The current file first, then
    the versions newest first. A file that is too large or not UTF-8 is not read."""
    found = []
    current = read_memory_file(user=user)
    if current.text is not None:
        found += [CredentialLine(None, f.line, str(f.kind)) for f in find_credentials(current.text)]
    for version in list_memory_versions(user=user):
        if not version.available:
            continue
        try:
            text = read_memory_version(user=user, sha256=version.sha256).decode("utf-8")
        except (MemoryVersionNotFound, UnicodeDecodeError):
            continue
        found += [
            CredentialLine(version.sha256, f.line, str(f.kind)) for f in find_credentials(text)
        ]
    return found
