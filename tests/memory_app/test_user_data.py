"""Export and erasure of a user's whole data, on real PostgreSQL and real files."""

import hashlib
import json
import threading
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.sessions.models import Session
from django.db import OperationalError, connection, connections
from django.db.backends.signals import connection_created
from django.test import Client
from django.urls import reverse

from conversations import checkpoints
from conversations.models import AgentRun, Conversation, ErasureFence, Message, ToolCall
from memory_app import user_data
from memory_app.models import LoginSession, MemoryEvent, UserConfig
from memory_app.runtime import chat
from memory_app.selectors import export_user_data
from memory_app.services import (
    MemoryWriteError,
    clear_memory,
    erase_user,
    remember_memory,
    set_memory_enabled,
    write_memory_file,
)
from memory_app.user_data import ERASURE_RUN_ERROR
from memory_app.workspace import Workspace
from memory_app.workspace.paths import AGENTS_RELPATH
from tests.factories import (
    AgentRunFactory,
    ConversationFactory,
    MessageFactory,
    RunningAgentRunFactory,
    StaffUserFactory,
    ToolCallFactory,
    UserConfigFactory,
    context_for,
    memory_user,
)
from tests.memory_app.helpers import etag

pytestmark = pytest.mark.django_db(transaction=True)

LOGIN_URL = reverse("login")


class DeletionFailed(Exception):
    pass


def workspace_dir(uid: int) -> Path:
    return Path(settings.WORKSPACE_ROOT) / str(uid)


def history(user) -> dict:
    """A user with a bit of everything: every thread status and source, a child thread, tool
    calls, runs (one running), a memory file with its ledger, AGENTS.md."""
    threads = [
        ConversationFactory(user=user, status=status, source=source)
        for status in Conversation.Status.values
        for source in Conversation.Source.values
    ]
    child = ConversationFactory(user=user, parent=threads[0], source="agent_call")
    for thread in [*threads, child]:
        MessageFactory(conversation=thread, content=f"hello from {thread.thread_id}")
        ToolCallFactory(message=MessageFactory(conversation=thread, role="assistant"))
    AgentRunFactory(conversation=threads[0], status="succeeded")
    running = RunningAgentRunFactory(conversation=threads[0])
    write_memory_file(user=user, text="I drink oolong tea\n", if_match=etag(b""), actor=user)
    Workspace.for_user(user.pk).replace_authorized_file(AGENTS_RELPATH, b"# rules\n")
    return {"threads": len(threads) + 1, "running": running}


def rows_of(uid: int) -> dict[str, int]:
    return {
        "threads": Conversation.objects.filter(user_id=uid).count(),
        "messages": Message.objects.filter(conversation__user_id=uid).count(),
        "tool_calls": ToolCall.objects.filter(message__conversation__user_id=uid).count(),
        "runs": AgentRun.objects.filter(user_id=uid).count(),
        "configs": UserConfig.objects.filter(user_id=uid).count(),
        "memory_events": MemoryEvent.objects.filter(user_id=uid).count(),
        "users": get_user_model().objects.filter(pk=uid).count(),
    }


def test_export_is_one_json_document_with_every_thread_of_every_status_and_source():
    user = memory_user()
    made = history(user)
    history(memory_user())  # another user's data stays out
    document = json.loads(b"".join(export_user_data(user=user)))
    assert set(document) == {
        "user",
        "enable_memory",
        "memory",
        "agents_md",
        "user_md",
        "memory_events",
        "memory_versions",
        "pending_approvals",
        "threads",
    }
    assert (document["user"]["username"], document["enable_memory"]) == (user.username, True)
    assert document["memory"]["text"] == "I drink oolong tea\n"
    assert document["memory"]["etag"] == etag(b"I drink oolong tea\n")
    assert (document["agents_md"], document["user_md"]) == ("# rules\n", None)
    assert [event["kind"] for event in document["memory_events"]] == ["user_edited"]
    assert document["memory_versions"] == []  # it replaced only the empty file
    threads = document["threads"]
    assert len(threads) == made["threads"]
    assert {(t["status"], t["source"]) for t in threads} >= {
        (status, source)
        for status in Conversation.Status.values
        for source in Conversation.Source.values
    }
    assert sum(1 for t in threads if t["parent_thread_id"]) == 1
    for thread in threads:
        assert [m["role"] for m in thread["messages"]] == ["user", "assistant"]
        assert thread["messages"][0]["content"] == f"hello from {thread['thread_id']}"
        assert [c["name"] for c in thread["messages"][1]["tool_calls"]] == ["remember_memory"]


