"""History read: visible messages of one visible thread, the latest or a window around one.

The Python around the read statements: which messages a window holds, how their contents and
the tool calls share the budgets (nearest the anchor first), and what goes first when the
response would pass its cap. The statements are in `sql.py`, the caps in `budgets.py`.
"""

import json
import math
from collections.abc import Iterable
from datetime import datetime
from typing import Any, NamedTuple

from django.db import connection
from django.db.backends.utils import CursorWrapper

from conversations.models import Conversation
from conversations.repository.arguments import (
    NOT_FOUND_MESSAGE,
    HistoryNotFound,
    HistoryQueryError,
    check_limit,
    check_message_id,
    check_text,
    check_uid,
)
from conversations.repository.budgets import (
    CONTENT_MAX_BYTES,
    CONTENTS_MAX_BYTES,
    JSON_CHAR_MAX_BYTES,
    READ_LIMIT_MAX,
    READ_RESPONSE_MAX_BYTES,
    TITLE_MAX_BYTES,
    TOOL_CALL_MAX_BYTES,
    TOOL_CALLS_MAX,
    TOOL_CALLS_MAX_BYTES,
    TOOL_INPUT_LOAD_CHARS,
    TOOL_LABEL_MAX_BYTES,
    bounded_bytes,
    cut_serialized,
    cut_title,
    escaped_bytes,
    json_bytes,
    take_within,
    to_json,
)
from conversations.repository.sql import AROUND_SQL, LATEST_SQL, THREAD_SQL, TOOL_CALLS_SQL, fetch
from conversations.utils.invisible_text import escape_invisible
from conversations.utils.string_utils import truncate_utf8

# The lookback tools are named after the two lookback functions (`search_thread_messages` in
# `search.py`, `read_thread_messages` below). Their recorded outputs are copies of other
# threads' text (which may since be archived or deleted), so reading a thread with its tool
# calls never returns them: their `output` is null.
LOOKBACK_TOOL_NAMES = ("search_thread_messages", "read_thread_messages")

# Larger ids cannot exist (bigint primary keys).
MESSAGE_ID_MAX = 2**63 - 1
THREAD_ID_MAX_CHARS = Conversation._meta.get_field("thread_id").max_length


class _Thread(NamedTuple):
    pk: int
    title_head: str


class _Window(NamedTuple):
    """Message rows `(id, role, created_at, content head, ...)` in order, the index of the
    anchor (the latest message without one), and whether more lie beyond either end."""

    rows: list[tuple]
    anchor: int
    has_more_before: bool
    has_more_after: bool


def _load_thread(
    cursor: CursorWrapper, owner: int, thread_id: str, anchor_id: int | None
) -> tuple[_Thread, datetime | None]:
    """The visible thread and the anchor's plain UTC timestamp (None without an anchor);
    not-found alike for an unknown thread, an invisible one, and an anchor that is not a
    visible message of it."""
    if len(thread_id) > THREAD_ID_MAX_CHARS or (anchor_id or 0) > MESSAGE_ID_MAX:
        raise HistoryNotFound(NOT_FOUND_MESSAGE)
    found = fetch(
        cursor,
        THREAD_SQL,
        {
            "owner": owner,
            "thread_id": thread_id,
            "anchor": anchor_id,
            "title_chars": TITLE_MAX_BYTES + 1,
        },
    )
    if not found or (anchor_id is not None and found[0][2] is None):
        raise HistoryNotFound(NOT_FOUND_MESSAGE)
    conversation_pk, title_head, anchor_at = found[0]
    return _Thread(conversation_pk, title_head), anchor_at


def _load_window(
    cursor: CursorWrapper,
    conversation_pk: int,
    anchor_id: int | None,
    anchor_at: datetime | None,
    limit: int,
) -> _Window:
    """Up to `limit` visible messages: the latest, or `ceil(limit/2)` up to and including the
    anchor and the rest after it, a short side filled from the other."""
    params = {
        "conversation": conversation_pk,
        "limit": limit + 1,
        "content_chars": CONTENT_MAX_BYTES + 1,
    }
    if anchor_id is None:
        rows = fetch(cursor, LATEST_SQL, params)
        rows.reverse()
        return _Window(rows[-limit:], min(len(rows), limit) - 1, len(rows) > limit, False)
    rows = fetch(cursor, AROUND_SQL, {**params, "anchor": anchor_id, "anchor_at": anchor_at})
    before = sum(1 for row in rows if row[4])  # rows[:before] end at the anchor
    after = len(rows) - before
    want_before = math.ceil(limit / 2)
    want_after = limit - want_before
    if after < want_after:
        want_before = min(before, limit - after)
        want_after = after
    elif before < want_before:
        want_after = min(after, limit - before)
        want_before = before
    return _Window(
        rows[before - want_before : before + want_after],
        want_before - 1,
        before > want_before,
        after > want_after,
    )


