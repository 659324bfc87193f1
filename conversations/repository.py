"""History lookback: the agent's bounded view of its own user's past conversations.

The one owner of history field choice, per-level byte budgets and truncation flags. Thread
visibility is `VISIBLE_THREAD` (what `Conversation.objects.visible_to` applies), message
visibility `VISIBLE_MESSAGE`; both are compiled by the ORM into the SQL below, once, so a call
costs little more than its bare SQL, and only allowlisted columns are ever selected. Every
budget is counted on UTF-8 bytes; response caps on `to_json(response)`, the form tools send.
"""

import functools
import json
import math
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.db import connection, models

from conversations.models import (
    VISIBLE_MESSAGE,
    VISIBLE_THREAD,
    CjkBigrams,
    Conversation,
    Message,
    ToolCall,
)
from yuxi_site.utils.ids import parse_uid
from yuxi_site.utils.string_utils import is_storable_text, truncate_utf8

QUERY_MAX_CHARS = 256
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

# Larger ids cannot exist (bigint primary keys).
MESSAGE_ID_MAX = 2**63 - 1
THREAD_ID_MAX_CHARS = Conversation._meta.get_field("thread_id").max_length

NOT_FOUND_MESSAGE = "no such thread or message"


class HistoryNotFound(LookupError):
    """The thread or anchor is unknown or not visible to the user (indistinguishably)."""


class HistoryQueryError(ValueError):
    """An argument is out of the contract's range."""


MESSAGE = Message._meta.db_table
CONVERSATION = Conversation._meta.db_table
TOOL_CALL = ToolCall._meta.db_table


def _where(model: type[models.Model], condition: models.Q) -> tuple[str, list[Any]]:
    """`condition` as SQL on `model`'s table (named in full), with its parameters."""
    query = model.objects.filter(condition).query
    sql, params = query.where.as_sql(query.get_compiler(connection=connection), connection)
    return sql, list(params)


@functools.cache
def _visibility() -> tuple[str, list[Any], str, list[Any]]:
    """SQL and parameters of VISIBLE_THREAD and VISIBLE_MESSAGE, compiled once."""
    return (*_where(Conversation, VISIBLE_THREAD), *_where(Message, VISIBLE_MESSAGE))


@functools.cache
def _search_sql(pair: bool) -> str:
    """Parameters, in order: query, query, visibility, owner, owner, LIKE pattern (or the
    pair), limit."""
    thread_sql, _, message_sql, _ = _visibility()
    content = f'"{MESSAGE}"."content"'
    match_at = "STRPOS(UPPER(hit.content), UPPER(%s))"
    if pair:
        match = f"{CjkBigrams.function}(UPPER({content})) @> ARRAY[%s]"
    else:
        match = f"UPPER({content}) LIKE UPPER(%s)"
    # The outer query cuts snippets for the kept hits only: select-list expressions of the
    # inner one are computed for every candidate before the sort.
    return f"""
        SELECT hit.thread_id, LEFT(hit.title, {TITLE_MAX_BYTES + 1}), hit.id, hit.role,
               hit.created_at,
               SUBSTRING(hit.content, GREATEST({match_at} - {SNIPPET_LEAD_BYTES}, 1),
                         {SNIPPET_LEAD_BYTES + SNIPPET_MAX_BYTES}),
               {match_at}, LENGTH(hit.content)
        FROM (
            SELECT "{CONVERSATION}"."thread_id", "{CONVERSATION}"."title", "{MESSAGE}"."id",
                   "{MESSAGE}"."role", "{MESSAGE}"."created_at", {content}
            FROM "{MESSAGE}" INNER JOIN "{CONVERSATION}"
                ON "{MESSAGE}"."conversation_id" = "{CONVERSATION}"."id"
            WHERE {message_sql} AND {thread_sql}
              AND "{MESSAGE}"."owner_id" = %s AND "{CONVERSATION}"."user_id" = %s
              AND {match}
            ORDER BY "{MESSAGE}"."created_at" DESC, "{MESSAGE}"."id" DESC
            LIMIT %s
        ) hit
        ORDER BY hit.created_at DESC, hit.id DESC
    """


