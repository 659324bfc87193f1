"""What a caller may pass to history lookback, checked before any statement runs.

The two errors a call raises and the check of each argument, shared by search and read, so
both refuse a malformed user id, limit, text or time bound alike and in the same words (the
tools hand these messages to the model as they are).
"""

from datetime import UTC, date, datetime

from conversations.utils.ids import parse_uid
from conversations.utils.string_utils import STORABLE_TEXT_REQUIREMENT, is_storable_text

QUERY_MAX_CHARS = 256
TIME_BOUND_FORMAT = (
    "an ISO 8601 date or datetime in UTC, such as 2026-06-14 or 2026-06-14T09:30:00Z"
)

NOT_FOUND_MESSAGE = "no such thread or message"


class HistoryNotFound(LookupError):
    """The thread or anchor is unknown or not visible to the user (indistinguishably)."""


class HistoryQueryError(ValueError):
    """An argument is out of the contract's range."""


def check_uid(value: object) -> int:
    """The owner's user id, as an integer."""
    uid = parse_uid(value)
    if uid is None:
        raise HistoryQueryError("the user id is malformed")
    return uid


def check_limit(value: object, maximum: int) -> int:
    """A page size from 1 to `maximum`."""
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= maximum:
        return value
    raise HistoryQueryError(f"limit must be an integer from 1 to {maximum}")


def check_text(value: object, name: str) -> str:
    """A non-empty text the database can store (a query or a thread id)."""
    if not isinstance(value, str) or not value:
        raise HistoryQueryError(f"{name} must be a non-empty string")
    if not is_storable_text(value):
        raise HistoryQueryError(f"{name} must be {STORABLE_TEXT_REQUIREMENT}")
    return value


def check_time_bound(value: object, name: str) -> str | None:
    """`since`/`until` as UTC ISO text: an ISO 8601 date (midnight UTC) or datetime (UTC when
    it names no offset, converted when it does), or a date or datetime object."""
    if value is None:
        return None
    bad = HistoryQueryError(f"{name} must be {TIME_BOUND_FORMAT}")
    if isinstance(value, str):
        if not value.isascii() or len(value) > 64:
            raise bad
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise bad from None
    if not isinstance(value, date):
        raise bad
    if not isinstance(value, datetime):
        value = datetime(value.year, value.month, value.day)
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC).isoformat()
    except OverflowError:
        raise bad from None


def check_message_id(value: object) -> int | None:
    """An anchor: a positive message id, or None for none."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    raise HistoryQueryError("message_id must be a positive integer")
