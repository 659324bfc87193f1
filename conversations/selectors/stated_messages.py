"""The user's own messages a memory write is checked against: the message of the turn that
runs, and those that may state a credential the write must not repeat.

Each is one static statement on the owner's own index, so a write's check costs the same
however many messages other users have.
"""

from django.db import connection

from conversations.models import Message

# Which of a user's own messages may state a credential a memory write must not repeat: those
# of the last `STATED_MESSAGES_DAYS` days, the newest `STATED_MESSAGES_MAX` at most.
STATED_MESSAGES_DAYS = 30
STATED_MESSAGES_MAX = 1000


# The owner's newest text messages first (`message_owner_recent_idx`), however many other
# users' messages there are; one static statement, no queryset built per write.
_STATED_MESSAGES_SQL = f"""
SELECT content FROM {Message._meta.db_table}
WHERE id IN (
    SELECT id FROM {Message._meta.db_table}
    WHERE owner_id = %s AND message_type = %s AND role = %s
      AND created_at >= clock_timestamp() - make_interval(days => %s)
    ORDER BY created_at DESC, id DESC
    LIMIT %s
)
AND content ILIKE ANY(%s)
"""


def _like_escaped(text: str) -> str:
    """`text` matched literally by LIKE (backslash is its escape)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def user_messages_containing(*, user_id: int, needles: list[str]) -> list[str]:
    """The text of each of the user's own messages (role `user`, any thread), among their
    newest `STATED_MESSAGES_MAX` of the last `STATED_MESSAGES_DAYS` days by the database's
    clock, that contains one of `needles` (literally, case-insensitively): the few a
    credential the user stated anywhere could be in, for a memory write to be checked
    against. Empty `needles`: none."""
    if not needles:
        return []
    params = [
        user_id,
        Message.Type.TEXT,
        Message.Role.USER,
        STATED_MESSAGES_DAYS,
        STATED_MESSAGES_MAX,
        [f"%{_like_escaped(needle)}%" for needle in needles],
    ]
    with connection.cursor() as cursor:
        cursor.execute(_STATED_MESSAGES_SQL, params)
        return [content for (content,) in cursor.fetchall()]


_TURN_MESSAGE_SQL = f"""
SELECT content FROM {Message._meta.db_table}
WHERE conversation_id = %s AND role = %s AND message_type = %s
ORDER BY created_at DESC, id DESC
LIMIT 1
"""


def turn_message(*, conversation_id: int) -> str | None:
    """The text of the thread's newest user message: the message of the turn running in it (a
    resumed turn's too: a new message would have declined its approval first); None when the
    thread has none. One static statement on the thread's own index."""
    with connection.cursor() as cursor:
        cursor.execute(_TURN_MESSAGE_SQL, [conversation_id, Message.Role.USER, Message.Type.TEXT])
        row = cursor.fetchone()
    return None if row is None else row[0]