@functools.cache
def _read_sqls() -> dict[str, str]:
    """The read queries; parameters in the order their placeholders appear."""
    thread_sql, _, message_sql, _ = _visibility()
    columns = (
        f'"{MESSAGE}"."id", "{MESSAGE}"."role", "{MESSAGE}"."created_at", '
        f'LEFT("{MESSAGE}"."content", {CONTENT_MAX_BYTES + 1})'
    )
    in_thread = f'{message_sql} AND "{MESSAGE}"."conversation_id" = %s'
    order = f'"{MESSAGE}"."created_at" {{0}}, "{MESSAGE}"."id" {{0}}'
    key = f'("{MESSAGE}"."created_at", "{MESSAGE}"."id")'
    return {
        # visible message params, anchor id, visible thread params, owner, thread id
        "thread": f"""
            SELECT "{CONVERSATION}"."id", LEFT("{CONVERSATION}"."title", {TITLE_MAX_BYTES + 1}),
                   (SELECT "{MESSAGE}"."created_at" FROM "{MESSAGE}"
                    WHERE {message_sql}
                      AND "{MESSAGE}"."conversation_id" = "{CONVERSATION}"."id"
                      AND "{MESSAGE}"."id" = %s)
            FROM "{CONVERSATION}"
            WHERE {thread_sql} AND "{CONVERSATION}"."user_id" = %s
              AND "{CONVERSATION}"."thread_id" = %s
        """,
        # visible message params, conversation, limit
        "latest": f"""
            SELECT {columns} FROM "{MESSAGE}" WHERE {in_thread}
            ORDER BY {order.format("DESC")} LIMIT %s
        """,
        # twice: visible message params, conversation, anchor created_at, anchor id, limit
        "around": f"""
            (SELECT {columns}, TRUE FROM "{MESSAGE}" WHERE {in_thread} AND {key} <= (%s, %s)
             ORDER BY {order.format("DESC")} LIMIT %s)
            UNION ALL
            (SELECT {columns}, FALSE FROM "{MESSAGE}" WHERE {in_thread} AND {key} > (%s, %s)
             ORDER BY {order.format("ASC")} LIMIT %s)
        """,
        # message ids
        "tool_calls": f"""
            SELECT t."tool_call_id", t."message_id", t."name", t."status",
                   LEFT(t."input"::text, {TOOL_INPUT_LOAD_CHARS + 1}),
                   LEFT(t."output", {TOOL_CALL_MAX_BYTES + 1}),
                   LEFT(t."error", {TOOL_CALL_MAX_BYTES + 1})
            FROM "{TOOL_CALL}" t INNER JOIN "{MESSAGE}" m ON m."id" = t."message_id"
            WHERE t."message_id" = ANY(%s)
            ORDER BY m."created_at", t."message_id", t."created_at", t."id"
            LIMIT {TOOL_CALLS_MAX + 1}
        """,
    }


def _fetch(sql: str, params: list[Any]) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def to_json(response: dict[str, Any]) -> str:
    """The serialized form every byte budget is counted on."""
    return json.dumps(response, ensure_ascii=False, separators=(",", ":"))


def _json_bytes(value: Any) -> int:
    return len(to_json(value).encode("utf-8"))


def _escaped_bytes(text: str) -> int:
    """Bytes of `text` as a JSON string literal, quotes excluded."""
    return _json_bytes(text) - 2


def _cut_serialized(text: str, max_bytes: int) -> tuple[str, bool]:
    """Longest prefix of `text` whose JSON-escaped form fits `max_bytes` (quotes excluded)."""
    head, cut = truncate_utf8(text, max_bytes)
    if _escaped_bytes(head) <= max_bytes:
        return head, cut
    low, high = 0, len(head)  # head[:low] fits, head[:high] does not
    while high - low > 1:
        middle = (low + high) // 2
        if _escaped_bytes(head[:middle]) <= max_bytes:
            low = middle
        else:
            high = middle
    return head[:low], True


def _take_within(items: list[dict[str, Any]], max_bytes: int) -> tuple[list[dict[str, Any]], bool]:
    """The leading `items` whose serialized list body fits `max_bytes`; whether any was left."""
    size = 0
    for count, item in enumerate(items):
        size += _json_bytes(item) + (1 if count else 0)
        if size > max_bytes:
            return items[:count], True
    return items, False


def _uid(value: object) -> int:
    uid = parse_uid(value)
    if uid is None:
        raise HistoryQueryError("the user id is malformed")
    return uid


def _limit(value: object, maximum: int) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= maximum:
        return value
    raise HistoryQueryError(f"limit must be an integer from 1 to {maximum}")


