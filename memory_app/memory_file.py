"""The memory file as its user sees it: its size limit, its etag and `MemoryFile`.

A leaf: it reads MEMORY.md through the workspace and imports nothing else of the app but the
credential detector (for a user write's warnings), so the
write path, the reads and export/erasure all build on it without importing each other.
"""

import re
from dataclasses import dataclass
from typing import Literal

from conversations.utils.invisible_text import INVISIBLE_CHARACTERS
from memory_app.credentials import CredentialFinding, find_credentials
from memory_app.workspace import Workspace
from memory_app.workspace.paths import MEMORY_RELPATH
from memory_app.workspace.reads import DigestedRead

# Largest MEMORY.md accepted as a source and produced as a result, in UTF-8 bytes.
MEMORY_FILE_MAX_BYTES = 131072

# The Markdown bullet markers a line of MEMORY.md may start with: `remember_memory` follows
# them (a one-line fact appended after a bullet becomes a bullet with the same marker), and a
# fact is the same line with or without one (for its dedupe and for where a line came from).
MEMORY_BULLET_MARKERS = ("- ", "* ", "+ ")


def unbulleted(line: str) -> str:
    """`line` without its leading list marker (and the spaces after it), if it has one."""
    return line[2:].lstrip(" ") if line.startswith(MEMORY_BULLET_MARKERS) else line


# One line of a text with its ending (see `split_lines`).
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")
# What ends a line, for splitting a text into lines without their endings.
LINE_ENDING = re.compile(r"\r\n|\r|\n")


def split_lines(text: str) -> list[str]:
    """The lines of a MEMORY.md text, line `n` at index `n - 1`, each with its own ending.

    "\n", "\r\n" and a lone "\r" (an old Mac editor's) each end a line, so a file saved with
    any of them shows the lines its user wrote; the last line has no ending when the text does
    not end with one, and a text ending with one has no empty line after it. Joined, they are
    the text again, so removing one line removes exactly that line and its ending.
    """
    return _LINE.findall(text)


@dataclass(frozen=True)
class MemoryFile:
    """MEMORY.md as its user sees it: the whole text, or None with the `problem` that hides it.

    `etag` is `sha256:` + the hex digest of the file's bytes (a missing file is empty), so an
    edit can be made conditional on the version the user saw. `warnings`: after a user's own
    write, the credentials the written text holds (kept as written, but the user is told).
    """

    text: str | None
    etag: str
    size_bytes: int
    problem: Literal["too_large", "invalid_encoding"] | None
    warnings: tuple[CredentialFinding, ...] = ()


# The kind of a user write's warning for a line holding invisible characters.
INVISIBLE_CHARACTERS_WARNING = "invisible characters"


def write_warnings(text: str) -> tuple[CredentialFinding, ...]:
    """What a user's own write of `text` is told about it, in line order: each line holding a
    credential (one warning per kind) or characters a person cannot see but the agent would
    read (`INVISIBLE_CHARACTERS_WARNING`). The text is kept as written either way."""
    invisible = (
        CredentialFinding(line=number, kind=INVISIBLE_CHARACTERS_WARNING)
        for number, line in enumerate(text.split("\n"), start=1)
        if INVISIBLE_CHARACTERS.search(line)
    )
    return tuple(sorted([*find_credentials(text), *invisible]))


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
