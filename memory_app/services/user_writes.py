"""The user's own writes of MEMORY.md: the whole file (If-Match), one line edited or
forgotten, cleared, a kept version restored, the kept versions forgotten.

Every one is a user edit under the same locks, its etag compared under them first; never
refused for a credential (the user's own text is kept and its `warnings` name the lines), so
these rules live apart from the agent's write.
"""

import hashlib
from collections.abc import Callable
from dataclasses import replace

from django.utils.translation import gettext_noop

from conversations.utils.string_utils import is_storable_text
from memory_app import versions
from memory_app.credentials import CredentialFinding
from memory_app.errors import (
    NOT_STORABLE_TEXT,
    NOT_TEXT,
    OVER_BYTES,
    RESULT_OVER_BYTES,
    STORABLE_TEXT,
    MemoryConflict,
    MemoryFileTooLarge,
    MemoryInputError,
    MemoryLineNotFound,
)
from memory_app.memory_file import (
    MEMORY_FILE_MAX_BYTES,
    MemoryFile,
    memory_etag,
    split_lines,
    write_warnings,
)
from memory_app.models import MemoryEventKind
from memory_app.services.publish import (
    actor_id_of,
    publish_recorded,
    record_unchanged_file,
    user_write,
)
from memory_app.workspace.paths import MEMORY_RELPATH
from memory_app.workspace.reads import DigestedRead


def _checked_user_text(text: object) -> bytes:
    if not isinstance(text, str):
        raise MemoryInputError(NOT_TEXT, name="text")
    if not is_storable_text(text):
        raise MemoryInputError(NOT_STORABLE_TEXT, name="text", requirement=STORABLE_TEXT)
    encoded = text.encode("utf-8")
    if len(encoded) > MEMORY_FILE_MAX_BYTES:
        raise MemoryFileTooLarge(OVER_BYTES, name="text", limit=MEMORY_FILE_MAX_BYTES)
    return encoded


def _replace_whole_file(
    user_id: int,
    data: bytes,
    *,
    kind: str,
    actor,
    accept: Callable[[str], None],
    warnings: tuple[CredentialFinding, ...] = (),
) -> MemoryFile:
    """Replace MEMORY.md with `data` under the locks once `accept(current_etag)` agrees; the
    result carries `warnings` (found before the locks: the text is the caller's)."""

    def rewrite(current: DigestedRead) -> bytes:
        accept(memory_etag(current.sha256))
        return data

    return _rewrite_file(user_id, rewrite, kind=kind, actor=actor, warnings=warnings)


def _rewrite_file(
    user_id: int,
    rewrite: Callable[[DigestedRead], bytes],
    *,
    kind: str,
    actor,
    warnings: tuple[CredentialFinding, ...] = (),
) -> MemoryFile:
    """Publish `rewrite(current)` as MEMORY.md, `current` being the file as read under the
    locks (`rewrite` raises to refuse); a result equal to the file changes and records
    nothing."""
    with user_write(user_id) as (workspace, held, _):
        current = workspace.read_digested(MEMORY_RELPATH, MEMORY_FILE_MAX_BYTES)
        data = rewrite(current)
        unchanged = not current.truncated and current.data == data
        if not unchanged:
            publish_recorded(
                workspace,
                held,
                data,
                kind=kind,
                actor_id=actor_id_of(actor),
                before=current.sha256,
                replaced=None if current.truncated else current.data,
            )
    digest = current.sha256 if unchanged else hashlib.sha256(data).hexdigest()
    return MemoryFile(
        text=data.decode("utf-8"),
        etag=memory_etag(digest),
        size_bytes=len(data),
        problem=None,
        warnings=warnings,
    )


def write_memory_file(*, user, text: str, if_match: str, actor) -> MemoryFile:
    """Replace the whole of `user`'s MEMORY.md with `text`, only if `if_match` is current.

    The etag is compared under the locks, so an agent write that landed after the user read
    makes the edit `MemoryConflict("stale")` instead of silently undoing it. Works whether the
    switch is on or off; `text` is stored as given, a credential in it included (the user's
    own write is never refused for one: the result's `warnings` name its lines and kinds).
    """
    data = _checked_user_text(text)
    return _replace_whole_file(
        user.pk,
        data,
        kind=MemoryEventKind.USER_EDITED,
        actor=actor,
        accept=_if_current(if_match),
        warnings=write_warnings(text),
    )


def _if_current(if_match: object) -> Callable[[str], None]:
    """The check, made under the locks, that the user acted on the version still current."""
    if not isinstance(if_match, str):
        raise MemoryInputError(gettext_noop("if_match must be the etag that was read"))

    def accept(current_etag: str) -> None:
        if current_etag != if_match:
            raise MemoryConflict(MemoryConflict.STALE)

    return accept


