"""Cost of the staff admin pages over large messages: this app's lean admin beside a plain one.

The plain `ModelAdmin` is what registering `Message` with defaults gives: it loads every column
and renders whole contents. Both render the same rows in the same run; the ratio is the point.

Run: .venv/bin/python bench/admin_pages.py   (BENCH_DATABASE_URL picks the database)
Works in a rolled-back transaction: it leaves nothing behind.
"""

import statistics
import time

from benchenv import setup_django

setup_django()

from django.contrib import admin  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.test import RequestFactory  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402

from conversations.admin import MessageAdmin  # noqa: E402
from conversations.models import Conversation, Message  # noqa: E402

ROUNDS = 5
ROWS = 100
ROW_CONTENT_BYTES = 64 * 1024
HUGE_CONTENT_BYTES = 8 * 1024 * 1024


class _PlainMessageAdmin(admin.ModelAdmin):
    list_display = ("id", "conversation", "role", "message_type", "content", "created_at")


class _Rollback(Exception):
    pass


def _seed() -> tuple[object, Message]:
    User = get_user_model()
    staff = User.objects.create(username=f"bench-staff-{time.time_ns()}", is_staff=True)
    staff.is_superuser = True
    thread = Conversation.objects.create(
        thread_id=f"bench-{time.time_ns()}", user=staff, title="t" * 4096
    )
    Message.objects.bulk_create(
        Message(conversation=thread, role="user", content="é" * (ROW_CONTENT_BYTES // 2))
        for _ in range(ROWS)
    )
    huge = Message.objects.create(
        conversation=thread, role="assistant", content="x" * HUGE_CONTENT_BYTES
    )
    return staff, huge


def _measure(view, request) -> tuple[float, int, int]:
    """Median milliseconds, response bytes and query count of rendering one admin page."""
    times = []
    for _ in range(ROUNDS):
        with CaptureQueriesContext(connection) as queries:
            start = time.perf_counter()
            response = view(request)
            response.render()
            times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), len(response.content), len(queries)


def main() -> None:
    site = admin.AdminSite(name="bench")
    lean = MessageAdmin(Message, site)
    plain = _PlainMessageAdmin(Message, site)
    factory = RequestFactory()
    rows = []
    try:
        with transaction.atomic():
            staff, huge = _seed()
            pages = [
                (f"changelist, {ROWS} rows of 64 KiB", "/", lambda a: a.changelist_view),
                (
                    "change page, one 8 MiB message",
                    f"/{huge.pk}/change/",
                    lambda a: lambda request: a.change_view(request, str(huge.pk)),
                ),
            ]
            for label, path, view_of in pages:
                request = factory.get(path)
                request.user = staff
                plain_result = _measure(view_of(plain), request)
                lean_result = _measure(view_of(lean), request)
                rows.append((label, plain_result, lean_result))
            raise _Rollback
    except _Rollback:
        pass
    print(
        f"{'page':34} {'plain ms':>9} {'lean ms':>8} {'ratio':>6} "
        f"{'plain KiB':>10} {'lean KiB':>9} {'queries plain/lean':>19}"
    )
    for label, (p_ms, p_bytes, p_q), (l_ms, l_bytes, l_q) in rows:
        print(
            f"{label:34} {p_ms:9.1f} {l_ms:8.1f} {p_ms / l_ms:5.1f}x "
            f"{p_bytes / 1024:10.0f} {l_bytes / 1024:9.0f} {f'{p_q}/{l_q}':>19}"
        )


if __name__ == "__main__":
    main()