def test_export_is_read_and_spooled_before_its_first_byte_is_taken():
    """Rows deleted after the call returns (before reading) are still in the document."""
    user = memory_user()
    history(user)
    chunks = export_user_data(user=user)
    Message.objects.filter(conversation__user=user).delete()
    document = json.loads(b"".join(chunks))
    assert all(len(thread["messages"]) == 2 for thread in document["threads"])


def test_erasure_removes_every_row_and_the_workspace_and_leaves_other_users_alone():
    user, other = memory_user(), memory_user()
    made = history(user)
    history(other)
    staff = StaffUserFactory()
    # A ledger row of the other user whose actor is the erased user keeps its row, without actor.
    write_memory_file(
        user=other, text="edited\n", if_match=etag(b"I drink oolong tea\n"), actor=user
    )
    other_before = rows_of(other.pk)
    other_file = (workspace_dir(other.pk) / "agents" / "MEMORY.md").read_bytes()
    report = erase_user(user=user, actor=staff)
    assert report.counts == {
        "checkpoints": 0,
        "tool_calls": made["threads"],
        "messages": 2 * made["threads"],
        "memory_events": 1,
        "runs": 2,
        "threads": made["threads"],
        "configs": 1,
        "sessions": 0,
        "users": 1,
    }
    assert set(rows_of(user.pk).values()) == {0}
    assert not workspace_dir(user.pk).exists()
    assert rows_of(other.pk) == other_before
    assert (workspace_dir(other.pk) / "agents" / "MEMORY.md").read_bytes() == other_file
    assert MemoryEvent.objects.filter(user=other, actor__isnull=True, kind="user_edited").exists()


def log_in(user) -> Client:
    """A browser that logged in through the login page."""
    browser = Client()
    response = browser.post(LOGIN_URL, {"username": user.username, "password": "pw"})
    assert response.status_code == 302
    return browser


def test_erasure_deletes_every_session_of_the_user_and_logs_them_out():
    user, other = memory_user(), memory_user()
    browsers = [log_in(user), log_in(user)]
    bystander = log_in(other)
    keys = [browser.session.session_key for browser in browsers]
    assert len(set(keys)) == 2 and Session.objects.filter(session_key__in=keys).count() == 2
    report = erase_user(user=user, actor=user)
    assert not Session.objects.filter(session_key__in=keys).exists()
    assert report.counts["sessions"] == 2
    assert not LoginSession.objects.filter(session_id__in=keys).exists()
    for browser in browsers:
        assert browser.get("/api/memory/").status_code == 401
    assert Session.objects.filter(session_key=bystander.session.session_key).exists()
    assert bystander.get("/api/memory/").status_code == 200


def test_export_carries_every_kept_version_as_text_newest_first():
    user = memory_user()
    first, second = "我喝乌龙茶 🍵\n".encode(), b"I live in Lyon\n"
    write_memory_file(user=user, text=first.decode(), if_match=etag(b""), actor=user)
    write_memory_file(user=user, text=second.decode(), if_match=etag(first), actor=user)
    clear_memory(user=user, actor=user)
    # A version a failed write left behind (no ledger row names it) is exported too.
    orphan = b"kept by a write that then failed\n"
    Workspace.for_user(user.pk).replace_authorized_file(
        f"agents/.memory-versions/{hashlib.sha256(orphan).hexdigest()}", orphan
    )
    document = json.loads(b"".join(export_user_data(user=user)))
    assert document["memory_versions"] == [
        {"sha256": hashlib.sha256(data).hexdigest(), "size_bytes": len(data), "text": text}
        for data, text in (
            (second, second.decode()),
            (first, first.decode()),
            (orphan, orphan.decode()),
        )
    ]
    assert document["memory"]["text"] == ""