def _budget_contents(window: _Window) -> tuple[dict[int, dict[str, Any]], list[int], bool]:
    """Message items cut to their budgets, nearest the anchor first (at equal distance the
    earlier one) until the contents' budget is spent. Returns the items by window index, the
    kept indexes in that priority order, and whether anything was cut or left out."""
    anchor = window.anchor
    priority = sorted(range(len(window.rows)), key=lambda i: (abs(i - anchor), i))
    items: dict[int, dict[str, Any]] = {}
    remaining = CONTENTS_MAX_BYTES
    truncated = False
    for index in priority:
        if remaining == 0:
            truncated = True
            break
        row = window.rows[index]
        content = escape_invisible(row[3])  # invisible characters escaped, then budgeted
        size = len(content) if content.isascii() else len(content.encode("utf-8"))
        allowed = min(CONTENT_MAX_BYTES, remaining)
        cut = size > allowed
        if cut:  # the rare case: cut, and count what is left
            content, _ = truncate_utf8(content, allowed)
            size = len(content.encode("utf-8"))
            truncated = True
        remaining -= size
        items[index] = {
            "message_id": row[0],
            "role": row[1],
            "created_at": row[2],
            "content": content,
            "truncated": cut,
        }
    return items, priority[: len(items)], truncated


def _tool_call_frame(call_id: str, message_id: int, name: str, status: str) -> dict[str, Any]:
    """A tool-call item with its three free-form fields empty, to be filled in."""
    return {
        "id": call_id,
        "message_id": message_id,
        "name": name,
        "status": status,
        "input": "",
        "output": "",
        "error": "",
        "truncated": False,
    }


# The frame's serialized bytes with every label empty, `message_id` 0 (one digit) and the
# three free-form fields' empty strings (6 bytes) left out.
_TOOL_CALL_FRAME_BYTES = json_bytes(_tool_call_frame("", 0, "", "")) - 1 - 6


def _tool_call_frame_bytes(call_id: str, message_id: int, name: str, status: str) -> int:
    """A tool-call item's serialized bytes without its three free-form fields' values."""
    return (
        _TOOL_CALL_FRAME_BYTES
        + escaped_bytes(call_id)
        + len(str(message_id))
        + escaped_bytes(name)
        + escaped_bytes(status)
    )


def _tool_call_item(row: tuple) -> tuple[dict[str, Any], int]:
    """One allowlisted tool call, at most TOOL_CALL_MAX_BYTES serialized, and an upper bound
    of its serialized size found without serializing it whole."""
    call_id, message_id, name, status, input_head, output, error = row
    call_id, id_cut = cut_serialized(call_id, TOOL_LABEL_MAX_BYTES)
    name, name_cut = cut_serialized(name, TOOL_LABEL_MAX_BYTES)
    input_whole = len(input_head) <= TOOL_INPUT_LOAD_CHARS
    input_value: Any = json.loads(input_head) if input_whole else input_head
    item = _tool_call_frame(call_id, message_id, name, status)
    # What is left once the three free-form fields are empty strings ("" is 2 bytes each).
    available = TOOL_CALL_MAX_BYTES - _tool_call_frame_bytes(call_id, message_id, name, status)
    # An input that must be cut becomes cut JSON text.
    input_text = to_json(input_value) if input_whole else input_head
    needs = {
        "input": len(input_text.encode("utf-8")) if input_whole else json_bytes(input_head),
        "output": bounded_bytes(output),
        "error": bounded_bytes(error),
    }
    values: dict[str, Any] = {"input": input_value, "output": output, "error": error}
    texts = {**values, "input": input_text}
    cut_any = id_cut or name_cut or not input_whole
    bound = TOOL_CALL_MAX_BYTES - available + sum(needs.values())
    if cut_any or bound > TOOL_CALL_MAX_BYTES:
        bound = TOOL_CALL_MAX_BYTES
        needs.update(output=json_bytes(output), error=json_bytes(error))
        # Water-filling: the smaller fields stay whole, the larger share what remains.
        left = len(needs)
        for field in sorted(needs, key=needs.__getitem__):
            share = available // left
            left -= 1
            whole = needs[field] <= share and not (field == "input" and not input_whole)
            if whole:
                available -= needs[field]
                continue
            values[field], _ = cut_serialized(texts[field], share - 2)
            available -= json_bytes(values[field])
            cut_any = True
    item.update(values, truncated=cut_any)
    return item, bound


def _array_text(values: Iterable[int | str]) -> str:
    """Integers or plain names (no quoting needed) in PostgreSQL's array text form. The driver
    quotes a list parameter in Python, several times slower than this for a page of ids."""
    return "{" + ",".join(map(str, values)) + "}"


_LOOKBACK_TOOLS_ARRAY = _array_text(LOOKBACK_TOOL_NAMES)


