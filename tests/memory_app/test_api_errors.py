"""The one table of memory errors as HTTP answers (`MEMORY_HTTP_ERRORS`): every memory error
class and every conflict reason has exactly one row, and a real request that meets a
representative of a row is answered with that row's status and message."""

import logging

import pytest

from memory_app import errors, selectors
from memory_app.api.errors import MEMORY_HTTP_ERRORS, memory_http_error
from memory_app.credentials import CredentialKind
from memory_app.errors import (
    ConflictReason,
    MemoryConflict,
    MemoryInvisibleText,
    MemorySensitiveContent,
)
from memory_app.workspace import WorkspaceError, WorkspacePathRefused

URL = "/api/memory/"


def _memory_error_classes() -> set[type[Exception]]:
    """Every memory error class `memory_app.errors` defines (not `LocalizedError`, the base
    that gives any error a message in the reader's language)."""
    return {
        value
        for value in vars(errors).values()
        if isinstance(value, type)
        and issubclass(value, Exception)
        and value.__module__ == errors.__name__
        and value is not errors.LocalizedError
    }


def _representative(key: type[Exception] | ConflictReason) -> Exception:
    """An error whose row is `key`'s."""
    if isinstance(key, ConflictReason):
        return MemoryConflict(key)
    if key is MemorySensitiveContent:
        return MemorySensitiveContent(next(iter(CredentialKind)))
    if key is MemoryInvisibleText:
        return MemoryInvisibleText(["U+200B"])
    return key("the reason, as the service words it")


def _name(key: type[Exception] | ConflictReason) -> str:
    return f"conflict-{key}" if isinstance(key, ConflictReason) else key.__name__


def test_every_memory_error_and_every_conflict_reason_has_one_row():
    # A conflict is told by its reason, so `MemoryConflict` itself has no row; the workspace's
    # failures reach the API from the reads and are told by the same table.
    expected = (
        (_memory_error_classes() - {MemoryConflict})
        | set(ConflictReason)
        | {WorkspaceError, WorkspacePathRefused}
    )
    assert set(MEMORY_HTTP_ERRORS) == expected
    assert len(MEMORY_HTTP_ERRORS) == len(expected)


@pytest.mark.parametrize("key", list(MEMORY_HTTP_ERRORS), ids=_name)
def test_each_error_finds_its_own_row_not_a_bases(key):
    assert memory_http_error(_representative(key)) is MEMORY_HTTP_ERRORS[key]


@pytest.mark.django_db
@pytest.mark.parametrize("key", list(MEMORY_HTTP_ERRORS), ids=_name)
def test_a_request_meeting_the_error_is_answered_by_its_row(session, monkeypatch, caplog, key):
    exc = _representative(key)

    def failing_read(**kwargs):
        raise exc

    monkeypatch.setattr(selectors, "read_memory_file", failing_read)
    row = MEMORY_HTTP_ERRORS[key]
    with caplog.at_level(logging.WARNING, logger="memory_app.api"):
        response = session.get(URL)
    assert response.status_code == row.status
    if row.message is None:
        expected = str(exc)
    else:
        expected = row.message % dict(row.params) if row.params else row.message
    assert response.json() == {"error": expected}
    logged = [record for record in caplog.records if record.name.startswith("memory_app.api")]
    assert bool(logged) == (row.logged is not None)
