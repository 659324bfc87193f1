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

A leaf: it reads the workspace, the models and the kept versions.
"""

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from itertools import chain
from typing import Literal, NotRequired, TypedDict

from memory_app.errors import MemoryVersionNotFound
from memory_app.memory_file import (
    MEMORY_FILE_MAX_BYTES,
    MemoryFile,
    memory_file_from,
    split_lines,
    unbulleted,
)
from memory_app.models import MemoryEvent, MemoryEventKind
from memory_app.versions import EMPTY_SHA256, FILE_CHANGING_KINDS, read_memory_version
from memory_app.workspace import MEMORY_RELPATH, Workspace

__all__ = [
    "EARLIER",
    "LineOrigin",
    "MemoryLines",
    "Origin",
    "memory_line_origins",
    "memory_lines",
]

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


@dataclass(frozen=True)
class LineOrigin:
    """One line of the current MEMORY.md: its 1-based number, its text and where it came from."""

    number: int
    text: str
    origin: Origin


@dataclass(frozen=True)
class MemoryLines:
    """One read of MEMORY.md (`memory`, with the etag a line's removal must name) and the
    origin of each of its lines; no lines when the file is not text (`memory.problem`)."""

    memory: MemoryFile
    lines: list[LineOrigin]


def _fact(line: str) -> str:
    """What a line says, for telling whether two files hold the same line."""
    return unbulleted(line.rstrip())


def _event_pages(user_id: int) -> Iterator[list[tuple[int, str, str, str]]]:
    """The user's file-changing and forgetting events, newest first, a page per query."""
    events = MemoryEvent.objects.filter(user_id=user_id, kind__in=_WALKED_KINDS).order_by("-id")
    older_than = None
    while True:
        page_query = events if older_than is None else events.filter(id__lt=older_than)
        page = list(
            page_query.values_list("id", "kind", "before_sha256", "after_sha256")[
                :ORIGIN_EVENTS_PAGE
            ]
        )
        yield page
        if len(page) < ORIGIN_EVENTS_PAGE:
            return
        older_than = page[-1][0]


class _Walk:
    """The walk from the current file back through the recorded changes.

    `unresolved` maps a line's index to its fact and which copy of it the line is; every
    unresolved line is held by the file the walk stands at (`state`). A file visited before
    resolves nothing (every line still unresolved was held by it then), so each known file is
    compared once, however often the ledger returns to it.
    """

    def __init__(self, user, current_sha: str, facts: list[str]) -> None:
        self.user = user
        copies: Counter[str] = Counter()
        self.unresolved: dict[int, tuple[str, int]] = {}
        for index, fact in enumerate(facts):
            copies[fact] += 1
            self.unresolved[index] = (fact, copies[fact])
        self.found: dict[int, int] = {}
        self.counts: dict[str, Counter[str] | None] = {
            EMPTY_SHA256: Counter(),
            current_sha: copies,
        }
        self.visited = {current_sha}
        self.state = current_sha

    def _counts(self, sha256: str) -> Counter[str] | None:
        """How many copies of each fact the file `sha256` holds; None if it is not kept."""
        if sha256 not in self.counts:
            try:
                data = read_memory_version(user=self.user, sha256=sha256)
            except MemoryVersionNotFound:
                self.counts[sha256] = None
            else:
                lines = split_lines(data.decode("utf-8"))
                self.counts[sha256] = Counter(_fact(line) for line in lines)
        return self.counts[sha256]

    def step_to(self, sha256: str, event_id: int | None) -> bool:
        """Move to the file `sha256`: the lines it lacks come from `event_id` (None: from a
        change nobody recorded). False when that file is not known: the walk ends there."""
        if sha256 == self.state:
            return True
        if sha256 not in self.visited:
            counts = self._counts(sha256)
            if counts is None:
                return False
            for index, (fact, copy) in list(self.unresolved.items()):
                if counts[fact] < copy:
                    del self.unresolved[index]
                    if event_id is not None:
                        self.found[index] = event_id
            self.visited.add(sha256)
        self.state = sha256
        return True

    def run(self, pages: Iterator[list[tuple[int, str, str, str]]]) -> dict[int, int]:
        """The event that brought each line (by index); lines missing from it are `earlier`."""
        for page in pages:
            for event_id, kind, before, after in page:
                if not self.unresolved or kind == MemoryEventKind.VERSIONS_FORGOTTEN:
                    return self.found
                if not self.step_to(after, None) or not self.step_to(before, event_id):
                    return self.found
        return self.found


def _origins(user_id: int, event_ids: set[int]) -> dict[int, Origin]:
    """The origin each of these events gives its lines, in one query."""
    events = (
        MemoryEvent.objects.filter(id__in=event_ids)
        .select_related("run__conversation")
        .only("id", "kind", "created_at", "actor_id", "run__run_id", "run__conversation__thread_id")
    )
    found: dict[int, Origin] = {}
    for event in events:
        run = event.run
        if event.kind in AGENT_KINDS:
            by = "agent"
        else:
            by = "you" if event.actor_id == user_id else "staff"
        found[event.pk] = Origin(
            kind=event.kind,
            at=event.created_at,
            by=by,
            run_id=None if run is None else str(run.run_id),
            thread_id=None if run is None else run.conversation.thread_id,
        )
    return found


def memory_lines(*, user) -> MemoryLines:
    """`user`'s MEMORY.md, read once, and where each of its lines came from.

    The ledger's newest events are read before the file, so a change landing in between is
    only a change not yet recorded: the lines it brought are `earlier` until it is. Costs two
    queries (one more per `ORIGIN_EVENTS_PAGE` events walked) and one read of each kept
    version the walk reaches.
    """
    pages = _event_pages(user.pk)
    first = next(pages)
    workspace = Workspace.for_user(user.pk)
    read = workspace.read_digested(MEMORY_RELPATH, MEMORY_FILE_MAX_BYTES)
    memory = memory_file_from(read)
    if memory.text is None:
        return MemoryLines(memory=memory, lines=[])
    lines = split_lines(memory.text)
    walk = _Walk(user, read.sha256, [_fact(line) for line in lines])
    found = walk.run(chain([first], pages))
    origins = _origins(user.pk, set(found.values())) if found else {}
    earlier = Origin(kind=EARLIER)
    return MemoryLines(
        memory=memory,
        lines=[
            LineOrigin(
                number=index + 1,
                text=line.removesuffix("\n").removesuffix("\r"),
                origin=origins[found[index]] if index in found else earlier,
            )
            for index, line in enumerate(lines)
        ],
    )


def memory_line_origins(*, user) -> list[LineOrigin]:
    """For each line of `user`'s current MEMORY.md, the recorded change that brought it (see
    the module's docstring); none when the file is not text (too large, not UTF-8)."""
    return memory_lines(user=user).lines