def _load_tool_calls(
    cursor: CursorWrapper, message_ids: list[int]
) -> tuple[list[dict[str, Any]], bool]:
    """The allowlisted tool calls of `message_ids`, within count and byte caps."""
    rows = fetch(
        cursor,
        TOOL_CALLS_SQL,
        {
            "messages": _array_text(message_ids),
            "lookback_tools": _LOOKBACK_TOOLS_ARRAY,
            "input_chars": TOOL_INPUT_LOAD_CHARS + 1,
            "field_chars": TOOL_CALL_MAX_BYTES + 1,
            "count": TOOL_CALLS_MAX + 1,
        },
    )
    built = [_tool_call_item(row) for row in rows[:TOOL_CALLS_MAX]]
    items = [item for item, _ in built]
    dropped = False
    # Serialize the list only when the items' bounds do not already show that it fits.
    if sum(bound for _, bound in built) + len(built) - 1 > TOOL_CALLS_MAX_BYTES - 2:
        items, dropped = take_within(items, TOOL_CALLS_MAX_BYTES - 2)
    cut = len(rows) > TOOL_CALLS_MAX or dropped or any(item["truncated"] for item in items)
    return items, cut


# A message item's serialized bytes, but for its role, timestamp (both plain ASCII) and content.
_MESSAGE_ITEM_BYTES = json_bytes(
    {"message_id": MESSAGE_ID_MAX, "role": "", "created_at": "", "content": "", "truncated": False}
)


def _read_bound(response: dict[str, Any]) -> int:
    """An upper bound of the read response's serialized size that serializes neither the
    message contents nor the tool calls (most responses are far below their cap). Tool calls
    count as their whole budget: `_load_tool_calls` keeps their list within it."""
    messages = response["messages"]
    rest = {**response, "messages": []}
    tools_bound = 0
    if "tool_calls" in response:
        rest["tool_calls"] = []
        tools_bound = TOOL_CALLS_MAX_BYTES - 2
    return (
        json_bytes(rest)
        + tools_bound
        + max(len(messages) - 1, 0)
        + sum(
            _MESSAGE_ITEM_BYTES
            + len(item["role"])
            + len(item["created_at"])
            + JSON_CHAR_MAX_BYTES * len(item["content"])
            for item in messages
        )
    )


def _fit(
    response: dict[str, Any],
    items: dict[int, dict[str, Any]],
    kept: list[int],
    window: _Window,
) -> dict[str, Any]:
    """Fill in `response`'s messages and flags; while it would pass its cap, drop tool calls
    first, then the kept messages farthest from the anchor (the end of `kept`)."""
    tool_calls = response.get("tool_calls", [])
    while True:
        response["messages"] = [items[i] for i in sorted(kept)]
        response["has_more_before"] = window.has_more_before or min(kept, default=0) > 0
        response["has_more_after"] = (
            window.has_more_after or max(kept, default=-1) < len(window.rows) - 1
        )
        if _read_bound(response) <= READ_RESPONSE_MAX_BYTES:
            return response
        if json_bytes(response) <= READ_RESPONSE_MAX_BYTES:
            return response
        response["truncated"] = True
        if tool_calls:
            tool_calls.pop()
        else:
            kept.pop()


def read_thread_messages(
    uid: int | str,
    thread_id: str,
    *,
    message_id: int | None = None,
    limit: int = 20,
    include_tools: bool = False,
) -> dict[str, Any]:
    """Visible messages of one visible thread: the latest, or a window around `message_id`.

    Two SQL queries (thread with anchor, then messages), a third for tool calls only with
    `include_tools`. Contents are cut to their budgets; when the response would pass its cap,
    tool calls go first, then the messages farthest from the anchor.
    """
    owner = check_uid(uid)
    thread_id = check_text(thread_id, "thread_id")
    anchor_id = check_message_id(message_id)
    limit = check_limit(limit, READ_LIMIT_MAX)
    if not isinstance(include_tools, bool):
        raise HistoryQueryError("include_tools must be a boolean")

    with connection.cursor() as cursor:
        thread, anchor_at = _load_thread(cursor, owner, thread_id, anchor_id)
        window = _load_window(cursor, thread.pk, anchor_id, anchor_at, limit)
        items, kept, truncated = _budget_contents(window)
        tool_calls = None
        if include_tools:
            tool_calls = _load_tool_calls(cursor, [window.rows[i][0] for i in kept])
    title, title_cut = cut_title(thread.title_head)
    response: dict[str, Any] = {
        "thread_id": thread_id,
        "title": title,
        "messages": [],
        "has_more_before": False,
        "has_more_after": False,
        "truncated": truncated or title_cut,
    }
    if tool_calls is not None:
        response["tool_calls"], tools_cut = tool_calls
        response["truncated"] = response["truncated"] or tools_cut
    return _fit(response, items, kept, window)
