"""Kept versions of MEMORY.md: what every change keeps, pruning, list, read, restore, forget.

Real files under a private workspace root and real PostgreSQL; no file-system call is mocked
except where a test injects a failure.
"""

import json
import os
import stat

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memory_app.errors import MemoryVersionNotFound
from memory_app.memory_file import MEMORY_FILE_MAX_BYTES
from memory_app.models import MemoryEvent
from memory_app.runtime import chat
from memory_app.selectors import (
    list_memory_versions,
    read_memory_file,
    read_memory_for_prompt,
    read_memory_version,
)
from memory_app.services import (
    MemoryAccessDenied,
    MemoryConflict,
    MemoryUnavailable,
    clear_memory,
    forget_memory_versions,
    remember_memory,
    restore_memory_version,
    set_memory_enabled,
    write_memory_file,
)
from memory_app.tools import make_remember_memory_tool
from memory_app.versions import EMPTY_SHA256, MEMORY_VERSIONS_DIR, MemoryVersion
from memory_app.workspace import Workspace
from memory_app.workspace import writes as workspace_writes
from memory_app.workspace.paths import MEMORY_RELPATH
from tests.concurrency import race
from tests.factories import (
    ConversationFactory,
    RunningAgentRunFactory,
    UserFactory,
    context_for,
    memory_user,
)
from tests.memory_app.helpers import etag, sha
from tests.memory_app.models import RecordingModel

pytestmark = pytest.mark.django_db

CJK = "对花生过敏 🥜\n住在東京。\n".encode()


def _agents(settings, uid: int):
    return settings.WORKSPACE_ROOT / str(uid) / "agents"


def _memory(settings, uid: int) -> bytes:
    return (_agents(settings, uid) / "MEMORY.md").read_bytes()


def _kept(settings, uid: int) -> dict[str, bytes]:
    """Every file in the user's versions directory and its bytes."""
    directory = _agents(settings, uid) / ".memory-versions"
    if not directory.exists():
        return {}
    return {path.name: path.read_bytes() for path in directory.iterdir()}


def _write(user, data: bytes) -> None:
    """The user's own whole-file write over whatever the file holds now."""
    current = read_memory_file(user=user).etag
    write_memory_file(user=user, text=data.decode(), if_match=current, actor=user)


def _agent_run(user):
    return RunningAgentRunFactory(conversation=ConversationFactory(user=user))


# -- what a change keeps -----------------------------------------------------------------------


def test_a_user_write_keeps_the_replaced_cjk_bytes_byte_for_byte_named_by_their_hash(settings):
    user = memory_user()
    _write(user, CJK)
    _write(user, b"new\n")
    assert _kept(settings, user.pk) == {sha(CJK): CJK}
    path = _agents(settings, user.pk) / ".memory-versions" / sha(CJK)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert read_memory_version(user=user, sha256=sha(CJK)) == CJK


