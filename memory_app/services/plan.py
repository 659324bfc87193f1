"""What an agent's memory write makes of MEMORY.md, decided without a lock or a database call:
its arguments checked (`MEMORY_ARG_MAX_BYTES`, storable text, no credential, no invisible
characters), then the file's bytes deduped against, appended to or replaced in.

Pure text work kept apart from the locks, so the write under its locks, the check of a user's
decision before it is spent (`check_memory_write`) and the approval's look at what a call
would keep all judge a write by the one plan.
"""

import unicodedata
from dataclasses import dataclass
from enum import StrEnum

from django.utils.translation import gettext_noop

from conversations.utils.invisible_text import invisible_characters
from conversations.utils.string_utils import is_storable_text
from memory_app.credentials import credential_kinds, produced_credential
from memory_app.errors import (
    NOT_STORABLE_TEXT,
    NOT_TEXT,
    OVER_BYTES,
    RESULT_OVER_BYTES,
    STORABLE_TEXT,
    MemoryConflict,
    MemoryFileTooLarge,
    MemoryInputError,
    MemoryInvisibleText,
    MemorySensitiveContent,
)
from memory_app.memory_file import MEMORY_BULLET_MARKERS, MEMORY_FILE_MAX_BYTES, unbulleted

MEMORY_ARG_MAX_BYTES = 4096


class MemoryWriteStatus(StrEnum):
    """What a successful `remember_memory` did (the tool result's status too)."""

    ADDED = "added"
    UNCHANGED = "unchanged"
    REPLACED = "replaced"


ADDED = MemoryWriteStatus.ADDED
UNCHANGED = MemoryWriteStatus.UNCHANGED
REPLACED = MemoryWriteStatus.REPLACED


@dataclass(frozen=True)
class MemoryWriteResult:
    """What a successful call did and the size of MEMORY.md afterwards."""

    status: MemoryWriteStatus
    size_bytes: int


def normalize_memory_text(text: str) -> str:
    """NFC, LF line ends, no trailing whitespace on lines, no blank edges."""
    text = unicodedata.normalize("NFC", text).replace("\r\n", "\n").replace("\r", "\n")
    return "\n".join(line.rstrip() for line in text.split("\n")).strip()


def _checked_argument(value: object, name: str, *, require_text: bool) -> str:
    if not isinstance(value, str):
        raise MemoryInputError(NOT_TEXT, name=name)
    if not is_storable_text(value):
        raise MemoryInputError(NOT_STORABLE_TEXT, name=name, requirement=STORABLE_TEXT)
    if len(value.encode("utf-8")) > MEMORY_ARG_MAX_BYTES:
        raise MemoryInputError(OVER_BYTES, name=name, limit=MEMORY_ARG_MAX_BYTES)
    if require_text and not value.strip():
        raise MemoryInputError(gettext_noop("%(name)s is empty"), name=name)
    return value