def test_erasure_removes_the_kept_versions_with_the_workspace():
    user = memory_user()
    write_memory_file(user=user, text="secret\n", if_match=etag(b""), actor=user)
    clear_memory(user=user, actor=user)
    versions = workspace_dir(user.pk) / "agents" / ".memory-versions"
    assert [path.read_bytes() for path in versions.iterdir()] == [b"secret\n"]
    erase_user(user=user, actor=StaffUserFactory())
    assert not versions.exists() and not workspace_dir(user.pk).exists()


def test_erasure_run_again_finds_nothing_left_to_do():
    user = memory_user()
    history(user)
    erase_user(user=user, actor=user)
    again = erase_user(user=user, actor=user)
    assert set(again.counts.values()) == {0}
    assert not workspace_dir(user.pk).exists()


def test_a_run_that_was_running_can_no_longer_write_memory_after_erasure():
    user = memory_user()
    run = RunningAgentRunFactory(conversation=ConversationFactory(user=user))
    ctx = context_for(run)
    erase_user(user=user, actor=user)
    with pytest.raises(MemoryWriteError):
        remember_memory(ctx, "a fact after the erasure")
    assert not workspace_dir(user.pk).exists()


def test_the_fence_commits_the_user_inactive_and_running_runs_failed_before_deleting(
    monkeypatch,
):
    """If the deletion fails, what is left is fenced: inactive, runs failed; a rerun finishes."""
    user = memory_user()
    running = history(user)["running"]

    def broken(user_id: int) -> dict:
        raise DeletionFailed

    monkeypatch.setattr(user_data, "_delete_everything", broken)
    with pytest.raises(DeletionFailed):
        erase_user(user=user, actor=user)
    user.refresh_from_db()
    running.refresh_from_db()
    assert not user.is_active and ErasureFence.objects.filter(user=user).exists()
    assert (running.status, running.error, running.worker_id) == ("failed", ERASURE_RUN_ERROR, None)
    monkeypatch.undo()
    erase_user(user=user, actor=user)
    assert set(rows_of(user.pk).values()) == {0}


class PauseBeforeMemoryLock:
    """Holds its connection's first advisory-lock statement until released (one thread)."""

    def __init__(self) -> None:
        self.reached = threading.Event()
        self.release = threading.Event()
        self.paused = False

    def __call__(self, execute, sql, params, many, context):
        if not self.paused and "pg_advisory" in sql:
            self.paused = True
            self.reached.set()
            assert self.release.wait(60)
        return execute(sql, params, many, context)


def test_erasure_racing_a_running_chat_and_a_user_edit_leaves_nothing_and_no_workspace():
    """A chat turn about to write memory and a user's edit about to write it are both held just
    before their memory lock while the erasure runs; released, neither brings anything back."""
    user = memory_user()
    history(user)
    memory = workspace_dir(user.pk) / "agents" / "MEMORY.md"
    current = etag(memory.read_bytes())
    pauses = {"chat": PauseBeforeMemoryLock(), "edit": PauseBeforeMemoryLock()}
    outcomes: dict[str, object] = {}

    def racer(name, work):
        try:
            with connection.execute_wrapper(pauses[name]):
                outcomes[name] = work()
        except Exception as exc:  # the outcome is the assertion below, whatever it is
            outcomes[name] = exc
        finally:
            connections.close_all()

    racers = [
        threading.Thread(
            target=racer,
            args=("chat", lambda: chat(user_id=user.pk, message="remember that I like jasmine")),
        ),
        threading.Thread(
            target=racer,
            args=(
                "edit",
                lambda: write_memory_file(
                    user=user, text="edited by the user\n", if_match=current, actor=user
                ),
            ),
        ),
    ]
    # The chat's memory write runs on a tool thread of the agent: every connection opened
    # outside this thread and the edit's carries the chat's pause.
    own_threads = (threading.current_thread(), racers[1])
    paused_connections = []

    def pause_the_chats_connections(sender, connection, **kwargs):
        outside = threading.current_thread() not in own_threads
        if outside and pauses["chat"] not in connection.execute_wrappers:
            connection.execute_wrappers.append(pauses["chat"])
            paused_connections.append(connection)

    connection_created.connect(pause_the_chats_connections, weak=False)
    try:
        for thread in racers:
            thread.start()
        for pause in pauses.values():
            assert pause.reached.wait(60)
        try:
            erase_user(user=user, actor=user)
        finally:
            for pause in pauses.values():
                pause.release.set()
            for thread in racers:
                thread.join(60)
    finally:
        connection_created.disconnect(pause_the_chats_connections)
        for paused in paused_connections:
            paused.execute_wrappers.remove(pauses["chat"])
    if any(rows_of(user.pk).values()):
        erase_user(user=user, actor=user)  # "or completes when run again"
    assert set(rows_of(user.pk).values()) == {0}
    assert not workspace_dir(user.pk).exists()
    assert isinstance(outcomes["edit"], Exception)
    assert set(outcomes) == {"chat", "edit"}


