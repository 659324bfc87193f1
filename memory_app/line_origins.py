"""Where each line of MEMORY.md came from, derived from the ledger and the kept versions.

Nothing is stored for it: the ledger names every change by the hashes of the file before and
after it, and the kept versions hold those files' bytes. Walking the changes from the newest
to the oldest, a line comes from the newest change whose file before did not hold it and
whose file after did. The walk ends where a file is not known (not kept: pruned, forgotten,
too large or not UTF-8); the empty file is always known by its hash.

What a line is, and when two are the same:
- lines end at "\\n" (a "\\r" before it belongs to the ending, so CRLF and LF files have the
  same lines); `number` is 1-based, `text` has no ending;
- two lines are the same fact when they differ only in trailing whitespace or in a leading
  `- `, `* ` or `+ ` marker (the rule `remember_memory` dedupes by), so re-typing a line as a
  bullet, or converting the file to CRLF, keeps the line's origin;
- lines are compared by content, not position: a line that an edit or a replace only moved
  keeps its origin;
- copies are counted: the k-th copy of a line (top to bottom) comes from the newest change
  whose file before held fewer than k copies and whose file after at least k;
- a line whose walk reaches a file that is not known, a change nobody recorded (the ledger's
  chain breaks: a change's file after is not the next newer change's file before) or the
  user's forgetting of the versions (`versions_forgotten`) is `earlier`, as is a line already
  in the oldest known file. A change nobody recorded is crossed when both its files are
  known: only the lines it brought are `earlier`.

Below the services and the selectors (which re-export it): it imports the workspace, the
models, the memory file and the kept versions.
"""

import uuid
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from itertools import chain
from typing import Literal, NamedTuple, NotRequired, TypedDict

from memory_app.errors import MemoryVersionNotFound
from memory_app.memory_file import (
    LINE_ENDING,
    MEMORY_FILE_MAX_BYTES,
    MemoryFile,
    memory_file_from,
    unbulleted,
)
from memory_app.models import MemoryEvent, MemoryEventKind
from memory_app.versions import EMPTY_SHA256, FILE_CHANGING_KINDS, read_memory_version
from memory_app.workspace import Workspace
from memory_app.workspace.paths import MEMORY_RELPATH

# The origin of a line no recorded change can be shown to have brought.
EARLIER = "earlier"
# The changes the agent makes: by "agent", whoever decided them.
AGENT_KINDS = (MemoryEventKind.AGENT_ADDED, MemoryEventKind.AGENT_REPLACED)
# How many ledger events one query of the walk reads (most walks end within the first).
ORIGIN_EVENTS_PAGE = 200
_WALKED_KINDS = (*FILE_CHANGING_KINDS, MemoryEventKind.VERSIONS_FORGOTTEN)


class Origin(TypedDict):
    """The change that brought a line: its ledger kind, when, who, and the agent's run and
    thread. Only `kind` when the line is `earlier`."""

    kind: str
    at: NotRequired[datetime]
    by: NotRequired[Literal["agent", "you", "staff"]]
    run_id: NotRequired[str | None]
    thread_id: NotRequired[str | None]


class LineOrigin(NamedTuple):
    """One line of the current MEMORY.md: its 1-based number, its text and where it came from.

    A named tuple, not a dataclass: a 128 KiB file has thousands of lines, and a frozen
    dataclass costs several times as much to build."""

    number: int
    text: str
    origin: Origin


@dataclass(frozen=True)
class MemoryLines:
    """One read of MEMORY.md (`memory`, with the etag a line's removal must name) and the
    origin of each of its lines; no lines when the file is not text (`memory.problem`)."""

    memory: MemoryFile
    lines: list[LineOrigin]


def _pieces(text: str) -> list[str]:
    """The lines of a text without their endings, numbered as `split_lines` numbers them."""
    pieces = LINE_ENDING.split(text)
    if not pieces[-1]:
        pieces.pop()
    return pieces


class _Event(NamedTuple):
    """A ledger event as the walk reads it: its files, and what its origin says."""

    id: int
    kind: str
    before: str
    after: str
    at: datetime
    actor_id: int | None
    run_id: uuid.UUID | None
    thread_id: str | None


def _event_pages(user_id: int) -> Iterator[list[_Event]]:
    """The user's file-changing and forgetting events, newest first, with their run's id and
    thread, a page per query."""
    events = MemoryEvent.objects.filter(user_id=user_id, kind__in=_WALKED_KINDS).order_by("-id")
    fields = (
        "id",
        "kind",
        "before_sha256",
        "after_sha256",
        "created_at",
        "actor_id",
        "run__run_id",
        "run__conversation__thread_id",
    )
    older_than = None
    while True:
        page_query = events if older_than is None else events.filter(id__lt=older_than)
        page = [_Event(*row) for row in page_query.values_list(*fields)[:ORIGIN_EVENTS_PAGE]]
        yield page
        if len(page) < ORIGIN_EVENTS_PAGE:
            return
        older_than = page[-1].id


def _facts(raws: Iterable[str]) -> list[str]:
    """What each line says, for telling whether two files hold the same line."""
    return [unbulleted(line) for line in map(str.rstrip, raws)]


