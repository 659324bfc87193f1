"""Text helpers shared by every module that caps or stores text."""

__all__ = [
    "truncate_utf8",
    "is_storable_text",
]

# What `is_storable_text` asks of a text, in the words of every refusal of one it rejects (a
# lone surrogate is no NUL: the message names both, so neither is reported as the other).
STORABLE_TEXT_REQUIREMENT = "valid Unicode text (no NUL character, no lone surrogate)"


def truncate_utf8(text: str, max_bytes: int) -> tuple[str, bool]:
    """Longest prefix of `text` that encodes to at most `max_bytes` UTF-8 bytes.

    Only cuts: callers own markers and budgets. Never splits a code point, and encodes at
    most `max_bytes + 1` characters, so a huge text costs no more than its kept prefix.
    """
    if max_bytes < 0:
        raise ValueError("max_bytes must be >= 0")
    prefix = text[: max_bytes + 1]
    if prefix.isascii():  # one byte per character: the cut is a slice
        return (text, False) if len(prefix) <= max_bytes else (prefix[:max_bytes], True)
    head = prefix.encode("utf-8")
    if len(head) <= max_bytes:
        return text, False
    return head[:max_bytes].decode("utf-8", errors="ignore"), True


def storable_text_problem(text: str) -> str | None:
    """What keeps `text` from being stored, in words a refusal can name ("a NUL character",
    "a lone surrogate"), or None when `is_storable_text(text)`: a person fixing their input
    needs to know which of the two it holds."""
    if "\x00" in text:
        return "a NUL character"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "a lone surrogate"
    return None


def is_storable_text(text: str) -> bool:
    """Whether PostgreSQL can take `text` as a parameter: no NUL and valid UTF-8 (no lone
    surrogate, which JSON can carry as `\\ud800`); anything else fails inside the driver.
    A refusal says `STORABLE_TEXT_REQUIREMENT`."""
    return storable_text_problem(text) is None
