"""Reads of memory settings, of MEMORY.md as the agent sees it, and as its user sees it."""

from dataclasses import dataclass
from typing import Literal

from conversations.models import AgentRun
from memory_app.access import memory_run_refusal, read_memory_state
from memory_app.models import UserConfig
from memory_app.workspace import MEMORY_RELPATH, DigestedRead, Workspace
from yuxi_site.utils.ids import parse_uid

__all__ = [
    "MEMORY_FILE_MAX_BYTES",
    "MEMORY_PROMPT_MAX_BYTES",
    "MemoryFile",
    "MemorySnapshot",
    "memory_enabled",
    "memory_etag",
    "memory_file_from",
    "memory_write_refusal",
    "read_memory_file",
    "read_memory_for_prompt",
]

# How much of MEMORY.md reaches the prompt (and the admin preview that shows the same view).
MEMORY_PROMPT_MAX_BYTES = 24576
# Largest MEMORY.md accepted as a source and produced as a result, in UTF-8 bytes.
MEMORY_FILE_MAX_BYTES = 131072


@dataclass(frozen=True)
class MemorySnapshot:
    """MEMORY.md as the agent sees it: text kept, its UTF-8 size, and whether more was there."""

    text: str
    size_bytes: int
    truncated: bool

    @property
    def is_empty(self) -> bool:
        """Nothing but whitespace: the agent gets no memory block (and the preview says so)."""
        return not self.text.strip()


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

    Reads at most `MEMORY_PROMPT_MAX_BYTES + 1` bytes whatever the file's size, drops a code
    point split by the cut, and replaces invalid bytes. Renders no marker: callers do.
    """
    text, truncated = Workspace.for_user(uid).read_text_bounded(
        MEMORY_RELPATH, MEMORY_PROMPT_MAX_BYTES
    )
    return MemorySnapshot(text=text, size_bytes=len(text.encode("utf-8")), truncated=truncated)


@dataclass(frozen=True)
class MemoryFile:
    """MEMORY.md as its user sees it: the whole text, or None with the `problem` that hides it.

    `etag` is `sha256:` + the hex digest of the file's bytes (a missing file is empty), so an
    edit can be made conditional on the version the user saw.
    """

    text: str | None
    etag: str
    size_bytes: int
    problem: Literal["too_large", "invalid_encoding"] | None


def memory_etag(sha256_hex: str) -> str:
    """The etag of a MEMORY.md whose bytes hash to `sha256_hex`."""
    return f"sha256:{sha256_hex}"


def memory_file_from(read: DigestedRead) -> MemoryFile:
    """The user's view of a digested read of MEMORY.md (bounded to `MEMORY_FILE_MAX_BYTES`).

    An oversize or non-UTF-8 file is reported, not raised, so the user can still replace or
    clear it.
    """
    etag = memory_etag(read.sha256)
    if read.truncated:
        return MemoryFile(text=None, etag=etag, size_bytes=read.size_bytes, problem="too_large")
    try:
        text = read.data.decode("utf-8")
    except UnicodeDecodeError:
        return MemoryFile(
            text=None, etag=etag, size_bytes=read.size_bytes, problem="invalid_encoding"
        )
    return MemoryFile(text=text, etag=etag, size_bytes=read.size_bytes, problem=None)


def read_memory_file(*, user) -> MemoryFile:
    """The whole of `user`'s MEMORY.md, read no-follow, keeping at most 128 KiB + 1 in memory."""
    read = Workspace.for_user(user.pk).read_digested(MEMORY_RELPATH, MEMORY_FILE_MAX_BYTES)
    return memory_file_from(read)
