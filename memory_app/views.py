"""The chat JSON endpoint: a thin adapter from an authenticated HTTP request to `chat()`."""

import json
import logging
from dataclasses import asdict

from django.core.exceptions import RequestDataTooBig
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.views.decorators.csrf import csrf_exempt

from memory_app.runtime import (
    ChatInputError,
    ChatModelUnavailable,
    ChatRunLost,
    ChatThreadNotFound,
    chat,
)

logger = logging.getLogger(__name__)


class _CsrfCheck(CsrfViewMiddleware):
    """Django's CSRF check, answering with the reason instead of a rejection page."""

    def _reject(self, request: HttpRequest, reason: str) -> str:
        return reason


def _error(status: int, message: str) -> JsonResponse:
    return JsonResponse({"error": message}, status=status)


# Exempt from the middleware only so that an anonymous caller gets 401 rather than a CSRF 403:
# the same CSRF check runs below for every session-authenticated request.
@csrf_exempt
def chat_view(request: HttpRequest) -> HttpResponse:
    """POST {"message", "thread_id"?} as the session's user; a new thread without thread_id."""
    if request.method != "POST":
        response = _error(405, "use POST")
        response["Allow"] = "POST"
        return response
    if not request.user.is_authenticated:
        return _error(401, "authentication required")
    check = _CsrfCheck(lambda _request: HttpResponse())
    check.process_request(request)
    if check.process_view(request, None, (), {}) is not None:
        return _error(403, "CSRF check failed")
    try:
        body = json.loads(request.body)
    except RequestDataTooBig:
        return _error(413, "the body is too large")
    except (ValueError, RecursionError):  # RecursionError: nesting too deep to parse
        return _error(400, "the body must be JSON")
    if not isinstance(body, dict):
        return _error(400, "the body must be a JSON object")
    thread_id = body.get("thread_id")
    if thread_id is not None and not isinstance(thread_id, str):
        return _error(400, "thread_id must be a string")
    try:
        turn = chat(user_id=request.user.pk, message=body.get("message"), thread_id=thread_id)
    except ChatInputError as exc:
        return _error(400, str(exc))
    except ChatThreadNotFound:
        return _error(404, "no such thread")
    except ChatModelUnavailable:
        return _error(502, "the model is unavailable, try again")
    except ChatRunLost:
        return _error(503, "the run was interrupted, try again")
    except DatabaseError:
        logger.exception("a chat turn failed on the database")
        return _error(503, "the service is unavailable, try again")
    return JsonResponse(asdict(turn))
