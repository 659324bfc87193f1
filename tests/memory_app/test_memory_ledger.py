"""The MemoryEvent ledger follows MEMORY.md's history exactly, and shows where a writer died."""

import logging
import threading

import pytest
from django.db import connection

from memory_app.models import MemoryEvent
from memory_app.selectors import read_memory_file
from memory_app.services import (
    MemoryUnavailable,
    clear_memory,
    remember_memory,
    set_memory_enabled,
    set_memory_write_approval,
    write_memory_file,
)
from memory_app.workspace import writes as workspace_writes
from tests.factories import (
    ConversationFactory,
    RunningAgentRunFactory,
    StaffUserFactory,
    context_for,
    memory_user,
)
from tests.memory_app.helpers import sha

WAIT_SECONDS = 30


def _disk(settings, uid: int) -> bytes:
    path = settings.WORKSPACE_ROOT / str(uid) / "agents" / "MEMORY.md"
    return path.read_bytes() if path.exists() else b""


def _events(user) -> list[tuple]:
    return list(
        MemoryEvent.objects.filter(user=user).values_list(
            "kind", "actor_id", "run_id", "before_sha256", "after_sha256", "size_bytes"
        )
    )


@pytest.mark.django_db
def test_events_match_the_files_history_across_agent_and_user_changes(settings):
    user = memory_user()
    staff = StaffUserFactory()
    run = RunningAgentRunFactory(conversation=ConversationFactory(user=user))
    ctx = context_for(run)
    expected: list[tuple] = []

    def step(kind, change, *, actor=None, run_id=None):
        before = _disk(settings, user.pk)
        change()
        after = _disk(settings, user.pk)
        expected.append((kind, actor, run_id, sha(before), sha(after), len(after)))

    step("agent_added", lambda: remember_memory(ctx, "Likes oolong."), run_id=run.pk)
    step("agent_added", lambda: remember_memory(ctx, "Lives in Kyoto."), run_id=run.pk)
    # Nothing changed: nothing is recorded.
    assert remember_memory(ctx, "Likes oolong.").status == "unchanged"
    step(
        "agent_replaced",
        lambda: remember_memory(ctx, "Lives in Osaka.", "Lives in Kyoto."),
        run_id=run.pk,
    )
    etag = read_memory_file(user=user).etag
    step(
        "user_edited",
        lambda: write_memory_file(user=user, text="Likes green tea.\n", if_match=etag, actor=user),
        actor=user.pk,
    )
    step(
        "switch_off",
        lambda: set_memory_enabled(user=user, enabled=False, actor=staff),
        actor=staff.pk,
    )
    # Already off: no change, no event.
    set_memory_enabled(user=user, enabled=False, actor=staff)
    step("user_cleared", lambda: clear_memory(user=user, actor=user), actor=user.pk)
    # Already empty: no change, no event.
    clear_memory(user=user, actor=user)
    step(
        "switch_on", lambda: set_memory_enabled(user=user, enabled=True, actor=user), actor=user.pk
    )
    step("agent_added", lambda: remember_memory(ctx, "Likes oolong."), run_id=run.pk)

    assert _events(user) == expected
    hashes = [(before, after) for _, _, _, before, after, _ in expected]
    assert all(hashes[i][1] == hashes[i + 1][0] for i in range(len(hashes) - 1))
    assert hashes[-1][1] == sha(_disk(settings, user.pk))


@pytest.mark.django_db
def test_a_switch_event_records_the_files_hash_as_before_and_after(settings):
    user = memory_user()
    run = RunningAgentRunFactory(conversation=ConversationFactory(user=user))
    remember_memory(context_for(run), "A fact.")
    set_memory_enabled(user=user, enabled=False, actor=user)
    event = MemoryEvent.objects.filter(user=user).last()
    assert event.kind == "switch_off"
    assert event.before_sha256 == event.after_sha256 == sha(b"A fact.\n")
    assert event.size_bytes == len(b"A fact.\n")