class _Walk:
    """The walk from the current file back through the recorded changes.

    Every line not yet resolved is held by the file the walk stands at (`state`), so a file
    visited before resolves nothing, and each known file is compared once however often the
    ledger returns to it. Files are compared by their raw lines (set operations, in C), and
    only lines that differ from the current file's are turned into facts, so a step costs
    about what reading the version costs.
    """

    def __init__(self, user, current_sha: str, raws: list[str]) -> None:
        self.user = user
        facts = _facts(raws)
        self.fact_of = dict(zip(raws, facts, strict=True))
        copies = Counter(facts)
        # A line whose fact the file holds once, by its raw text: it is gone from a file that
        # lacks its raw text and every other spelling of its fact.
        self.single: dict[str, int] = {}
        # A fact held more than once: each unresolved copy (line index, which copy) and the
        # raw spellings the current file has of it.
        self.duplicated: dict[str, list[tuple[int, int]]] = {}
        self.spellings: dict[str, set[str]] = {}
        seen: Counter[str] = Counter()
        for index, (raw, fact) in enumerate(zip(raws, facts, strict=True)):
            if copies[fact] == 1:
                self.single[raw] = index
            else:
                seen[fact] += 1
                self.duplicated.setdefault(fact, []).append((index, seen[fact]))
                self.spellings.setdefault(fact, set()).add(raw)
        self.current = set(raws)
        self.files: dict[str, list[str] | None] = {EMPTY_SHA256: []}
        self.found: dict[int, _Event] = {}
        self.visited = {current_sha}
        self.state = current_sha

    @property
    def done(self) -> bool:
        return not self.single and not self.duplicated

    def _lines(self, sha256: str) -> list[str] | None:
        """The raw lines of the file `sha256`; None if it is not kept."""
        if sha256 not in self.files:
            try:
                data = read_memory_version(user=self.user, sha256=sha256)
            except MemoryVersionNotFound:
                self.files[sha256] = None
            else:
                self.files[sha256] = _pieces(data.decode("utf-8"))
        return self.files[sha256]

    def _compare(self, lines: list[str], event: _Event | None) -> None:
        """Resolve every line the file of `lines` holds fewer copies of than the line needs."""
        held = set(lines)
        novel = list(held - self.current)
        self.fact_of.update(zip(novel, _facts(novel), strict=True))
        novel_facts = {self.fact_of[raw] for raw in novel}
        for raw in self.single.keys() - held:
            if self.fact_of[raw] not in novel_facts:
                self._resolve(self.single.pop(raw), event)
        for fact, unresolved in list(self.duplicated.items()):
            spellings = [raw for raw in novel if self.fact_of[raw] == fact]
            spellings.extend(self.spellings[fact] & held)
            held_copies = sum(lines.count(raw) for raw in spellings)
            for index, copy in unresolved:
                if copy > held_copies:
                    self._resolve(index, event)
            remaining = [(index, copy) for index, copy in unresolved if copy <= held_copies]
            if remaining:
                self.duplicated[fact] = remaining
            else:
                del self.duplicated[fact]

    def _resolve(self, index: int, event: _Event | None) -> None:
        if event is not None:
            self.found[index] = event

    def step_to(self, sha256: str, event: _Event | None) -> bool:
        """Move to the file `sha256`: the lines it lacks come from `event` (None: from a
        change nobody recorded). False when that file is not known: the walk ends there."""
        if sha256 == self.state:
            return True
        if sha256 not in self.visited:
            lines = self._lines(sha256)
            if lines is None:
                return False
            self._compare(lines, event)
            self.visited.add(sha256)
        self.state = sha256
        return True

    def run(self, pages: Iterator[list[_Event]]) -> dict[int, _Event]:
        """The event that brought each line (by index); lines missing from it are `earlier`."""
        for page in pages:
            for event in page:
                if self.done or event.kind == MemoryEventKind.VERSIONS_FORGOTTEN:
                    return self.found
                if not self.step_to(event.after, None) or not self.step_to(event.before, event):
                    return self.found
        return self.found


def _origin(event: _Event, user_id: int) -> Origin:
    """The origin `event` gives the lines it brought."""
    if event.kind in AGENT_KINDS:
        by = "agent"
    elif event.actor_id == user_id:
        by = "you"
    else:
        by = "staff"
    return Origin(
        kind=event.kind,
        at=event.at,
        by=by,
        run_id=None if event.run_id is None else str(event.run_id),
        thread_id=event.thread_id,
    )


def memory_lines(*, user) -> MemoryLines:
    """`user`'s MEMORY.md, read once, and where each of its lines came from.

    The ledger's newest events are read before the file, so a change landing in between is
    only a change not yet recorded: the lines it brought are `earlier` until it is. Costs one
    query (one more per `ORIGIN_EVENTS_PAGE` events walked) and one read of each kept version
    the walk reaches.
    """
    pages = _event_pages(user.pk)
    first = next(pages)
    workspace = Workspace.for_user(user.pk)
    read = workspace.read_digested(MEMORY_RELPATH, MEMORY_FILE_MAX_BYTES)
    memory = memory_file_from(read)
    if memory.text is None:
        return MemoryLines(memory=memory, lines=[])
    raws = _pieces(memory.text)
    walk = _Walk(user, read.sha256, raws)
    found = walk.run(chain([first], pages))
    origins = {event.id: _origin(event, user.pk) for event in found.values()}
    earlier = Origin(kind=EARLIER)
    return MemoryLines(
        memory=memory,
        lines=[
            LineOrigin(
                number=index + 1,
                text=raw.removesuffix("\r"),
                origin=origins[found[index].id] if index in found else earlier,
            )
            for index, raw in enumerate(raws)
        ],
    )


def memory_line_origins(*, user) -> list[LineOrigin]:
    """For each line of `user`'s current MEMORY.md, the recorded change that brought it (see
    the module's docstring); none when the file is not text (too large, not UTF-8)."""
    return memory_lines(user=user).lines
