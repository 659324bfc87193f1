"""Export and erasure of a user with 100,000 messages: peak memory, size and time, side by side.

Run: .venv/bin/python bench/user_lifecycle.py [--messages N]   (BENCH_DATABASE_URL picks the db)

Seeds one user (threads of every status and source, tool calls, runs, ledger rows) and a
bystander. The export runs in a child process whose peak RSS is printed beside that of a child
that only starts Django, and beside the document's size; the document is then parsed and
checked. The erasure is timed beside Django's own ORM delete of an identical user (what the
admin did before), and checked: every row gone, workspace gone, the bystander untouched.
"""

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchenv import setup_django

MESSAGES_PER_THREAD = 100


def _child(mode: str, user_id: int, root: str, out: str) -> None:
    """In a fresh process: start Django and (for `export`) write the export to `out`."""
    setup_django()
    from django.conf import settings
    from django.contrib.auth import get_user_model

    import memory_app.selectors as selectors

    settings.WORKSPACE_ROOT = Path(root)
    started = time.perf_counter()
    if mode == "export":
        user = get_user_model().objects.get(pk=user_id)
        with open(out, "wb") as handle:
            for chunk in selectors.export_user_data(user=user):
                handle.write(chunk)
    elapsed = time.perf_counter() - started
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"peak_kib": peak_kib, "seconds": elapsed}))