def _decode_memory(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MemoryConflict(MemoryConflict.INVALID_ENCODING) from exc


def _appended(current: str, content: str) -> tuple[str, int] | None:
    """`current` with `content` appended as whole lines, or None if they already stand there.

    Lines are compared with only their trailing whitespace ignored (`\r` included), so an
    indented or differently composed line of the file is not the same fact. A one-line fact is
    the same with or without a list marker (`- tea` stands for `tea`), and one without a marker
    follows the file's list style: after a last non-empty line that is a `- `, `* ` or `+ `
    bullet, it is appended as a bullet with that marker. Returns the new text and where the
    appended lines start in it.
    """
    lines = [line.rstrip() for line in current.split("\n")]
    if f"\n{content}\n" in "\n" + "\n".join(lines) + "\n":
        return None
    if "\n" not in content:
        fact = unbulleted(content)
        if any(unbulleted(line) == fact for line in lines):
            return None
        last = next((line for line in reversed(lines) if line), "")
        if content == fact and last.startswith(MEMORY_BULLET_MARKERS):
            content = last[:2] + content
    separator = "" if not current or current.endswith("\n") else "\n"
    return f"{current}{separator}{content}\n", len(current) + len(separator)


def _replaced(current: str, old: str, new: str) -> tuple[str, int]:
    """`current` with its only occurrence of `old` (overlaps count) replaced by `new`, and where
    `new` starts in it.

    A whole list line replaced by a one-line fact without a marker keeps its marker
    (`- I live in Porto` corrected to `I live in Lisbon` stays a `- ` bullet), as an appended
    fact follows the file's list style."""
    start = current.find(old)
    if start < 0:
        raise MemoryConflict(MemoryConflict.NOT_FOUND)
    if current.find(old, start + 1) >= 0:
        raise MemoryConflict(MemoryConflict.AMBIGUOUS)
    end = start + len(old)
    whole_line = (start == 0 or current[start - 1] == "\n") and current[end : end + 1] in (
        "",
        "\n",
        "\r",
    )
    if (
        whole_line
        and "\n" not in old + new
        and old.startswith(MEMORY_BULLET_MARKERS)
        and new == unbulleted(new)
    ):
        new = old[:2] + new
    return current[:start] + new + current[end:], start


def planned_write(
    data: bytes, too_large: bool, content: str, replaces: str | None
) -> tuple[MemoryWriteStatus, bytes]:
    """What a write of `content` (replacing `replaces`) makes of MEMORY.md's bytes `data` (a
    bounded read; `too_large` when it was cut): the status and the new bytes (`data` itself
    when nothing changes). Raises the write's refusals: the file or the result too large,
    `replaces` not exactly once, a file that is not UTF-8, and a credential on a line the write
    produces (`MemorySensitiveContent`): a replacement may complete one from pieces already in
    the file ("AKIAZ3MSJV" + "4WWZ2XJ5QN", "gym locker 7350" made "bank PIN 7350"), or content
    may stand under a line ending in "password is"."""
    if too_large:
        raise MemoryFileTooLarge(
            gettext_noop("MEMORY.md is over %(limit)s bytes"), limit=MEMORY_FILE_MAX_BYTES
        )
    current = _decode_memory(data)
    if replaces is None:
        appended = _appended(current, content)
        if appended is None:
            return UNCHANGED, data
        (result, start), status = appended, ADDED
        end = len(result) - 1  # (a bullet marker may have been put before the content)
    else:
        (result, start), status = _replaced(current, replaces, content), REPLACED
        end = start + len(content)
    kind = produced_credential(result, start, end)
    if kind is not None:
        raise MemorySensitiveContent(kind)
    encoded = result.encode("utf-8")
    if len(encoded) > MEMORY_FILE_MAX_BYTES:
        raise MemoryFileTooLarge(RESULT_OVER_BYTES, limit=MEMORY_FILE_MAX_BYTES)
    return status, encoded


def checked_write_arguments(content: object, replaces: object) -> tuple[str, str | None]:
    """`remember_memory`'s arguments as it writes them (`content` normalized), or
    `MemoryInputError`."""
    content = normalize_memory_text(_checked_argument(content, "content", require_text=True))
    # NFC can grow a text (some characters recompose into longer forms): cap what is written.
    if len(content.encode("utf-8")) > MEMORY_ARG_MAX_BYTES:
        raise MemoryInputError(
            gettext_noop("content is over %(limit)s bytes once normalized"),
            limit=MEMORY_ARG_MAX_BYTES,
        )
    # Memory never keeps a credential: refused before any lock, so nothing is written, kept
    # as a version or recorded (and a decision to write one is refused before it is spent).
    # Checked before invisible characters, so content holding both is refused as sensitive.
    kinds = credential_kinds(content)
    if kinds:
        raise MemorySensitiveContent(kinds[0])
    invisible = invisible_characters(content)
    if invisible:
        raise MemoryInvisibleText(invisible)
    if replaces is not None:
        # Exact text, checked only for size and storable text: whether it occurs once is the
        # file's say.
        replaces = _checked_argument(replaces, "replaces", require_text=False)
    return content, replaces
