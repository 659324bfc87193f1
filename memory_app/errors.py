"""The typed errors of a memory write (`MemoryWriteError` and its children), and the one
translation of workspace and database failures into them.

A leaf: raised by the write path, the lock helpers and erasure, turned into a tool result or
an HTTP error only at the edge.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from enum import StrEnum

from django.db import Error as DatabaseError

from memory_app.credentials import CredentialKind
from memory_app.workspace import WorkspaceError, WorkspacePathRefused


class MemoryWriteError(Exception):
    """Base of every refusal or failure of a memory write."""


class MemoryInputError(MemoryWriteError):
    """`content`, `replaces` or a user's text is not acceptable (type, size, NUL, empty)."""


class MemorySensitiveContent(MemoryInputError):
    """The content holds a credential, which memory never stores. `kind` says what it looks
    like; neither it nor the message holds the matched text."""

    def __init__(self, kind: CredentialKind) -> None:
        super().__init__(f"memory never stores credentials: this looks like {kind.label}")
        self.kind = kind


class MemoryInvisibleText(MemoryInputError):
    """The content holds characters a person cannot see but a model reads (tag characters,
    bidi controls, zero-width space, ...), which memory never takes from an agent. `characters`
    names them (`U+XXXX`), as the message does: naming them repeats nothing hidden."""

    # How many of the characters the message names.
    NAMED = 5

    def __init__(self, characters: list[str]) -> None:
        named = ", ".join(characters[: self.NAMED]) + (
            ", ..." if len(characters) > self.NAMED else ""
        )
        super().__init__(
            f"memory never keeps invisible characters: the content holds {named}; "
            "write it again without them"
        )
        self.characters = characters


class ConflictReason(StrEnum):
    """Why the file does not allow a write (`MemoryConflict.reason`)."""

    NOT_FOUND = "not_found"
    AMBIGUOUS = "ambiguous"
    INVALID_ENCODING = "invalid_encoding"
    STALE = "stale"


class MemoryConflict(MemoryWriteError):
    """The file does not allow the write: `replaces` not found or ambiguous, bad encoding, or
    the user's edit was made against a version that is no longer current."""

    NOT_FOUND = ConflictReason.NOT_FOUND
    AMBIGUOUS = ConflictReason.AMBIGUOUS
    INVALID_ENCODING = ConflictReason.INVALID_ENCODING
    STALE = ConflictReason.STALE

    def __init__(self, reason: ConflictReason) -> None:
        self.reason = ConflictReason(reason)
        super().__init__(f"memory conflict: {self.reason}")


class MemoryFileTooLarge(MemoryWriteError):
    """The current file or the result would exceed `MEMORY_FILE_MAX_BYTES`."""


class MemoryAccessDenied(MemoryWriteError):
    """Identity, run, lease, switch or user state refuses the write, or the path is unsafe."""


class MemoryApprovalRequired(MemoryAccessDenied):
    """The user approves each memory write, and no decision of theirs released this call."""


class MemoryUnavailable(MemoryWriteError):
    """The database, a lock wait or the file system failed; nothing was written."""


class MemoryVersionNotFound(LookupError):
    """No kept version of MEMORY.md has that hash: never kept, removed (pruned or forgotten),
    not the user's, or its bytes no longer match it. A lookup that failed, not a write error."""


class MemoryLineNotFound(LookupError):
    """MEMORY.md has no line of that number (or is not text, so it has no lines at all)."""


@contextmanager
def memory_errors() -> Iterator[None]:
    """Workspace and database failures as the typed memory errors."""
    try:
        yield
    except WorkspacePathRefused as exc:
        raise MemoryAccessDenied("the memory file path is not a safe regular file") from exc
    except WorkspaceError as exc:
        raise MemoryUnavailable("the memory file could not be written or locked") from exc
    except DatabaseError as exc:
        raise MemoryUnavailable("the database or the memory lock is unavailable") from exc
