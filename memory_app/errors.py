"""The typed errors of a memory write (`MemoryWriteError` and its children), the one
translation of workspace and database failures into them, and `LocalizedError`, how an error
the Chat service or the memory raises is told to a person in their language.

A leaf: raised by the write path, the lock helpers and erasure, turned into a tool result or
an HTTP error only at the edge.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from enum import StrEnum

from django.db import Error as DatabaseError
from django.utils import translation
from django.utils.functional import Promise
from django.utils.translation import gettext, gettext_lazy, gettext_noop

from conversations.utils.string_utils import STORABLE_TEXT_REQUIREMENT
from memory_app.credentials import CredentialKind
from memory_app.workspace import WorkspaceError, WorkspacePathRefused


class LocalizedError(Exception):
    """An error whose message a person may read, in their language.

    Raised with a `gettext_noop` template and its named params (`"%(name)s is over %(limit)s
    bytes"`, `name="content"`, `limit=4096`): `str(exc)` is the English text, which the model
    reads in a tool result and the logs keep, and `localized()` the same message in the active
    language, which the HTTP edge answers with (`Accept-Language`). A param that is itself
    words for people is given lazily (`gettext_lazy`), so it follows the message's language;
    a field name (`content`, `text`) is a code word and stays as it is. Raised with a plain
    text and no params, `localized()` is that text's catalogue entry, if any.
    """

    def __init__(self, template: str = "", /, **params: object) -> None:
        self.template = template
        self.params = params
        if any(isinstance(value, Promise) for value in params.values()):
            with translation.override(None):  # the lazy params' own (English) text
                message = self._filled(template)
        else:
            message = self._filled(template)
        super().__init__(message)

    def _filled(self, template: str) -> str:
        return template % self.params if self.params else template

    def localized(self) -> str:
        """The message in the active language: the template's catalogue entry, filled."""
        return self._filled(gettext(self.template))


# The rule a storable text keeps, as a refusal tells it (in the reader's language).
STORABLE_TEXT = gettext_lazy(STORABLE_TEXT_REQUIREMENT)

# The templates of refusals more than one writer gives (`name` a field, `limit` in bytes).
NOT_TEXT = gettext_noop("%(name)s must be text")
NOT_STORABLE_TEXT = gettext_noop("%(name)s must be %(requirement)s")
OVER_BYTES = gettext_noop("%(name)s is over %(limit)s bytes")
RESULT_OVER_BYTES = gettext_noop("the result would be over %(limit)s bytes")
USER_INACTIVE = gettext_noop("the user is missing or inactive")


class MemoryWriteError(LocalizedError):
    """Base of every refusal or failure of a memory write."""


class MemoryInputError(MemoryWriteError):
    """`content`, `replaces` or a user's text is not acceptable (type, size, NUL, empty)."""


class MemorySensitiveContent(MemoryInputError):
    """The content holds a credential, which memory never stores. `kind` says what it looks
    like; neither it nor the message holds the matched text."""

    def __init__(self, kind: CredentialKind) -> None:
        super().__init__(
            gettext_noop("memory never stores credentials: this looks like %(kind)s"),
            kind=gettext_lazy(kind.label),
        )
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
            gettext_noop(
                "memory never keeps invisible characters: the content holds %(named)s; "
                "write it again without them"
            ),
            named=named,
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
        super().__init__(gettext_noop("memory conflict: %(reason)s"), reason=str(self.reason))


class MemoryFileTooLarge(MemoryWriteError):
    """The current file or the result would exceed `MEMORY_FILE_MAX_BYTES`."""


class MemoryAccessDenied(MemoryWriteError):
    """Identity, run, lease, switch or user state refuses the write, or the path is unsafe."""


class MemoryApprovalRequired(MemoryAccessDenied):
    """The user approves each memory write, and no decision of theirs released this call."""


class MemoryUnavailable(MemoryWriteError):
    """The database, a lock wait or the file system failed; nothing was written."""


class MemoryVersionNotFound(LocalizedError, LookupError):
    """No kept version of MEMORY.md has that hash: never kept, removed (pruned or forgotten),
    not the user's, or its bytes no longer match it. A lookup that failed, not a write error."""


class MemoryLineNotFound(LocalizedError, LookupError):
    """MEMORY.md has no line of that number (or is not text, so it has no lines at all)."""


@contextmanager
def memory_errors() -> Iterator[None]:
    """Workspace and database failures as the typed memory errors."""
    try:
        yield
    except WorkspacePathRefused as exc:
        raise MemoryAccessDenied(
            gettext_noop("the memory file path is not a safe regular file")
        ) from exc
    except WorkspaceError as exc:
        raise MemoryUnavailable(
            gettext_noop("the memory file could not be written or locked")
        ) from exc
    except DatabaseError as exc:
        raise MemoryUnavailable(
            gettext_noop("the database or the memory lock is unavailable")
        ) from exc
