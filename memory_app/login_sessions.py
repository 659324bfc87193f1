"""A user's login sessions, recorded at each login so erasure can delete them by key.

A leaf: it knows only the `LoginSession` model and Django's session table. Recording happens
on Django's `user_logged_in` signal (the login page, the admin's login, `Client.login`), whose
receiver only calls `record_login_session`; erasure calls `delete_user_sessions`, which finds
the sessions by the keys recorded here and never reads or scans the session table's data.
"""

from typing import Any

from django.contrib.sessions.backends.db import SessionStore as DatabaseSessionStore
from django.contrib.sessions.models import Session
from django.db import connection

from memory_app.models import LoginSession


def record_login_session(*, user: Any, session_key: str) -> None:
    """Remember that `session_key` is a session of `user` (one INSERT; a key already recorded
    is taken over by `user`). The session row must exist: the database backends save it when
    login cycles the key, before the signal is sent."""
    LoginSession.objects.bulk_create(
        [LoginSession(session_id=session_key, user_id=user.pk)],
        update_conflicts=True,
        unique_fields=["session"],
        update_fields=["user"],
    )


def delete_user_sessions(*, user_id: int) -> int:
    """Delete every recorded session of `user_id`, and the records, in one statement; the
    number of sessions deleted. Use inside the caller's transaction."""
    sql = (
        f"WITH gone AS (DELETE FROM {LoginSession._meta.db_table} WHERE user_id = %s "
        f"RETURNING session_id) "
        f"DELETE FROM {Session._meta.db_table} WHERE session_key IN (SELECT session_id FROM gone)"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [user_id])
        return cursor.rowcount


def recorded_on_login(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    """`user_logged_in` receiver: record the session the login just opened.

    A login over another user's session flushes it, leaving no key until the response saves
    the session: it is saved here, so the key recorded is the one the browser gets. Only
    sessions stored in the database (`db`, `cached_db`) have a row to delete; with another
    session engine there is nothing of the session on our side to erase.
    """
    session = getattr(request, "session", None)
    if not isinstance(session, DatabaseSessionStore):
        return
    if session.session_key is None:
        session.save()
    record_login_session(user=user, session_key=session.session_key)
