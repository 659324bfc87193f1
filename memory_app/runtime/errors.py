"""The Chat service's errors: the public refusals (`ChatError` and its children), the two
signals the run guard raises inside a run, which the turn's close turns into refusals, and
the one table saying what HTTP answers each refusal (`CHAT_HTTP_ERRORS`).

A leaf of the runtime package: it imports nothing of the runtime but its limits.
"""

from django.db import DatabaseError
from django.utils.translation import gettext_noop
from langchain.agents.middleware.model_call_limit import ModelCallLimitExceededError

from memory_app.runtime.limits import MAX_MODEL_CALLS
from memory_app.workspace import WorkspaceUnavailable


class ChatError(Exception):
    """Base of the Chat service's refusals."""


class ChatInputError(ChatError):
    """The user's message is empty, too long or not text."""


class ChatDecisionInvalid(ChatInputError):
    """A decision about a pending memory write is malformed (not one of the three, an `edit`
    without `content`, text that cannot be stored); nothing was decided, it stays pending.
    HTTP 400."""


class ChatDecisionRefused(ChatError):
    """A well-formed decision that cannot be carried out now (memory is off, the edit's
    `replaces` is not exactly once in the file, its text is over a cap); nothing was decided,
    the approval stays pending, so the user can decide again. HTTP 409."""


class ChatThreadNotFound(ChatError):
    """No visible thread of this user has that id."""


class ChatNothingToResume(ChatError):
    """A decision for a thread with no pending approval (none, decided already, or expired)."""


class ChatModelUnavailable(ChatError):
    """The model failed (or broke the run's limits); the run was finished as failed."""


class ChatRunLost(ChatError):
    """The worker lost its lease; the run was not finished here (the reaper fails it)."""


class ModelFailure(Exception):
    """Inside a run: the model call failed or its reply cannot be run or stored."""


class LeaseLost(Exception):
    """Inside a run: the lease keeper found the lease lost; the run stops before its next
    model call and is left to the reaper."""


def is_model_failure(exc: BaseException) -> bool:
    """Whether `exc` is the model's fault (a failed call, an unusable reply, too many calls)."""
    return isinstance(exc, ModelFailure | ModelCallLimitExceededError)


def error_text(exc: BaseException) -> str:
    """Why a run failed, for staff: the error's type and, for our own errors, its message."""
    if isinstance(exc, ModelFailure | ChatError):
        return str(exc)
    if isinstance(exc, WorkspaceUnavailable):
        return f"the workspace root is unusable (check WORKSPACE_ROOT): {exc}"
    if isinstance(exc, ModelCallLimitExceededError):
        return f"the model did not answer within {MAX_MODEL_CALLS} model calls"
    return f"internal error ({type(exc).__name__})"


# What HTTP answers a turn's refusal or failure: (error type, status, text; None: the error's
# own message), first match wins. The one table `POST /api/chat/`, `POST /api/chat/stream/`
# (before its stream starts) and a stream's `error` event all answer from.
CHAT_HTTP_ERRORS: tuple[tuple[type[BaseException], int, str | None], ...] = (
    (ChatInputError, 400, None),
    (ChatThreadNotFound, 404, gettext_noop("no such thread")),
    (
        ChatNothingToResume,
        409,
        gettext_noop("no memory write is waiting for a decision in this thread"),
    ),
    (ChatDecisionRefused, 409, None),
    (ChatModelUnavailable, 502, gettext_noop("the model is unavailable, try again")),
    (ChatRunLost, 503, gettext_noop("the run was interrupted, try again")),
    (DatabaseError, 503, gettext_noop("the service is unavailable, try again")),
    (WorkspaceUnavailable, 503, gettext_noop("the memory store is unavailable, try again later")),
)
# Anything else: the server's fault.
INTERNAL_ERROR = (500, "internal error")


def http_error(exc: BaseException) -> tuple[int, str]:
    """(HTTP status, text) for `exc`, from `CHAT_HTTP_ERRORS`; `INTERNAL_ERROR` otherwise."""
    for kind, status, text in CHAT_HTTP_ERRORS:
        if isinstance(exc, kind):
            return status, str(exc) if text is None else text
    return INTERNAL_ERROR