def _seed(username: str, messages: int) -> int:
    """One user's history, set-wise in SQL: threads of every status and source, tool calls."""
    from django.contrib.auth import get_user_model
    from django.db import connection

    from memory_app.models import UserConfig

    user = get_user_model().objects.create(username=username)
    UserConfig.objects.create(user=user, enable_memory=True)
    threads = max(1, messages // MESSAGES_PER_THREAD)
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO conversations_conversation
                (thread_id, user_id, title, status, source, metadata, created_at, updated_at)
            SELECT %s || '-' || i, %s, 'thread ' || i,
                   (ARRAY['active', 'archived', 'deleted'])[1 + i %% 3],
                   (ARRAY['chat', 'api', 'agent_call', 'agent_evaluation'])[1 + i %% 4],
                   '{}', clock_timestamp(), clock_timestamp()
            FROM generate_series(1, %s) i
            """,
            [username, user.pk, threads],
        )
        cursor.execute(
            """
            INSERT INTO conversations_message
                (conversation_id, role, message_type, content, attachments, feedback, metadata,
                 created_at)
            SELECT c.id, (ARRAY['user', 'assistant'])[1 + n %% 2], 'text',
                   repeat('message ' || n || ' about oolong tea and 東京 ', 4), '[]', '{}', '{}',
                   clock_timestamp()
            FROM conversations_conversation c, generate_series(1, %s) n
            WHERE c.user_id = %s
            """,
            [MESSAGES_PER_THREAD, user.pk],
        )
        cursor.execute(
            """
            INSERT INTO conversations_toolcall
                (message_id, tool_call_id, name, input, output, status, error, metadata,
                 created_at)
            SELECT m.id, 'call_' || m.id, 'remember_memory', '{"content": "a fact"}',
                   '{"status": "added"}', 'success', '', '{}', clock_timestamp()
            FROM conversations_message m JOIN conversations_conversation c
              ON c.id = m.conversation_id
            WHERE c.user_id = %s AND m.id %% 10 = 0
            """,
            [user.pk],
        )
        cursor.execute(
            """
            INSERT INTO conversations_agentrun
                (run_id, user_id, conversation_id, request_id, run_type, status, created_at,
                 error)
            SELECT gen_random_uuid(), %s, c.id, 'req-' || c.id, 'chat', 'succeeded',
                   clock_timestamp(), ''
            FROM conversations_conversation c WHERE c.user_id = %s
            """,
            [user.pk, user.pk],
        )
    return user.pk


def _run_child(mode: str, user_id: int, root: str, out: str) -> dict:
    result = subprocess.run(
        [sys.executable, __file__, "--child", mode, str(user_id), root, out],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def _remaining_rows(user_id: int) -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT (SELECT count(*) FROM conversations_conversation WHERE user_id = %s)
                 + (SELECT count(*) FROM conversations_message WHERE owner_id = %s)
                 + (SELECT count(*) FROM conversations_agentrun WHERE user_id = %s)
                 + (SELECT count(*) FROM memory_app_userconfig WHERE user_id = %s)
                 + (SELECT count(*) FROM auth_user WHERE id = %s)
            """,
            [user_id] * 5,
        )
        return cursor.fetchone()[0]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=100_000)
    args = parser.parse_args()
    setup_django()
    from django.conf import settings
    from django.contrib.auth import get_user_model

    from memory_app.services import erase_user, write_memory_file

    User = get_user_model()
    with tempfile.TemporaryDirectory() as root, tempfile.TemporaryDirectory() as scratch:
        settings.WORKSPACE_ROOT = Path(root)
        stamp = time.time_ns()
        started = time.perf_counter()
        subject = _seed(f"bench-erase-{stamp}", args.messages)
        twin = _seed(f"bench-orm-{stamp}", args.messages)
        bystander = _seed(f"bench-bystander-{stamp}", 1_000)
        print(
            f"seeded 2 x {args.messages:,} messages + a bystander "
            f"in {time.perf_counter() - started:.1f} s"
        )
        user = User.objects.get(pk=subject)
        write_memory_file(
            user=user, text="I drink oolong tea\n", if_match=_etag_of_empty(), actor=user
        )

        out = str(Path(scratch) / "export.json")
        baseline = _run_child("baseline", subject, root, out)
        exported = _run_child("export", subject, root, out)
        size = Path(out).stat().st_size
        with open(out, "rb") as handle:
            document = json.load(handle)
        messages = sum(len(thread["messages"]) for thread in document["threads"])
        statuses = {thread["status"] for thread in document["threads"]}
        sources = {thread["source"] for thread in document["threads"]}
        print()
        print("export of one user                     peak RSS       time      document")
        print(f"  child that only starts Django        {baseline['peak_kib'] / 1024:7.1f} MiB")
        print(
            f"  child that exports                   {exported['peak_kib'] / 1024:7.1f} MiB"
            f"  {exported['seconds']:6.2f} s  {size / 2**20:7.1f} MiB"
        )
        print(
            f"  export's extra RSS / document size   "
            f"{(exported['peak_kib'] - baseline['peak_kib']) / 1024 / (size / 2**20):7.3f}"
        )
        print(
            f"  valid JSON: {len(document['threads']):,} threads, {messages:,} messages, "
            f"statuses {sorted(statuses)}, sources {sorted(sources)}"
        )

        bystander_rows = _remaining_rows(bystander)
        started = time.perf_counter()
        report = erase_user(user=user, actor=None)
        erase_seconds = time.perf_counter() - started
        started = time.perf_counter()
        User.objects.filter(pk=twin).delete()
        orm_seconds = time.perf_counter() - started
        print()
        print("erasure of one user                    time       ratio")
        print(f"  erase_user (set-wise)                {erase_seconds:6.2f} s    1.00")
        print(
            f"  Django ORM delete (collector)        {orm_seconds:6.2f} s  "
            f"{orm_seconds / erase_seconds:6.2f}"
        )
        print(f"  counts: {report.counts}")
        print(
            f"  rows left: {_remaining_rows(subject)}, workspace left: "
            f"{(Path(root) / str(subject)).exists()}, bystander rows: "
            f"{_remaining_rows(bystander)} (before: {bystander_rows})"
        )
        assert _remaining_rows(subject) == 0 and not (Path(root) / str(subject)).exists()
        assert _remaining_rows(bystander) == bystander_rows
        User.objects.filter(pk=bystander).delete()


def _etag_of_empty() -> str:
    import hashlib

    return "sha256:" + hashlib.sha256(b"").hexdigest()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(*sys.argv[2:6])
    else:
        main()
