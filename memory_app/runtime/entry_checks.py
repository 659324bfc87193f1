"""What a caller may send to open a turn, checked before anything is stored: a message that is
non-empty, storable, bounded text, and a decision about a pending memory write in its one
shape. Whether a decision can be carried out is the approval's say, once the pending write is
known (`memory_app.runtime.approval.refuse_unfit_decision`).
"""

from typing import Any

from django.utils.translation import gettext_lazy, gettext_noop

from conversations.utils.string_utils import is_storable_text, storable_text_problem
from memory_app.errors import NOT_STORABLE_TEXT, NOT_TEXT, STORABLE_TEXT
from memory_app.runtime.approval import APPROVAL_DECISIONS
from memory_app.runtime.errors import ChatDecisionInvalid, ChatInputError
from memory_app.runtime.limits import CHAT_MESSAGE_MAX_BYTES

# A message or a decision's text over `CHAT_MESSAGE_MAX_BYTES` (`name` the field).
LONGER_THAN = gettext_noop("%(name)s is longer than %(limit)s bytes")


def check_message(message: object) -> None:
    """Refuse (`ChatInputError`) a message that is not non-empty, storable, bounded text."""
    if not isinstance(message, str) or not message.strip():
        raise ChatInputError(gettext_noop("message must be non-empty text"))
    if not is_storable_text(message):
        raise ChatInputError(NOT_STORABLE_TEXT, name="message", requirement=STORABLE_TEXT)
    if len(message.encode("utf-8")) > CHAT_MESSAGE_MAX_BYTES:
        raise ChatInputError(LONGER_THAN, name="message", limit=CHAT_MESSAGE_MAX_BYTES)


# What a user may send about a pending approval, beside the decision itself.
_DECISION_KEYS = {"decision", "content", "replaces"}


def check_decision(resume: object) -> dict[str, Any]:
    """The user's decision about a pending memory write, checked: `{"decision": "approve" |
    "reject"}` or `{"decision": "edit", "content": str, "replaces": str | None}`; anything
    else is `ChatDecisionInvalid`. (Whether it can be carried out is `refuse_unfit_decision`'s
    say, once the pending write is known.)"""
    if not isinstance(resume, dict) or not set(resume) <= _DECISION_KEYS:
        raise ChatDecisionInvalid(
            gettext_noop("resume must be an object with decision, content and replaces")
        )
    decision = resume.get("decision")
    if decision not in APPROVAL_DECISIONS:
        raise ChatDecisionInvalid(
            gettext_noop("decision must be one of %(decisions)s"),
            decisions=", ".join(APPROVAL_DECISIONS),
        )
    if decision != "edit":
        if set(resume) != {"decision"}:
            raise ChatDecisionInvalid(
                gettext_noop("content and replaces go only with the edit decision")
            )
        return {"decision": decision}
    content, replaces = resume.get("content"), resume.get("replaces")
    if content is None:
        raise ChatDecisionInvalid(gettext_noop("content is required for an edit"))
    for name, value in (("content", content), ("replaces", replaces)):
        if value is None:
            continue
        if not isinstance(value, str):
            raise ChatDecisionInvalid(NOT_TEXT, name=name)
        problem = storable_text_problem(value)
        if problem is not None:
            raise ChatDecisionInvalid(
                gettext_noop("%(name)s must be %(requirement)s: it holds %(problem)s"),
                name=name,
                requirement=STORABLE_TEXT,
                problem=gettext_lazy(problem),
            )
        if len(value.encode("utf-8")) > CHAT_MESSAGE_MAX_BYTES:
            raise ChatDecisionInvalid(LONGER_THAN, name=name, limit=CHAT_MESSAGE_MAX_BYTES)
    return {"decision": decision, "content": content, "replaces": replaces}
