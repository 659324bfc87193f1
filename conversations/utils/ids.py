"""The one rule for a user id given as data (tool contexts, URLs, workspace paths)."""

__all__ = [
    "parse_uid",
]


def parse_uid(value: object) -> int | None:
    """A user's primary key given as an int or its canonical decimal digits; None otherwise.

    The one rule every layer applies, so " 1", "01", "+1" or "\u0661" never alias user 1.
    """
    if isinstance(value, str) and value.isascii() and value.isdigit() and value == str(int(value)):
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None
