"""A user's conversation rows for their export and for erasure's report: every thread with its
messages and tool calls, the pending approvals, and how many rows of each kind there are.

The export streams JSON built by PostgreSQL from server-side cursors, so memory stays bounded
whatever the history's length; the counts are one statement, set-wise.
"""

from typing import IO

import psycopg
from django.db import connection

from conversations.models import AgentRun, Conversation, Message, ToolCall
from conversations.selectors.approvals import pending_approvals
from conversations.utils.connections import server_cursor

# Rows fetched per round trip from an export's server-side cursors.
EXPORT_FETCH_ROWS = 2000


def _threads_export_sql() -> str:
    """Every thread of a user, whatever its status, source or parent, as JSON built by
    PostgreSQL, in id order."""
    threads = Conversation._meta.db_table
    return f"""
SELECT c.id, json_build_object(
    'thread_id', c.thread_id, 'title', c.title, 'status', c.status, 'source', c.source,
    'parent_thread_id', p.thread_id, 'metadata', c.metadata,
    'created_at', c.created_at, 'updated_at', c.updated_at)::text
FROM "{threads}" c
LEFT JOIN "{threads}" p ON p.id = c.parent_id
WHERE c.user_id = %s
ORDER BY c.id
"""


def _messages_export_sql() -> str:
    """Every message of a user's threads in thread order, each with its tool calls."""
    return f"""
SELECT m.conversation_id, json_build_object(
    'id', m.id, 'role', m.role, 'message_type', m.message_type, 'content', m.content,
    'image_content', m.image_content, 'attachments', m.attachments, 'feedback', m.feedback,
    'metadata', m.metadata, 'created_at', m.created_at,
    'tool_calls', COALESCE((
        SELECT json_agg(json_build_object(
            'tool_call_id', t.tool_call_id, 'name', t.name, 'input', t.input,
            'output', t.output, 'status', t.status, 'error', t.error,
            'metadata', t.metadata, 'created_at', t.created_at) ORDER BY t.created_at, t.id)
        FROM "{ToolCall._meta.db_table}" t WHERE t.message_id = m.id), '[]'::json))::text
FROM "{Message._meta.db_table}" m
JOIN "{Conversation._meta.db_table}" c ON c.id = m.conversation_id
WHERE c.user_id = %s
ORDER BY m.conversation_id, m.created_at, m.id
"""


def write_user_threads(out: IO[bytes], pg: psycopg.Connection, *, user_id: int) -> None:
    """Write `user_id`'s threads as comma-separated JSON objects, each with its "messages"
    list, read on `pg` inside its transaction (the caller's snapshot).

    A merge of two ordered server-side cursors: memory stays bounded whatever the history's
    length.
    """
    with (
        server_cursor(
            pg, "export_threads", _threads_export_sql(), [user_id], fetch_rows=EXPORT_FETCH_ROWS
        ) as threads,
        server_cursor(
            pg, "export_messages", _messages_export_sql(), [user_id], fetch_rows=EXPORT_FETCH_ROWS
        ) as messages,
    ):
        pending = next(messages, None)
        for index, (thread_pk, thread_json) in enumerate(threads):
            if index:
                out.write(b", ")
            # The thread's own object, reopened to append its "messages" list.
            out.write(thread_json[:-1].encode("utf-8") + b', "messages" : [')
            first = True
            while pending is not None and pending[0] == thread_pk:
                if not first:
                    out.write(b", ")
                out.write(pending[1].encode("utf-8"))
                first = False
                pending = next(messages, None)
            out.write(b"]}")


def write_user_pending_approvals(out: IO[bytes], pg: psycopg.Connection, *, user_id: int) -> None:
    """Write `user_id`'s memory writes waiting for a decision as comma-separated JSON objects
    `{"thread_id", "run_id", "tool_call_id", "content", "replaces", "created_at"}`, by
    `pending_approvals`' own rule (its query, run on `pg` inside the caller's snapshot)."""
    sql, params = pending_approvals(user_id=user_id).query.sql_with_params()
    rows = pg.execute(
        "SELECT json_build_object('thread_id', q.thread_id, 'run_id', q.run_id, "
        "'tool_call_id', q.tool_call_id, 'content', q.content, 'replaces', q.replaces, "
        f"'created_at', q.created_at)::text FROM ({sql}) q",
        params,
    )
    for index, (row,) in enumerate(rows):
        if index:
            out.write(b", ")
        out.write(row.encode("utf-8"))


def count_user_conversations(*, user_ids: list[int]) -> dict[str, int]:
    """How many threads, messages, tool calls and runs these users have: one statement,
    counted set-wise, never listed."""
    placeholders = ", ".join(["%s"] * len(user_ids)) or "NULL"
    threads = Conversation._meta.db_table
    messages = Message._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT
              (SELECT count(*) FROM "{threads}" WHERE user_id IN ({placeholders})),
              (SELECT count(*) FROM "{messages}" m JOIN "{threads}" c
                 ON c.id = m.conversation_id WHERE c.user_id IN ({placeholders})),
              (SELECT count(*) FROM "{ToolCall._meta.db_table}" t
                 JOIN "{messages}" m ON m.id = t.message_id
                 JOIN "{threads}" c ON c.id = m.conversation_id
                 WHERE c.user_id IN ({placeholders})),
              (SELECT count(*) FROM "{AgentRun._meta.db_table}" WHERE user_id IN ({placeholders}))
            """,
            list(user_ids) * 4,
        )
        thread_count, message_count, tool_call_count, run_count = cursor.fetchone()
    return {
        "threads": thread_count,
        "messages": message_count,
        "tool_calls": tool_call_count,
        "runs": run_count,
    }