def _line_number(number: object) -> int:
    if isinstance(number, bool) or not isinstance(number, int):
        raise MemoryInputError(gettext_noop("number must be a line number"))
    return number


def _file_lines(current: DigestedRead, number: int) -> list[str]:
    """The lines of MEMORY.md as read under the locks (`split_lines`); `MemoryLineNotFound`
    when it has no line `number` or is not text."""
    try:
        text = None if current.truncated else current.data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    lines = [] if text is None else split_lines(text)
    if not 1 <= number <= len(lines):
        raise MemoryLineNotFound(gettext_noop("MEMORY.md has no line %(number)s"), number=number)
    return lines


def delete_memory_line(*, user, number: int, if_match: str, actor) -> MemoryFile:
    """Remove line `number` (1-based, with its line ending) from `user`'s MEMORY.md, only if
    `if_match` is current: a user edit like `write_memory_file` (ledger `user_edited`, the
    replaced file kept as a version), so "forget this" can be undone by a restore.

    The etag is compared under the locks first (stale: `MemoryConflict("stale")`), since a
    line's number means something only in the file it was read from; then a number the file
    has no line for, or a file that is not text, is `MemoryLineNotFound`.
    """
    number = _line_number(number)
    accept = _if_current(if_match)

    def without_line(current: DigestedRead) -> bytes:
        accept(memory_etag(current.sha256))
        lines = _file_lines(current, number)
        del lines[number - 1]
        return "".join(lines).encode("utf-8")

    return _rewrite_file(user.pk, without_line, kind=MemoryEventKind.USER_EDITED, actor=actor)


def edit_memory_line(*, user, number: int, text: str, if_match: str, actor) -> MemoryFile:
    """Replace line `number` of `user`'s MEMORY.md with `text` (one line; the line keeps its
    ending), only if `if_match` is current: the rules of `delete_memory_line` (a user edit, the
    file before kept as a version, the etag compared under the locks first, an unknown number
    `MemoryLineNotFound`), so a user corrects one fact without rewriting the file. A credential
    in `text` is kept as written and named in the result's `warnings` (at line `number`)."""
    number = _line_number(number)
    _checked_user_text(text)
    if not text.strip():
        raise MemoryInputError(gettext_noop("text is empty: forget the line instead"))
    if "\n" in text or "\r" in text:
        raise MemoryInputError(gettext_noop("text must be one line"))
    accept = _if_current(if_match)

    def with_line(current: DigestedRead) -> bytes:
        accept(memory_etag(current.sha256))
        lines = _file_lines(current, number)
        old = lines[number - 1]
        lines[number - 1] = text + old[len(old.rstrip("\r\n")) :]
        data = "".join(lines).encode("utf-8")
        if len(data) > MEMORY_FILE_MAX_BYTES:
            raise MemoryFileTooLarge(RESULT_OVER_BYTES, limit=MEMORY_FILE_MAX_BYTES)
        return data

    warnings = tuple(replace(found, line=number) for found in write_warnings(text))
    return _rewrite_file(
        user.pk, with_line, kind=MemoryEventKind.USER_EDITED, actor=actor, warnings=warnings
    )


def clear_memory(*, user, actor) -> None:
    """Empty `user`'s MEMORY.md: the prompt then has no memory block, and the next
    `remember_memory` starts from an empty file. Works whatever the file held."""
    _replace_whole_file(
        user.pk, b"", kind=MemoryEventKind.USER_CLEARED, actor=actor, accept=lambda _etag: None
    )


def restore_memory_version(*, user, sha256: str, if_match: str, actor) -> MemoryFile:
    """Put kept version `sha256` back as `user`'s MEMORY.md, only if `if_match` is current.

    The rule of `write_memory_file`: the etag is compared under the locks (stale:
    `MemoryConflict("stale")`, nothing changed). The file it replaces is kept in turn, so a
    restore can be undone too. Unknown, removed or mismatching: `MemoryVersionNotFound`. Like
    the user's edit, never refused for a credential: the result's `warnings` name them.
    """
    accept = _if_current(if_match)
    data = versions.read_memory_version(user=user, sha256=sha256)
    return _replace_whole_file(
        user.pk,
        data,
        kind=MemoryEventKind.USER_RESTORED,
        actor=actor,
        accept=accept,
        warnings=write_warnings(data.decode("utf-8")),
    )


def forget_memory_versions(*, user, actor) -> None:
    """Remove every kept version of `user`'s MEMORY.md, for good; MEMORY.md itself stays.

    Under both memory locks, so no writer keeps a version meanwhile; recorded in the ledger
    (`versions_forgotten`, the file's current hash as before and after) before the files go.
    """
    with user_write(user.pk) as (workspace, held, _):
        record_unchanged_file(workspace, held, kind=MemoryEventKind.VERSIONS_FORGOTTEN, actor=actor)
        versions.forget_kept_versions(workspace)