@pytest.mark.django_db
def test_approval_changes_are_ledger_events_with_the_files_hash_and_the_actor(settings):
    user = memory_user()
    staff = StaffUserFactory()
    run = RunningAgentRunFactory(conversation=ConversationFactory(user=user))
    remember_memory(context_for(run), "A fact.")
    config = set_memory_write_approval(user=user, enabled=True, actor=user)
    assert config.memory_write_approval is True and config.enable_memory is True
    # Already on: no change, no event.
    set_memory_write_approval(user=user, enabled=True, actor=user)
    set_memory_write_approval(user=user, enabled=False, actor=staff)
    digest = sha(b"A fact.\n")
    assert _events(user)[1:] == [
        ("approval_on", user.pk, None, digest, digest, len(b"A fact.\n")),
        ("approval_off", staff.pk, None, digest, digest, len(b"A fact.\n")),
    ]


@pytest.mark.django_db
def test_every_change_is_logged_as_one_key_value_line_without_memory_text(settings, caplog):
    user = memory_user()
    run = RunningAgentRunFactory(conversation=ConversationFactory(user=user))
    with caplog.at_level(logging.INFO, logger="yuxi.memory"):
        remember_memory(context_for(run), "secret-ish fact")
        remember_memory(context_for(run), "secret-ish fact")
        clear_memory(user=user, actor=user)
    lines = [r.getMessage() for r in caplog.records if r.name == "yuxi.memory"]
    assert len(lines) == 2
    assert lines[0].startswith(f"memory_changed user={user.pk} kind=agent_added actor=None")
    after = sha(b"secret-ish fact\n")
    assert f"run={run.run_id} " in lines[0] and f"after={after}" in lines[0]
    assert "kind=user_cleared" in lines[1]
    assert all("secret" not in line for line in lines)


@pytest.mark.django_db(transaction=True)
def test_a_writer_killed_between_rename_and_commit_shows_as_a_break_in_the_chain(
    settings, monkeypatch
):
    user = memory_user()
    runs = [RunningAgentRunFactory(conversation=ConversationFactory(user=user)) for _ in (1, 2)]
    assert remember_memory(context_for(runs[0]), "first").status == "added"
    after_first = _disk(settings, user.pk)

    doomed = {}
    renamed, release = threading.Event(), threading.Event()
    real_rename = workspace_writes.os.rename

    def rename_then_pause(source, target, *args, **kwargs):
        real_rename(source, target, *args, **kwargs)
        # MEMORY.md's own rename (the version it replaces is renamed into place before it).
        if threading.current_thread() is doomed.get("thread") and target == "MEMORY.md":
            renamed.set()
            assert release.wait(WAIT_SECONDS)

    monkeypatch.setattr(workspace_writes.os, "rename", rename_then_pause)

    def doomed_write() -> None:
        try:
            connection.ensure_connection()
            doomed["pid"] = connection.connection.info.backend_pid
            doomed["outcome"] = remember_memory(context_for(runs[1]), "published, never committed")
        except Exception as exc:
            doomed["outcome"] = exc
        finally:
            connection.close()

    thread = threading.Thread(target=doomed_write)
    doomed["thread"] = thread
    thread.start()
    assert renamed.wait(WAIT_SECONDS)
    probe = connection.get_new_connection(connection.get_connection_params())
    probe.autocommit = True
    try:
        probe.execute("SELECT pg_terminate_backend(%s)", [doomed["pid"]])
    finally:
        probe.close()
    release.set()
    thread.join(WAIT_SECONDS)
    assert isinstance(doomed["outcome"], MemoryUnavailable)
    orphan = _disk(settings, user.pk)
    assert orphan == after_first + b"published, never committed\n"

    assert remember_memory(context_for(runs[0]), "third").status == "added"
    chain = list(MemoryEvent.objects.filter(user=user).values_list("before_sha256", "after_sha256"))
    assert chain == [
        (sha(b""), sha(after_first)),
        (sha(orphan), sha(_disk(settings, user.pk))),
    ]
    assert chain[1][0] != chain[0][1]  # the break: someone changed the file without a record
