"""SQL evaluated in the database: its clock, and measures or cuts of a large column (so it is
never sent whole)."""

from django.db.models import DateTimeField, Func, TextField
from django.db.models.functions import Cast, Left, Length

__all__ = [
    "ClockTimestamp",
]


class ClockTimestamp(Func):
    """PostgreSQL's wall clock at evaluation time (unlike `now()`, frozen at transaction start).

    The one clock for every timestamp the app stores or judges a lease by, so several app
    hosts with skewed clocks still order one thread consistently.
    """

    template = "clock_timestamp()"
    output_field = DateTimeField()


class OctetLength(Length):
    """PostgreSQL's `octet_length`: a text's size in bytes (UTF-8 here)."""

    function = "OCTET_LENGTH"


def text_prefix(field: str, max_bytes: int) -> Left:
    """At most `max_bytes + 1` characters of a text or JSON column, as text.

    A character is at least one byte, so this prefix always covers a `max_bytes`-byte cut made
    afterwards with `truncate_utf8`, and the extra character lets that cut see that more was
    there (an ASCII value one byte over the cap), while the rest stays in the database.
    """
    return Left(Cast(field, TextField()), max_bytes + 1)


def byte_length(field: str) -> OctetLength:
    """The UTF-8 size of a text or JSON column (as text), computed in the database."""
    return OctetLength(Cast(field, TextField()))