def test_a_file_of_exactly_128_kib_is_kept_whole():
    user = memory_user()
    data = ("记" * (MEMORY_FILE_MAX_BYTES // 3) + "x" * (MEMORY_FILE_MAX_BYTES % 3)).encode()
    assert len(data) == MEMORY_FILE_MAX_BYTES
    Workspace.for_user(user.pk).replace_authorized_file(MEMORY_RELPATH, data)
    clear_memory(user=user, actor=user)
    assert read_memory_version(user=user, sha256=sha(data)) == data


@pytest.mark.parametrize(
    "data", [b"x" * (MEMORY_FILE_MAX_BYTES + 1), b"good\n\xff\xfe bad\n"], ids=["big", "not-utf8"]
)
def test_a_file_over_128_kib_or_not_utf8_is_replaced_but_not_kept(settings, data):
    user = memory_user()
    Workspace.for_user(user.pk).replace_authorized_file(MEMORY_RELPATH, data)
    write_memory_file(user=user, text="repaired\n", if_match=etag(data), actor=user)
    assert _memory(settings, user.pk) == b"repaired\n"
    assert _kept(settings, user.pk) == {}
    [version] = list_memory_versions(user=user)
    assert (version.sha256, version.available) == (sha(data), False)


def test_the_agents_append_and_replacement_keep_what_they_replaced(settings):
    user = memory_user()
    ctx = context_for(_agent_run(user))
    remember_memory(ctx, "I drink oolong tea")
    first = _memory(settings, user.pk)
    remember_memory(ctx, "I live in Lyon")
    second = _memory(settings, user.pk)
    remember_memory(ctx, "I drink green tea", replaces="I drink oolong tea")
    assert _kept(settings, user.pk) == {sha(first): first, sha(second): second}
    kinds = [(v.sha256, v.kind, v.replaced_by) for v in list_memory_versions(user=user)]
    assert kinds == [
        (sha(second), "agent_added", "agent_replaced"),
        (sha(first), "agent_added", "agent_added"),
    ]


def test_the_replaced_file_is_kept_by_a_hard_link_to_it_not_a_copy(settings):
    user = memory_user()
    ctx = context_for(_agent_run(user))
    remember_memory(ctx, "I drink oolong tea")
    replaced = (_agents(settings, user.pk) / "MEMORY.md").stat()
    remember_memory(ctx, "I live in Lyon")
    kept = (_agents(settings, user.pk) / ".memory-versions" / sha(b"I drink oolong tea\n")).stat()
    assert kept.st_ino == replaced.st_ino
    assert stat.S_IMODE(kept.st_mode) == 0o600 and kept.st_nlink == 1


def test_an_append_that_keeps_a_version_fsyncs_three_times(monkeypatch):
    """The version's directory, the new file, MEMORY.md's directory: the replaced bytes are
    already durable, so keeping them needs no file fsync."""
    user = memory_user()
    ctx = context_for(_agent_run(user))
    remember_memory(ctx, "I drink oolong tea")
    synced: list[bool] = []
    real_fsync = os.fsync

    def fsync(fd):
        synced.append(stat.S_ISDIR(os.fstat(fd).st_mode))
        return real_fsync(fd)

    monkeypatch.setattr(workspace_writes.os, "fsync", fsync)
    remember_memory(ctx, "I live in Lyon")
    assert synced == [True, False, True]


def test_a_file_written_by_hand_is_kept_as_a_private_copy(settings):
    user = memory_user()
    path = _agents(settings, user.pk) / "MEMORY.md"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"written by hand\n")
    path.chmod(0o644)
    remember_memory(context_for(_agent_run(user)), "I live in Lyon")
    kept = path.parent / ".memory-versions" / sha(b"written by hand\n")
    assert kept.read_bytes() == b"written by hand\n"
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600


@pytest.mark.django_db(transaction=True)
def test_the_write_path_compiles_no_orm_query(monkeypatch):
    """Every statement of an append is static SQL: no queryset is built or cloned per call
    (outside a caller's transaction, as the tool calls it)."""
    from django.db.models import QuerySet

    user = memory_user()
    ctx = context_for(_agent_run(user))
    remember_memory(ctx, "I drink oolong tea")
    clones: list[object] = []
    real_clone = QuerySet._clone

    def clone(self, *args, **kwargs):
        clones.append(self.model)
        return real_clone(self, *args, **kwargs)

    monkeypatch.setattr(QuerySet, "_clone", clone)
    with CaptureQueriesContext(connection) as queries:
        remember_memory(ctx, "I live in Lyon")
    assert clones == []
    statements = [q["sql"] for q in queries if q["sql"] not in ("BEGIN", "COMMIT")]
    # The advisory lock, the run row, the state, the turn's message, the user's recent
    # messages that may state a credential the content repeats, the versions window, the
    # ledger row.
    assert len(statements) == 7


def test_the_empty_file_is_never_kept_nor_listed(settings):
    user = memory_user()
    remember_memory(context_for(_agent_run(user)), "first fact")  # replaces a missing file
    Workspace.for_user(user.pk).replace_authorized_file(MEMORY_RELPATH, b"")
    _write(user, b"written over an empty file\n")  # replaces an empty one
    assert MemoryEvent.objects.filter(before_sha256=EMPTY_SHA256).count() == 2
    assert _kept(settings, user.pk) == {}
    assert list_memory_versions(user=user) == []


def test_a_change_that_changes_nothing_keeps_nothing(settings):
    user = memory_user()
    _write(user, b"same\n")
    _write(user, b"same\n")
    remember_memory(context_for(_agent_run(user)), "same")
    assert _kept(settings, user.pk) == {}


def test_an_existing_version_is_not_rewritten(settings):
    user = memory_user()
    _write(user, b"A\n")
    _write(user, b"B\n")
    path = _agents(settings, user.pk) / ".memory-versions" / sha(b"A\n")
    before = path.stat()
    _write(user, b"A\n")
    _write(user, b"C\n")  # replaces A again
    after = path.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert set(_kept(settings, user.pk)) == {sha(b"A\n"), sha(b"B\n")}


def test_the_version_is_kept_before_the_ledger_row_and_pruned_after_the_rename(
    settings, monkeypatch
):
    """Inside the fence: the version is durable before the row, the row is the last statement
    before MEMORY.md's rename, and nothing but the commit is sent after it."""
    user = memory_user()
    _write(user, b"A\n")
    for text in (b"B\n", b"C\n"):
        _write(user, text)
    settings.MEMORY_VERSIONS_KEPT = 1
    steps: list[str] = []
    real_rename, real_unlink, real_link = os.rename, os.unlink, os.link

    def rename(source, target, *args, **kwargs):
        steps.append(f"rename {target if target == 'MEMORY.md' else 'version'}")
        return real_rename(source, target, *args, **kwargs)

    def link(source, target, *args, **kwargs):
        if len(target) == 64:
            steps.append("link version")
        return real_link(source, target, *args, **kwargs)

    def unlink(name, *args, **kwargs):
        if len(name) == 64:
            steps.append("prune")
        return real_unlink(name, *args, **kwargs)

    monkeypatch.setattr(workspace_writes.os, "rename", rename)
    monkeypatch.setattr(workspace_writes.os, "unlink", unlink)
    monkeypatch.setattr(workspace_writes.os, "link", link)
    with CaptureQueriesContext(connection) as queries:
        _write(user, b"D\n")
    ledger_at = next(i for i, q in enumerate(queries) if "INSERT INTO" in q["sql"])
    # (The test's own transaction makes the write's a savepoint: its release is the commit.)
    after_ledger = [q["sql"] for q in queries[ledger_at + 1 :]]
    assert [sql for sql in after_ledger if not sql.startswith("RELEASE SAVEPOINT")] == []
    # The replaced file is kept by a hard link to it (its bytes are already durable).
    assert steps == ["link version", "rename MEMORY.md", "prune", "prune"]
    assert _kept(settings, user.pk) == {sha(b"C\n"): b"C\n"}


# -- pruning ---------------------------------------------------------------------------------


def test_only_the_newest_n_distinct_versions_are_kept(settings):
    settings.MEMORY_VERSIONS_KEPT = 3
    user = memory_user()
    texts = [f"version {i} 记\n".encode() for i in range(7)]
    for text in texts:
        _write(user, text)
    _write(user, texts[2])  # replaces version 6; version 2 is the file again
    _write(user, b"last\n")  # replaces version 2 once more
    # Newest replaced first: 2 (again), 6, 5. Distinct, so 2 counts once.
    assert _kept(settings, user.pk) == {sha(t): t for t in (texts[2], texts[6], texts[5])}
    listed = list_memory_versions(user=user)
    order = [texts[i] for i in (2, 6, 5, 4, 3, 1, 0)]
    assert [v.sha256 for v in listed] == [sha(t) for t in order]
    assert [v.available for v in listed] == [True] * 3 + [False] * 4
    # Sizes of versions no longer kept come from the ledger.
    assert [v.size_bytes for v in listed] == [len(texts[0])] * 7


def test_a_setting_of_zero_keeps_none_and_removes_what_was_kept(settings):
    user = memory_user()
    _write(user, b"A\n")
    _write(user, b"B\n")
    assert set(_kept(settings, user.pk)) == {sha(b"A\n")}
    settings.MEMORY_VERSIONS_KEPT = 0
    _write(user, b"C\n")
    assert _kept(settings, user.pk) == {}


def test_a_negative_setting_fails_the_change_closed(settings):
    user = memory_user()
    _write(user, b"A\n")
    settings.MEMORY_VERSIONS_KEPT = -1
    with pytest.raises(MemoryUnavailable, match="MEMORY_VERSIONS_KEPT"):
        _write(user, b"B\n")
    assert _memory(settings, user.pk) == b"A\n"


def test_a_failed_prune_is_logged_and_the_write_stands(settings, monkeypatch, caplog):
    settings.MEMORY_VERSIONS_KEPT = 1
    user = memory_user()
    for text in (b"A\n", b"B\n"):
        _write(user, text)
    real_unlink = os.unlink

    def failing_unlink(name, *args, **kwargs):
        if len(name) == 64:
            raise OSError(5, "Input/output error")
        return real_unlink(name, *args, **kwargs)

    monkeypatch.setattr(workspace_writes.os, "unlink", failing_unlink)
    _write(user, b"C\n")
    assert _memory(settings, user.pk) == b"C\n"
    assert MemoryEvent.objects.filter(user=user).count() == 3
    assert "versions_prune_failed" in caplog.text
    monkeypatch.undo()
    _write(user, b"D\n")  # the next change prunes again
    assert set(_kept(settings, user.pk)) == {sha(b"C\n")}


# -- symlinks and failures -----------------------------------------------------------------------


@pytest.mark.parametrize("where", ["directory", "version file"])
def test_a_symlinked_versions_path_is_refused_and_memory_stays_byte_for_byte(
    settings, tmp_path, where
):
    user = memory_user()
    _write(user, CJK)
    outside = tmp_path / "outside"
    outside.mkdir()
    agents = _agents(settings, user.pk)
    if where == "directory":
        (agents / ".memory-versions").symlink_to(outside, target_is_directory=True)
    else:
        (agents / ".memory-versions").mkdir()
        (agents / ".memory-versions" / sha(CJK)).symlink_to(outside / "stolen")
    events = MemoryEvent.objects.count()
    with pytest.raises(MemoryAccessDenied):
        _write(user, b"new\n")
    run = _agent_run(user)
    with pytest.raises(MemoryAccessDenied):
        remember_memory(context_for(run), "agent fact")
    result = json.loads(make_remember_memory_tool(context_for(run)).invoke({"content": "fact"}))
    assert result["status"] == "denied"
    with pytest.raises(MemoryAccessDenied):
        clear_memory(user=user, actor=user)
    assert _memory(settings, user.pk) == CJK
    assert MemoryEvent.objects.count() == events
    assert list(outside.iterdir()) == []


def test_a_failure_keeping_the_version_leaves_memory_and_the_ledger_untouched(
    settings, monkeypatch
):
    user = memory_user()
    _write(user, CJK)
    real_fsync = os.fsync
    calls = []

    def failing_first_fsync(fd):
        calls.append(fd)
        if len(calls) == 1:  # the version's temp file, the first fsync of the change
            raise OSError(5, "Input/output error")
        return real_fsync(fd)

    monkeypatch.setattr(workspace_writes.os, "fsync", failing_first_fsync)
    events = MemoryEvent.objects.count()
    with pytest.raises(Exception, match="could not be written"):
        _write(user, b"new\n")
    assert _memory(settings, user.pk) == CJK
    assert _kept(settings, user.pk) == {}
    assert MemoryEvent.objects.count() == events


# -- list and read ------------------------------------------------------------------------------


def test_the_list_says_when_and_by_what_each_version_was_replaced():
    user = memory_user()
    _write(user, b"A\n")
    _write(user, b"B\n")
    clear_memory(user=user, actor=user)
    events = list(MemoryEvent.objects.filter(user=user).order_by("-id"))
    assert list_memory_versions(user=user) == [
        MemoryVersion(
            sha256=sha(b"B\n"),
            size_bytes=2,
            replaced_at=events[0].created_at,
            kind="user_edited",
            replaced_by="user_cleared",
            available=True,
        ),
        MemoryVersion(
            sha256=sha(b"A\n"),
            size_bytes=2,
            replaced_at=events[1].created_at,
            kind="user_edited",
            replaced_by="user_edited",
            available=True,
        ),
    ]


def test_a_file_no_recorded_change_produced_is_initial(settings):
    user = memory_user()
    seed = b"# Memory\n- seeded\n"
    Workspace.for_user(user.pk).replace_authorized_file(MEMORY_RELPATH, seed)
    _write(user, b"- edited\n")
    remember_memory(context_for(_agent_run(user)), "I drink oolong tea")
    listed = [(v.sha256, v.kind, v.replaced_by) for v in list_memory_versions(user=user)]
    assert listed == [
        (sha(b"- edited\n"), "user_edited", "agent_added"),
        (sha(seed), "initial", "user_edited"),
    ]


@pytest.mark.parametrize("form", ["{hex}", "sha256:{hex}"])
def test_a_version_is_read_and_restored_by_its_bare_hex_or_its_etag_form(settings, form):
    user = memory_user()
    _write(user, b"A\n")
    _write(user, b"B\n")
    name = form.format(hex=sha(b"A\n"))
    assert read_memory_version(user=user, sha256=name) == b"A\n"
    restore_memory_version(user=user, sha256=name, if_match=etag(b"B\n"), actor=user)
    assert _memory(settings, user.pk) == b"A\n"


def test_switch_and_forget_events_are_not_versions():
    user = memory_user()
    _write(user, b"A\n")
    set_memory_enabled(user=user, enabled=False, actor=user)
    set_memory_enabled(user=user, enabled=True, actor=user)
    forget_memory_versions(user=user, actor=user)
    assert list_memory_versions(user=user) == []


@pytest.mark.parametrize("sha256", ["", "A" * 64, "0" * 63, "../MEMORY.md", "0" * 64, None])
def test_reading_an_unknown_or_malformed_version_is_not_found(sha256):
    user = memory_user()
    _write(user, b"A\n")
    with pytest.raises(MemoryVersionNotFound):
        read_memory_version(user=user, sha256=sha256)


def test_a_kept_version_whose_bytes_changed_is_not_found(settings):
    user = memory_user()
    _write(user, b"A\n")
    _write(user, b"B\n")
    (_agents(settings, user.pk) / ".memory-versions" / sha(b"A\n")).write_bytes(b"tampered\n")
    with pytest.raises(MemoryVersionNotFound):
        read_memory_version(user=user, sha256=sha(b"A\n"))
    with pytest.raises(MemoryVersionNotFound):
        restore_memory_version(user=user, sha256=sha(b"A\n"), if_match=etag(b"B\n"), actor=user)
    assert _memory(settings, user.pk) == b"B\n"


def test_another_users_version_is_not_found():
    owner, other = memory_user(), memory_user()
    _write(owner, b"owner's secret\n")
    _write(owner, b"B\n")
    secret = sha(b"owner's secret\n")
    assert read_memory_version(user=owner, sha256=secret) == b"owner's secret\n"
    with pytest.raises(MemoryVersionNotFound):
        read_memory_version(user=other, sha256=secret)
    with pytest.raises(MemoryVersionNotFound):
        restore_memory_version(user=other, sha256=secret, if_match=etag(b""), actor=other)
    assert list_memory_versions(user=other) == []


# -- restore ---------------------------------------------------------------------------------


def test_a_clear_is_undone_by_a_restore(settings):
    user = memory_user()
    _write(user, CJK)
    clear_memory(user=user, actor=user)
    assert read_memory_for_prompt(user.pk).text == ""
    restored = restore_memory_version(user=user, sha256=sha(CJK), if_match=etag(b""), actor=user)
    assert _memory(settings, user.pk) == CJK
    assert (restored.text, restored.etag, restored.size_bytes) == (
        CJK.decode(),
        etag(CJK),
        len(CJK),
    )
    event = MemoryEvent.objects.filter(user=user).latest("id")
    assert (event.kind, event.actor_id, event.before_sha256, event.after_sha256) == (
        "user_restored",
        user.pk,
        EMPTY_SHA256,
        sha(CJK),
    )


def test_a_restore_keeps_the_file_it_replaces_so_it_can_be_undone(settings):
    user = memory_user()
    _write(user, b"A\n")
    _write(user, b"B\n")
    restore_memory_version(user=user, sha256=sha(b"A\n"), if_match=etag(b"B\n"), actor=user)
    restore_memory_version(user=user, sha256=sha(b"B\n"), if_match=etag(b"A\n"), actor=user)
    assert _memory(settings, user.pk) == b"B\n"
    listed = [(v.sha256, v.kind, v.replaced_by) for v in list_memory_versions(user=user)]
    assert listed == [
        (sha(b"A\n"), "user_restored", "user_restored"),
        (sha(b"B\n"), "user_edited", "user_restored"),
    ]


def test_a_restore_with_a_stale_etag_is_a_conflict_and_changes_nothing(settings):
    user = memory_user()
    _write(user, b"A\n")
    _write(user, b"B\n")
    stale = read_memory_file(user=user).etag
    remember_memory(context_for(_agent_run(user)), "an agent's fact since")
    before_file, before_kept = _memory(settings, user.pk), _kept(settings, user.pk)
    events = MemoryEvent.objects.count()
    for if_match in (stale, "*", ""):
        with pytest.raises(MemoryConflict) as excinfo:
            restore_memory_version(user=user, sha256=sha(b"A\n"), if_match=if_match, actor=user)
        assert excinfo.value.reason == "stale"
    assert _memory(settings, user.pk) == before_file
    assert _kept(settings, user.pk) == before_kept
    assert MemoryEvent.objects.count() == events


def test_restoring_the_current_file_changes_and_records_nothing(settings):
    user = memory_user()
    _write(user, b"A\n")
    _write(user, b"B\n")
    _write(user, b"A\n")
    events = MemoryEvent.objects.count()
    restored = restore_memory_version(
        user=user, sha256=sha(b"A\n"), if_match=etag(b"A\n"), actor=user
    )
    assert restored.etag == etag(b"A\n")
    assert MemoryEvent.objects.count() == events


def test_a_restore_works_with_the_switch_off_and_a_broken_current_file(settings):
    user = memory_user(enable_memory=False)
    _write(user, b"A\n")
    _write(user, b"B\n")
    broken = b"\xff" * 10
    Workspace.for_user(user.pk).replace_authorized_file(MEMORY_RELPATH, broken)
    restore_memory_version(user=user, sha256=sha(b"A\n"), if_match=etag(broken), actor=user)
    assert _memory(settings, user.pk) == b"A\n"


# -- forget ----------------------------------------------------------------------------------


def test_forgetting_removes_every_kept_file_and_keeps_memory(settings):
    user = memory_user()
    for text in (b"A\n", b"B\n", b"C\n", b"D\n"):
        _write(user, text)
    leftover = _agents(settings, user.pk) / ".memory-versions" / ".deadbeef.1234.tmp"
    leftover.write_bytes(b"a dead writer's temp file\n")
    assert len(_kept(settings, user.pk)) == 4
    forget_memory_versions(user=user, actor=user)
    assert _kept(settings, user.pk) == {}
    assert _memory(settings, user.pk) == b"D\n"
    event = MemoryEvent.objects.filter(user=user).latest("id")
    assert (event.kind, event.before_sha256, event.after_sha256, event.size_bytes) == (
        "versions_forgotten",
        sha(b"D\n"),
        sha(b"D\n"),
        2,
    )
    assert list_memory_versions(user=user) == []
    with pytest.raises(MemoryVersionNotFound):
        read_memory_version(user=user, sha256=sha(b"A\n"))
    # What is replaced after the forgetting is listed again, and only that.
    _write(user, b"E\n")
    assert [(v.sha256, v.kind) for v in list_memory_versions(user=user)] == [
        (sha(b"D\n"), "user_edited")
    ]


def test_forgetting_is_durable_the_versions_directory_is_fsynced(settings, monkeypatch):
    user = memory_user()
    _write(user, b"A\n")
    _write(user, b"B\n")
    synced: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real_fsync(fd)

    monkeypatch.setattr(workspace_writes.os, "fsync", recording_fsync)
    forget_memory_versions(user=user, actor=user)
    assert synced == [str(_agents(settings, user.pk) / ".memory-versions")]


def test_forgetting_with_nothing_kept_is_recorded_and_creates_no_directory(settings):
    user = memory_user()
    forget_memory_versions(user=user, actor=user)
    assert MemoryEvent.objects.get(user=user).kind == "versions_forgotten"
    assert not (_agents(settings, user.pk) / ".memory-versions").exists()


def test_forgetting_for_an_inactive_user_is_denied():
    user = memory_user()
    _write(user, b"A\n")
    _write(user, b"B\n")
    type(user).objects.filter(pk=user.pk).update(is_active=False)
    with pytest.raises(MemoryAccessDenied):
        forget_memory_versions(user=user, actor=user)
    assert read_memory_version(user=user, sha256=sha(b"A\n")) == b"A\n"


# -- the agent never reads versions -------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_an_agent_replacements_old_text_is_kept_but_absent_from_the_next_prompt(settings):
    user = memory_user()
    remember_memory(context_for(_agent_run(user)), "I drink oolong tea")
    remember_memory(
        context_for(_agent_run(user)), "I drink green tea", replaces="I drink oolong tea"
    )
    [version] = list_memory_versions(user=user)
    assert b"oolong" in read_memory_version(user=user, sha256=version.sha256)
    model = RecordingModel()
    chat(user_id=user.pk, message="what do you remember?", model=model)
    seen = "\n".join(m.text for call in model.calls for m in call["messages"])
    assert "I drink green tea" in seen
    assert "oolong" not in seen


def test_versions_live_in_the_workspace_folder_the_contract_names(settings):
    user = memory_user()
    _write(user, b"A\n")
    _write(user, b"B\n")
    assert MEMORY_VERSIONS_DIR == "agents/.memory-versions"
    assert os.listdir(settings.WORKSPACE_ROOT / str(user.pk) / MEMORY_VERSIONS_DIR) == [sha(b"A\n")]


def test_a_user_with_no_memory_has_no_versions():
    assert list_memory_versions(user=UserFactory()) == []


# -- racing writers ------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_eight_racing_agent_appends_and_a_clear_keep_every_file_they_replaced(settings):
    """Real separate connections: each writer keeps what it replaced under the locks, so the
    kept versions are exactly the ledger's before-states, each byte-for-byte its hash."""
    settings.MEMORY_VERSIONS_KEPT = 20
    user = memory_user()
    _write(user, b"seed\n")
    runs = [_agent_run(user) for _ in range(8)]

    def write(index: int) -> None:
        if index == 8:
            clear_memory(user=user, actor=user)
        else:
            remember_memory(context_for(runs[index]), f"agent fact {index}")

    race(write, [(i,) for i in range(9)])
    kept = _kept(settings, user.pk)
    befores = set(
        MemoryEvent.objects.filter(user=user)
        .exclude(before_sha256=EMPTY_SHA256)
        .values_list("before_sha256", flat=True)
    )
    # The seed and every state a racer left, each replaced once, but the empty file the clear
    # left (replaced by the next append) unless the clear came last.
    cleared_last = MemoryEvent.objects.filter(user=user).latest("id").kind == "user_cleared"
    assert len(befores) == (9 if cleared_last else 8)
    assert set(kept) == befores
    assert all(sha(data) == name for name, data in kept.items())
    # Undo the whole race: the seed comes back byte-for-byte.
    current = read_memory_file(user=user).etag
    restore_memory_version(user=user, sha256=sha(b"seed\n"), if_match=current, actor=user)
    assert _memory(settings, user.pk) == b"seed\n"