def _text(value: object, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise HistoryQueryError(f"{name} must be a non-empty string")
    if not is_storable_text(value):
        raise HistoryQueryError(f"{name} must be valid text without NUL characters")
    return value


def _is_cjk_pair(text: str) -> bool:
    """Whether `text` is two caseless CJK-range characters, one element of `CjkBigrams`."""
    return (
        len(text) == 2
        and all(ord(char) >= 0x2E80 for char in text)
        and text.upper() == text == text.lower()
    )


def _title(head: str) -> tuple[str, bool]:
    return truncate_utf8(head, TITLE_MAX_BYTES)


def _timestamp(value: datetime) -> str:
    return value.isoformat()


def _snippet(window: str, match_offset: int) -> tuple[str, int]:
    """Up to SNIPPET_MAX_BYTES of `window` around the match; returns it and its start offset."""
    lead, _ = truncate_utf8(window[:match_offset][::-1], SNIPPET_LEAD_BYTES)
    lead = lead[::-1]  # reversed code points: the cut keeps the end nearest the match
    body, _ = truncate_utf8(window[match_offset:], SNIPPET_MAX_BYTES - len(lead.encode("utf-8")))
    return lead + body, match_offset - len(lead)


def search_thread_messages(uid: int | str, query: str, *, limit: int = 5) -> dict[str, Any]:
    """Newest visible messages of `uid` containing `query` (case-insensitive, literal).

    One SQL query; it never touches ToolCall. Hits are cut to snippets around the match, and
    kept newest first while the serialized response stays within its cap.
    """
    owner = _uid(uid)
    query = _text(query, "query")
    if len(query) > QUERY_MAX_CHARS:
        raise HistoryQueryError(f"query must be at most {QUERY_MAX_CHARS} characters")
    limit = _limit(limit, SEARCH_LIMIT_MAX)

    # Trigrams cannot serve a 2-character query; for a CJK pair the bigram index can, and
    # containing the pair is the substring match itself (and is estimated as such, so a
    # frequent pair walks the user's newest messages instead).
    pair = _is_cjk_pair(query)
    _, thread_params, _, message_params = _visibility()
    match = query if pair else f"%{connection.ops.prep_for_like_query(query)}%"
    params = [query, query, *message_params, *thread_params, owner, owner, match, limit]
    rows = _fetch(_search_sql(pair), params)

    hits: list[dict[str, Any]] = []
    for thread_id, title_head, message_id, role, created_at, window, match_at, chars in rows:
        window_at = max(match_at - SNIPPET_LEAD_BYTES, 1)
        snippet, offset = _snippet(window, match_at - window_at)
        first = window_at + offset  # 1-based position of the snippet in the content
        title, title_cut = _title(title_head)
        hit_cut = title_cut or first > 1 or first + len(snippet) - 1 < chars
        hit = {
            "thread_id": thread_id,
            "title": title,
            "message_id": message_id,
            "role": role,
            "created_at": _timestamp(created_at),
            "snippet": snippet,
            "truncated": hit_cut,
        }
        hits.append(hit)
    empty = _json_bytes({"results": [], "truncated": False})
    results, dropped = _take_within(hits, SEARCH_RESPONSE_MAX_BYTES - empty)
    return {"results": results, "truncated": dropped or any(h["truncated"] for h in results)}


def _message_id(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    raise HistoryQueryError("message_id must be a positive integer")


def _window(
    before: list[tuple], after: list[tuple], limit: int
) -> tuple[list[tuple], int, bool, bool]:
    """Pick `limit` rows around the anchor, which is `before[0]`.

    `before` runs backwards from the anchor and `after` forwards from it, each up to
    `limit + 1` rows. Returns the rows in order, the anchor's index and the has_more flags.
    """
    want_before = math.ceil(limit / 2)
    want_after = limit - want_before
    if len(after) < want_after:
        want_before = min(len(before), limit - len(after))
        want_after = len(after)
    elif len(before) < want_before:
        want_after = min(len(after), limit - len(before))
        want_before = len(before)
    rows = before[:want_before][::-1] + after[:want_after]
    return rows, want_before - 1, len(before) > want_before, len(after) > want_after


def _tool_call_item(row: tuple) -> dict[str, Any]:
    """One allowlisted tool call, at most TOOL_CALL_MAX_BYTES serialized."""
    call_id, message_id, name, status, input_head, output, error = row
    call_id, id_cut = _cut_serialized(call_id, TOOL_LABEL_MAX_BYTES)
    name, name_cut = _cut_serialized(name, TOOL_LABEL_MAX_BYTES)
    input_whole = len(input_head) <= TOOL_INPUT_LOAD_CHARS
    input_value: Any = json.loads(input_head) if input_whole else input_head
    item: dict[str, Any] = {
        "id": call_id,
        "message_id": message_id,
        "name": name,
        "status": status,
        "input": "",
        "output": "",
        "error": "",
        "truncated": False,
    }
    # What is left once the three free-form fields are empty strings ("" is 2 bytes each).
    available = TOOL_CALL_MAX_BYTES - _json_bytes(item) + 6
    needs = {
        "input": _json_bytes(input_value),
        "output": _json_bytes(output),
        "error": _json_bytes(error),
    }
    values: dict[str, Any] = {"input": input_value, "output": output, "error": error}
    # An input that must be cut becomes cut JSON text.
    texts = {**values, "input": to_json(input_value) if input_whole else input_head}
    cut_any = id_cut or name_cut or not input_whole
    if cut_any or sum(needs.values()) > available:
        # Water-filling: the smaller fields stay whole, the larger share what remains.
        left = len(needs)
        for field in sorted(needs, key=needs.__getitem__):
            share = available // left
            left -= 1
            whole = needs[field] <= share and not (field == "input" and not input_whole)
            if whole:
                available -= needs[field]
                continue
            values[field], _ = _cut_serialized(texts[field], share - 2)
            available -= _json_bytes(values[field])
            cut_any = True
    item.update(values, truncated=cut_any)
    return item


def _tool_calls(message_ids: Iterable[int]) -> tuple[list[dict[str, Any]], bool]:
    """The allowlisted tool calls of `message_ids`, within count and byte caps."""
    rows = _fetch(_read_sqls()["tool_calls"], [list(message_ids)])
    items, dropped = _take_within(
        [_tool_call_item(row) for row in rows[:TOOL_CALLS_MAX]], TOOL_CALLS_MAX_BYTES - 2
    )
    cut = len(rows) > TOOL_CALLS_MAX or dropped or any(item["truncated"] for item in items)
    return items, cut


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
    owner = _uid(uid)
    thread_id = _text(thread_id, "thread_id")
    anchor_id = _message_id(message_id)
    limit = _limit(limit, READ_LIMIT_MAX)
    if not isinstance(include_tools, bool):
        raise HistoryQueryError("include_tools must be a boolean")
    if len(thread_id) > THREAD_ID_MAX_CHARS or (anchor_id or 0) > MESSAGE_ID_MAX:
        raise HistoryNotFound(NOT_FOUND_MESSAGE)

    _, thread_params, _, message_params = _visibility()
    found = _fetch(
        _read_sqls()["thread"], [*message_params, anchor_id, *thread_params, owner, thread_id]
    )
    if not found or (anchor_id is not None and found[0][2] is None):
        raise HistoryNotFound(NOT_FOUND_MESSAGE)
    conversation_pk, title_head, anchor_at = found[0]

    if anchor_id is None:
        before = _fetch(_read_sqls()["latest"], [*message_params, conversation_pk, limit + 1])
        after: list[tuple] = []
    else:
        side = [*message_params, conversation_pk, anchor_at, anchor_id, limit + 1]
        rows = _fetch(_read_sqls()["around"], [*side, *side])
        before = sorted((r for r in rows if r[4]), key=lambda r: (r[2], r[0]), reverse=True)
        after = sorted((r for r in rows if not r[4]), key=lambda r: (r[2], r[0]))
    window, anchor, has_more_before, has_more_after = _window(before, after, limit)
    if anchor_id is None:
        anchor = len(window) - 1  # the latest message stands in for the anchor

    # Nearest the anchor first; at equal distance the earlier message.
    priority = sorted(range(len(window)), key=lambda i: (abs(i - anchor), i))
    items: dict[int, dict[str, Any]] = {}
    remaining = CONTENTS_MAX_BYTES
    truncated = False
    for index in priority:
        if remaining == 0:
            truncated = True
            break
        message_pk, role, created_at, head = window[index][:4]
        content, cut = truncate_utf8(head, min(CONTENT_MAX_BYTES, remaining))
        remaining -= len(content.encode("utf-8"))
        truncated = truncated or cut
        items[index] = {
            "message_id": message_pk,
            "role": role,
            "created_at": _timestamp(created_at),
            "content": content,
            "truncated": cut,
        }
    kept = [i for i in priority if i in items]

    title, title_cut = _title(title_head)
    response: dict[str, Any] = {
        "thread_id": thread_id,
        "title": title,
        "messages": [],
        "has_more_before": False,
        "has_more_after": False,
        "truncated": False,
    }
    tool_calls: list[dict[str, Any]] = []
    if include_tools:
        tool_calls, tools_cut = _tool_calls(window[i][0] for i in kept)
        truncated = truncated or tools_cut
        response["tool_calls"] = tool_calls

    def settle() -> int:
        response["messages"] = [items[i] for i in sorted(kept)]
        response["has_more_before"] = has_more_before or min(kept, default=0) > 0
        response["has_more_after"] = has_more_after or max(kept, default=-1) < len(window) - 1
        response["truncated"] = truncated or title_cut
        return _json_bytes(response)

    while settle() > READ_RESPONSE_MAX_BYTES:
        truncated = True
        if tool_calls:
            tool_calls.pop()
        else:
            kept.pop()
    return response
