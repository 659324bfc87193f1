"""History lookback's budgets: every cap a response keeps, and how its bytes are counted and cut.

One place for the numbers the contract fixes (results, messages and tool calls per response,
bytes per snippet, content, title, tool call and response) and for the one serialized form
they are counted on (`to_json`, the form the tools send), so search and read measure and cut
alike. Every budget is counted on UTF-8 bytes.
"""

import json
from typing import Any

from conversations.utils.invisible_text import escape_invisible_within
from conversations.utils.string_utils import truncate_utf8

SEARCH_LIMIT_MAX = 10
SNIPPET_MAX_BYTES = 512
# Context kept before the match in a snippet; the rest of the snippet follows the match.
SNIPPET_LEAD_BYTES = 128
SEARCH_RESPONSE_MAX_BYTES = 16_384

READ_LIMIT_MAX = 20
CONTENT_MAX_BYTES = 8_192
CONTENTS_MAX_BYTES = 32_768
READ_RESPONSE_MAX_BYTES = 65_536
TITLE_MAX_BYTES = 256

TOOL_CALLS_MAX = 10
TOOL_CALL_MAX_BYTES = 4_096
TOOL_CALLS_MAX_BYTES = 16_384
# A tool call's `id` and `name`, each serialized.
TOOL_LABEL_MAX_BYTES = 256
# jsonb's text form is at most 1.5x the compact form, so this many characters always hold an
# input that could fit its item whole.
TOOL_INPUT_LOAD_CHARS = 3 * TOOL_CALL_MAX_BYTES

# The most bytes one character takes serialized (a control character, as `\u00XX`).
JSON_CHAR_MAX_BYTES = 6

# One encoder for every size check: `json.dumps` with options builds a new one per call.
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def to_json(response: dict[str, Any]) -> str:
    """The serialized form every byte budget is counted on."""
    return _ENCODER.encode(response)


def json_bytes(value: Any) -> int:
    """Bytes of `value` serialized (`to_json`)."""
    return len(to_json(value).encode("utf-8"))


def escaped_bytes(text: str) -> int:
    """Bytes of `text` as a JSON string literal, quotes excluded. Printable ASCII without `"`
    or `\\` (ids, names, statuses) is itself; anything else is measured by serializing it."""
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return len(text)
    return json_bytes(text) - 2


def bounded_bytes(text: str | None) -> int:
    """An upper bound of `text`'s serialized size, found without serializing it: a character
    takes at most JSON_CHAR_MAX_BYTES, `null` 4."""
    return 4 if text is None else JSON_CHAR_MAX_BYTES * len(text) + 2


def cut_serialized(text: str, max_bytes: int) -> tuple[str, bool]:
    """Longest prefix of `text` whose JSON-escaped form fits `max_bytes` (quotes excluded)."""
    if bounded_bytes(text) - 2 <= max_bytes:
        return text, False
    head, cut = truncate_utf8(text, max_bytes)
    if escaped_bytes(head) <= max_bytes:
        return head, cut
    low, high = 0, len(head)  # head[:low] fits, head[:high] does not
    while high - low > 1:
        middle = (low + high) // 2
        if escaped_bytes(head[:middle]) <= max_bytes:
            low = middle
        else:
            high = middle
    return head[:low], True


def take_within(items: list[dict[str, Any]], max_bytes: int) -> tuple[list[dict[str, Any]], bool]:
    """The leading `items` whose serialized list body fits `max_bytes`; whether any was left."""
    if json_bytes(items) - 2 <= max_bytes:
        return items, False
    size = 0
    for count, item in enumerate(items):
        size += json_bytes(item) + (1 if count else 0)
        if size > max_bytes:
            return items[:count], True
    return items, False


def cut_title(head: str) -> tuple[str, bool]:
    """A thread's title as a response shows it: invisible characters escaped, within
    TITLE_MAX_BYTES; and whether it was cut."""
    return escape_invisible_within(head, TITLE_MAX_BYTES)