def test_switch_and_rows_of_a_user_created_after_an_erasure_with_the_same_name_are_new():
    """Erasure frees the username; nothing of the old user reaches the new one."""
    user = memory_user(user__username="reused")
    history(user)
    erase_user(user=user, actor=user)
    newcomer = UserConfigFactory(user__username="reused", enable_memory=False).user
    set_memory_enabled(user=newcomer, enabled=True, actor=newcomer)
    document = json.loads(b"".join(export_user_data(user=newcomer)))
    assert document["threads"] == []
    assert document["memory"]["text"] == ""
    assert [event["kind"] for event in document["memory_events"]] == ["switch_on"]


def test_a_deletion_broken_by_a_database_error_is_retried_once_and_completes():
    user = memory_user()
    history(user)
    failures = []

    def fail_first_message_delete(execute, sql, params, many, context):
        if sql.startswith("DELETE FROM conversations_message") and not failures:
            failures.append(sql)
            raise OperationalError("deadlock detected")
        return execute(sql, params, many, context)

    with connection.execute_wrapper(fail_first_message_delete):
        report = erase_user(user=user, actor=user)
    assert len(failures) == 1
    assert report.counts["messages"] > 0
    assert set(rows_of(user.pk).values()) == {0}
    assert not workspace_dir(user.pk).exists()


def test_a_deletion_failing_twice_raises_and_leaves_the_user_fenced():
    user = memory_user()
    history(user)

    def always_fail(execute, sql, params, many, context):
        if sql.startswith("DELETE FROM conversations_message"):
            raise OperationalError("deadlock detected")
        return execute(sql, params, many, context)

    with connection.execute_wrapper(always_fail), pytest.raises(OperationalError):
        erase_user(user=user, actor=user)
    user.refresh_from_db()
    assert ErasureFence.objects.filter(user=user).exists()
    assert Conversation.objects.filter(user=user).exists()
    erase_user(user=user, actor=user)
    assert set(rows_of(user.pk).values()) == {0}


def test_export_lists_pending_approvals_and_erasure_removes_their_checkpoints():
    user = memory_user(memory_write_approval=True)
    other = memory_user(memory_write_approval=True)
    turn = chat(user_id=user.pk, message="remember that I drink oolong tea")
    kept = chat(user_id=other.pk, message="remember that I drink black tea")
    assert turn.status == kept.status == "interrupted"
    document = json.loads(b"".join(export_user_data(user=user)))
    [pending] = document["pending_approvals"]
    assert pending == {
        "thread_id": turn.thread_id,
        "run_id": turn.run_id,
        "tool_call_id": turn.approval["tool_call_id"],
        "content": "I drink oolong tea",
        "replaces": None,
        "created_at": pending["created_at"],
    }
    assert checkpoints.checkpoint_exists(turn.run_id)
    report = erase_user(user=user, actor=user)
    assert report.counts["checkpoints"] == 1
    assert not checkpoints.checkpoint_exists(turn.run_id)
    assert checkpoints.checkpoint_exists(kept.run_id)
