"""How the API answers an exception: the one error shape (`{"error": "..."}`, in the request's
language), the framework's own errors in it, and `MEMORY_HTTP_ERRORS`, the one table of memory
errors as HTTP answers.

The services and selectors raise typed errors and know nothing of HTTP; this module is the
edge that maps them, so a view never catches a memory error itself. The memory table is keyed
by the errors' own types (`ConflictReason` for a conflict), as the table of memory errors as
tool results is (`memory_app.tool_results`), so every error has its row and none can miss it.
"""

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.db import DatabaseError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.utils.translation import gettext, gettext_noop
from ninja.errors import AuthenticationError, HttpError, ValidationError

from memory_app.api_edge import API_UNAVAILABLE_MESSAGE
from memory_app.errors import (
    ConflictReason,
    LocalizedError,
    MemoryAccessDenied,
    MemoryApprovalRequired,
    MemoryConflict,
    MemoryFileTooLarge,
    MemoryInputError,
    MemoryInvisibleText,
    MemoryLineNotFound,
    MemorySensitiveContent,
    MemoryUnavailable,
    MemoryVersionNotFound,
    MemoryWriteError,
)
from memory_app.services import MEMORY_FILE_MAX_BYTES
from memory_app.workspace import WorkspaceError, WorkspacePathRefused

logger = logging.getLogger(__name__)


def _shaped(status: int, text: str) -> JsonResponse:
    return JsonResponse({"error": text}, status=status)


def error_response(status: int, message: str) -> JsonResponse:
    """The one error shape, its message in the request's language (`Accept-Language`, or the
    language the user chose on the page) where the catalogue has it, else as written."""
    return _shaped(status, gettext(message))


# --- memory errors ---------------------------------------------------------------------------

# An error the memory raises, whatever its kind (a write's, a lookup's, the workspace's).
AnyMemoryError = MemoryWriteError | MemoryVersionNotFound | MemoryLineNotFound | WorkspaceError


@dataclass(frozen=True)
class MemoryHttpError:
    """How a memory error is answered: `status`, and `message` the text of its `error` (None:
    the error's own message, which names a cap or a credential's kind, never a secret).
    `logged`: the answer hides a server fault, logged as a warning with the error."""

    status: int
    message: str | None
    logged: str | None = None
    # What the message's named placeholders stand for (`%(limit)s`), filled in after it is
    # translated.
    params: tuple[tuple[str, object], ...] = ()


_STALE = MemoryHttpError(
    412, gettext_noop("the memory changed since you read it: GET it again and retry")
)
_REFUSED_INPUT = MemoryHttpError(400, None)
_DENIED = MemoryHttpError(403, gettext_noop("your memory cannot be changed now"))
_UNAVAILABLE = MemoryHttpError(
    503, API_UNAVAILABLE_MESSAGE, "a memory request found the memory unavailable: %s"
)

# The one table of memory errors as HTTP answers: by conflict reason, else by the most specific
# error class (`memory_http_error` walks the class's bases). A user's own write conflicts only
# when the file changed since they read it: every conflict reason is told so.
MEMORY_HTTP_ERRORS: dict[type[Exception] | ConflictReason, MemoryHttpError] = {
    ConflictReason.NOT_FOUND: _STALE,
    ConflictReason.AMBIGUOUS: _STALE,
    ConflictReason.INVALID_ENCODING: _STALE,
    ConflictReason.STALE: _STALE,
    MemorySensitiveContent: _REFUSED_INPUT,
    MemoryInvisibleText: _REFUSED_INPUT,
    MemoryInputError: _REFUSED_INPUT,
    MemoryFileTooLarge: MemoryHttpError(
        413,
        gettext_noop("the memory may be at most %(limit)s bytes"),
        params=(("limit", MEMORY_FILE_MAX_BYTES),),
    ),
    MemoryApprovalRequired: _DENIED,
    MemoryAccessDenied: _DENIED,
    MemoryUnavailable: _UNAVAILABLE,
    MemoryWriteError: _UNAVAILABLE,
    MemoryVersionNotFound: MemoryHttpError(404, gettext_noop("no such version is kept")),
    MemoryLineNotFound: MemoryHttpError(
        404, gettext_noop("the memory has no such line: GET /api/memory/lines/ again")
    ),
    WorkspacePathRefused: MemoryHttpError(
        403, gettext_noop("your memory file is not a regular file: ask staff to repair it")
    ),
    WorkspaceError: MemoryHttpError(
        503, API_UNAVAILABLE_MESSAGE, "a memory request could not read the workspace: %s"
    ),
}


def memory_http_error(exc: AnyMemoryError) -> MemoryHttpError:
    """`exc`'s row of `MEMORY_HTTP_ERRORS` (every conflict reason has one, and every memory
    error's class or one of its bases)."""
    if isinstance(exc, MemoryConflict):
        return MEMORY_HTTP_ERRORS[exc.reason]
    kind = next(kind for kind in type(exc).__mro__ if kind in MEMORY_HTTP_ERRORS)
    return MEMORY_HTTP_ERRORS[kind]


def memory_error_text(exc: AnyMemoryError, row: MemoryHttpError) -> str:
    """The `error` text of `exc`'s answer, in the request's language: its row's message, else
    the error's own."""
    if row.message is None:
        return exc.localized() if isinstance(exc, LocalizedError) else str(exc)
    message = gettext(row.message)
    return message % dict(row.params) if row.params else message


def _on_memory_error(request: HttpRequest, exc: AnyMemoryError) -> HttpResponse:
    row = memory_http_error(exc)
    if row.logged is not None:
        logger.warning(row.logged, exc)
    return _shaped(row.status, memory_error_text(exc, row))


# --- the framework's errors ------------------------------------------------------------------


def _describe(errors: list[dict[str, Any]]) -> str:
    parts = []
    for error in errors[:5]:
        where = ".".join(str(part) for part in error.get("loc", ()) if part != "body")
        parts.append(f"{where}: {error.get('msg', 'invalid')}" if where else error.get("msg", ""))
    return "invalid request: " + "; ".join(parts)


def _on_validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    return error_response(400, _describe(exc.errors))


def _on_http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    if isinstance(exc.__cause__, RequestDataTooBig):
        return error_response(413, gettext_noop("the body is too large"))
    if exc.status_code == 400 and exc.__cause__ is not None:
        return error_response(400, gettext_noop("the body must be JSON"))
    return error_response(exc.status_code, str(exc))


def _on_authentication_error(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    return error_response(401, gettext_noop("authentication required"))


def _on_not_found(request: HttpRequest, exc: Http404) -> HttpResponse:
    return error_response(404, gettext_noop("not found"))


def _on_too_big(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
    return error_response(413, gettext_noop("the body is too large"))


def _on_database_error(request: HttpRequest, exc: DatabaseError) -> HttpResponse:
    logger.error("an API request failed on the database", exc_info=exc)
    return error_response(503, API_UNAVAILABLE_MESSAGE)


# Every exception the API answers in its error shape, and how; a memory error by its table.
EXCEPTION_HANDLERS: list[tuple[type[Exception], Callable[[HttpRequest, Any], HttpResponse]]] = [
    (ValidationError, _on_validation_error),
    (HttpError, _on_http_error),
    (AuthenticationError, _on_authentication_error),
    (Http404, _on_not_found),
    (RequestDataTooBig, _on_too_big),
    (DatabaseError, _on_database_error),
    *((kind, _on_memory_error) for kind in MEMORY_HTTP_ERRORS if isinstance(kind, type)),
]
