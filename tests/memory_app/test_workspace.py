import os
import random
import signal
import socket
import stat
import time

import pytest

from memory_app.workspace import Workspace, WorkspaceError, WorkspacePathRefused
from memory_app.workspace import errors as workspace_errors
from memory_app.workspace import reads as workspace_reads
from memory_app.workspace import writes as workspace_writes
from memory_app.workspace.paths import MEMORY_RELPATH


@pytest.fixture
def ws(settings):
    return Workspace.for_user(7)


def _agents_dir(settings, uid: int = 7):
    return settings.WORKSPACE_ROOT / str(uid) / "agents"


def _listing(path) -> list[str]:
    return sorted(os.listdir(path))


def test_for_user_accepts_an_int_or_its_canonical_digits_and_reads_the_root_at_call_time(
    settings, tmp_path
):
    assert Workspace.for_user("12") == Workspace.for_user(12)
    settings.WORKSPACE_ROOT = tmp_path / "elsewhere"
    assert Workspace.for_user(12).root == tmp_path / "elsewhere"


@pytest.mark.parametrize("uid", ["", "../1", "1/..", "007", "1a", "-1", -1, True, None, "٣"])
def test_for_user_refuses_a_uid_that_is_not_plain_digits(uid):
    with pytest.raises(WorkspacePathRefused):
        Workspace.for_user(uid)


def test_publish_creates_missing_private_directories_and_a_private_file(ws, settings):
    ws.replace_authorized_file(MEMORY_RELPATH, "记住 🥜\n".encode())
    agents = _agents_dir(settings)
    assert (agents / "MEMORY.md").read_bytes() == "记住 🥜\n".encode()
    assert stat.S_IMODE((agents / "MEMORY.md").stat().st_mode) == 0o600
    assert stat.S_IMODE(agents.stat().st_mode) == 0o700
    assert stat.S_IMODE(agents.parent.stat().st_mode) == 0o700
    assert _listing(agents) == ["MEMORY.md"]


def test_publish_replaces_the_whole_file_and_leaves_no_temp_or_backup_file(ws, settings):
    ws.replace_authorized_file(MEMORY_RELPATH, b"old content that is longer\n")
    ws.replace_authorized_file(MEMORY_RELPATH, b"new\n")
    assert (_agents_dir(settings) / "MEMORY.md").read_bytes() == b"new\n"
    assert _listing(_agents_dir(settings)) == ["MEMORY.md"]


def _leave_crash_leftovers(directory) -> list[str]:
    """What a publisher killed mid-publish leaves: a temp file and a backup hard link."""
    (directory / ".MEMORY.md.0123456789abcdef.tmp").write_bytes(b"half-written new memor")
    os.link(directory / "MEMORY.md", directory / ".MEMORY.md.0123456789abcdef.old")
    return [".MEMORY.md.0123456789abcdef.old", ".MEMORY.md.0123456789abcdef.tmp"]


def test_a_publish_removes_leftovers_of_publishers_that_died_long_ago(ws, settings, monkeypatch):
    ws.replace_authorized_file(MEMORY_RELPATH, b"secret I later delete\n")
    _leave_crash_leftovers(_agents_dir(settings))
    # A negative threshold puts "long ago" in the future: every leftover counts as stale.
    monkeypatch.setattr(workspace_writes, "STALE_LEFTOVER_SECONDS", -60)
    ws.replace_authorized_file(MEMORY_RELPATH, b"new\n")
    assert _listing(_agents_dir(settings)) == ["MEMORY.md"]


def test_a_publish_keeps_recent_leftovers_that_may_belong_to_a_live_publish(ws, settings):
    ws.replace_authorized_file(MEMORY_RELPATH, b"old\n")
    leftovers = _leave_crash_leftovers(_agents_dir(settings))
    ws.replace_authorized_file(MEMORY_RELPATH, b"new\n")
    assert _listing(_agents_dir(settings)) == sorted([*leftovers, "MEMORY.md"])


def test_read_of_a_missing_file_or_directory_is_empty(ws, settings):
    assert ws.read_bounded(MEMORY_RELPATH, 10) == (b"", False)
    ws.replace_authorized_file("agents/USER.md", b"x")
    assert ws.read_bounded(MEMORY_RELPATH, 10) == (b"", False)


@pytest.mark.parametrize(
    ("size", "expected"), [(0, (b"", False)), (4, (b"abcd", False)), (5, (b"abcd", True))]
)
def test_read_bounded_flags_truncation_exactly_past_the_limit(ws, size, expected):
    ws.replace_authorized_file(MEMORY_RELPATH, b"abcdefgh"[:size])
    assert ws.read_bounded(MEMORY_RELPATH, 4) == expected


def test_read_bounded_never_reads_more_than_one_byte_past_the_limit(ws, os_read_sizes):
    ws.replace_authorized_file(MEMORY_RELPATH, os.urandom(10 * 1024 * 1024))
    data, truncated = ws.read_bounded(MEMORY_RELPATH, 100_000)
    assert (len(data), truncated) == (100_000, True)
    assert sum(os_read_sizes) <= 100_001


@pytest.mark.parametrize(
    "relpath", ["", "/etc/passwd", "../8/agents/MEMORY.md", "agents/../../x", "agents//MEMORY.md",
                "./agents/MEMORY.md", "agents/", "agents/MEMORY.md\x00.txt"]
)  # fmt: skip
def test_paths_escaping_the_workspace_are_refused_for_reads_and_writes(ws, settings, relpath):
    with pytest.raises(WorkspacePathRefused):
        ws.read_bounded(relpath, 10)
    with pytest.raises(WorkspacePathRefused):
        ws.replace_authorized_file(relpath, b"x")
    assert not os.path.exists(settings.WORKSPACE_ROOT / "8")


def test_a_symlink_at_the_file_is_refused_and_its_target_never_written(ws, settings, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"precious")
    agents = _agents_dir(settings)
    agents.mkdir(parents=True)
    (agents / "MEMORY.md").symlink_to(victim)
    with pytest.raises(WorkspacePathRefused):
        ws.read_bounded(MEMORY_RELPATH, 100)
    with pytest.raises(WorkspacePathRefused):
        ws.replace_authorized_file(MEMORY_RELPATH, b"overwritten")
    assert victim.read_bytes() == b"precious"
    assert (agents / "MEMORY.md").is_symlink()
    assert _listing(agents) == ["MEMORY.md"]


@pytest.mark.parametrize("component", ["7", "7/agents"])
def test_a_symlinked_directory_component_is_refused(ws, settings, tmp_path, component):
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "agents").mkdir(parents=True)
    (elsewhere / "agents" / "MEMORY.md").write_bytes(b"outside")
    link = settings.WORKSPACE_ROOT / component
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(elsewhere if component == "7" else elsewhere / "agents")
    with pytest.raises(WorkspacePathRefused):
        ws.read_bounded(MEMORY_RELPATH, 100)
    with pytest.raises(WorkspacePathRefused):
        ws.replace_authorized_file(MEMORY_RELPATH, b"overwritten")
    assert (elsewhere / "agents" / "MEMORY.md").read_bytes() == b"outside"
    assert _listing(elsewhere / "agents") == ["MEMORY.md"]


def test_a_fifo_or_directory_at_the_file_is_refused_without_blocking(ws, settings):
    agents = _agents_dir(settings)
    agents.mkdir(parents=True)
    os.mkfifo(agents / "MEMORY.md")
    (agents / "USER.md").mkdir()
    for relpath in (MEMORY_RELPATH, "agents/USER.md"):
        with pytest.raises(WorkspacePathRefused):
            ws.read_bounded(relpath, 100)
        with pytest.raises(WorkspacePathRefused):
            ws.replace_authorized_file(relpath, b"x")
    assert _listing(agents) == ["MEMORY.md", "USER.md"]


def test_a_unix_socket_at_the_file_is_refused_like_any_non_regular_file(ws, settings, monkeypatch):
    agents = _agents_dir(settings)
    agents.mkdir(parents=True)
    monkeypatch.chdir(agents)  # a socket path must be short: bind it relative to its directory
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind("MEMORY.md")
        with pytest.raises(WorkspacePathRefused):
            ws.read_bounded(MEMORY_RELPATH, 100)
        with pytest.raises(WorkspacePathRefused):
            ws.replace_authorized_file(MEMORY_RELPATH, b"x")
    assert stat.S_ISSOCK(os.lstat(agents / "MEMORY.md").st_mode)


def test_a_file_where_a_directory_must_be_is_refused(ws, settings):
    settings.WORKSPACE_ROOT.mkdir(parents=True)
    (settings.WORKSPACE_ROOT / "7").write_bytes(b"not a directory")
    with pytest.raises(WorkspacePathRefused):
        ws.replace_authorized_file(MEMORY_RELPATH, b"x")
    assert (settings.WORKSPACE_ROOT / "7").read_bytes() == b"not a directory"


def _fail_once(monkeypatch, name: str, should_fail) -> list[tuple]:
    """Make `os.<name>` raise EIO inside the workspace's writes when `should_fail(*args)`."""
    calls = []
    real = getattr(os, name)

    def injected(*args, **kwargs):
        calls.append(args)
        if should_fail(*args, **kwargs):
            raise OSError(5, "Input/output error")
        return real(*args, **kwargs)

    monkeypatch.setattr(workspace_writes.os, name, injected)
    return calls


def _is_dir_fd(fd: int) -> bool:
    return stat.S_ISDIR(os.fstat(fd).st_mode)


FAULTS = {
    "temp create": ("open", lambda path, flags, *a, **k: bool(flags & os.O_CREAT)),
    "write": ("write", lambda fd, data: True),
    "file fsync": ("fsync", lambda fd: not _is_dir_fd(fd)),
    "rename": ("rename", lambda src, dst, **k: True),
    "directory fsync": ("fsync", lambda fd: _is_dir_fd(fd)),
}


@pytest.mark.parametrize("step", FAULTS)
def test_a_failure_at_any_publish_step_keeps_the_old_file_and_leaves_no_temp(
    ws, settings, monkeypatch, step
):
    ws.replace_authorized_file(MEMORY_RELPATH, b"old facts\n")
    name, should_fail = FAULTS[step]
    calls = _fail_once(monkeypatch, name, should_fail)
    with pytest.raises(WorkspaceError) as excinfo:
        ws.replace_authorized_file(MEMORY_RELPATH, b"new facts\n")
    assert not isinstance(excinfo.value, WorkspacePathRefused)
    monkeypatch.undo()
    assert (_agents_dir(settings) / "MEMORY.md").read_bytes() == b"old facts\n"
    assert _listing(_agents_dir(settings)) == ["MEMORY.md"]
    if name == "fsync":
        # One fsync per descriptor: a failed one is never retried on the same fd.
        assert len(calls) == len({fd for (fd,) in calls})


@pytest.mark.parametrize("step", FAULTS)
def test_a_failed_first_publish_leaves_no_file_at_all(ws, settings, monkeypatch, step):
    name, should_fail = FAULTS[step]
    _fail_once(monkeypatch, name, should_fail)
    with pytest.raises(WorkspaceError):
        ws.replace_authorized_file(MEMORY_RELPATH, b"first facts\n")
    monkeypatch.undo()
    assert _listing(_agents_dir(settings)) == []


def _generation(n: int) -> bytes:
    """A distinctive, self-checking content: the header names the generation of every line."""
    line = f"generation {n:06d} " + "记" * 40 + "\n"
    return line.encode() * (200 + n % 50)


def test_a_writer_killed_at_random_moments_leaves_a_complete_old_or_new_file(ws, settings):
    rng = random.Random(20261130)
    generations = 0
    ws.replace_authorized_file(MEMORY_RELPATH, _generation(0))
    target = _agents_dir(settings) / "MEMORY.md"
    kills = 60
    for kill in range(kills):
        start = generations + 1
        pid = os.fork()
        if pid == 0:  # the child publishes new generations until it is killed
            try:
                n = start
                while True:
                    ws.replace_authorized_file(MEMORY_RELPATH, _generation(n))
                    n += 1
            finally:
                os._exit(1)
        # A random moment: the child is somewhere in one of its publishes.
        time.sleep(rng.uniform(0.0005, 0.02))
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        assert os.WIFSIGNALED(status), f"kill {kill}: the writer exited on its own"
        data = target.read_bytes()
        n = int(data[len("generation ") : len("generation ") + 6])
        assert data == _generation(n), f"kill {kill}: torn file"
        assert n >= generations
        generations = n
    # The leftovers of a killed publish are only hidden temp or backup files, and there are
    # some: kills did land inside publishes, not only between them.
    leftovers = set(os.listdir(target.parent)) - {"MEMORY.md"}
    assert all(name.startswith(".MEMORY.md.") for name in leftovers)
    assert any(name.endswith(".tmp") for name in leftovers)
    assert generations > 0


# -- the file fence's lock, digests, removal -------------------------------------------------


def test_a_held_lock_keeps_a_second_acquisition_out_until_released(ws, settings):
    import threading

    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with ws.locked("agents/.memory.lock", timeout_seconds=5):
            held.set()
            assert release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(30)
        # Another open of the same file in the same process is another lock owner.
        with (
            pytest.raises(workspace_errors.WorkspaceLockTimeout),
            ws.locked("agents/.memory.lock", timeout_seconds=0.05),
        ):
            pass
    finally:
        release.set()
        holder.join(30)
    with ws.locked("agents/.memory.lock", timeout_seconds=0.05):
        pass
    lock = _agents_dir(settings) / ".memory.lock"
    assert stat.S_IMODE(lock.stat().st_mode) == 0o600


def test_a_symlink_at_the_lock_path_is_refused_and_its_target_untouched(ws, settings, tmp_path):
    target = tmp_path / "target"
    target.write_bytes(b"keep")
    _agents_dir(settings).mkdir(parents=True)
    (_agents_dir(settings) / ".memory.lock").symlink_to(target)
    with (
        pytest.raises(WorkspacePathRefused),
        ws.locked("agents/.memory.lock", timeout_seconds=0.05),
    ):
        pass
    assert target.read_bytes() == b"keep"


def test_read_digested_hashes_the_whole_file_and_keeps_only_the_bound(ws, os_read_sizes):
    import hashlib

    data = bytes(range(256)) * 1000
    ws.replace_authorized_file(MEMORY_RELPATH, data)
    os_read_sizes.clear()
    read = ws.read_digested(MEMORY_RELPATH, 100)
    assert (read.data, read.truncated, read.size_bytes) == (data[:100], True, len(data))
    assert read.sha256 == hashlib.sha256(data).hexdigest()
    assert max(os_read_sizes) <= workspace_reads.READ_CHUNK_BYTES
    missing = Workspace.for_user(8).read_digested(MEMORY_RELPATH, 100)
    assert (missing.data, missing.size_bytes) == (b"", 0)
    assert missing.sha256 == hashlib.sha256(b"").hexdigest()


def test_a_failing_before_rename_publishes_nothing_and_leaves_no_temp(ws, settings):
    ws.replace_authorized_file(MEMORY_RELPATH, b"old\n")

    def refuse() -> None:
        raise RuntimeError("session gone")

    with pytest.raises(RuntimeError):
        ws.publish(MEMORY_RELPATH, b"new\n", before_rename=refuse)
    assert _listing(_agents_dir(settings)) == ["MEMORY.md"]
    assert (_agents_dir(settings) / "MEMORY.md").read_bytes() == b"old\n"


def test_remove_tree_removes_the_users_workspace_and_nothing_else(ws, settings, tmp_path):
    ws.replace_authorized_file(MEMORY_RELPATH, b"fact\n")
    ws.replace_authorized_file("agents/deep/er/file.md", b"x")
    Workspace.for_user(8).replace_authorized_file(MEMORY_RELPATH, b"other\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.md").write_bytes(b"keep")
    (_agents_dir(settings) / "link").symlink_to(outside)
    ws.remove_tree()
    assert not (settings.WORKSPACE_ROOT / "7").exists()
    assert (outside / "keep.md").read_bytes() == b"keep"
    assert (_agents_dir(settings, 8) / "MEMORY.md").read_bytes() == b"other\n"
    ws.remove_tree()  # idempotent


def test_remove_tree_removes_a_symlink_at_the_uid_without_following_it(ws, settings, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.md").write_bytes(b"keep")
    settings.WORKSPACE_ROOT.mkdir(parents=True)
    (settings.WORKSPACE_ROOT / "7").symlink_to(outside)
    ws.remove_tree()
    assert not os.path.lexists(settings.WORKSPACE_ROOT / "7")
    assert (outside / "keep.md").read_bytes() == b"keep"


def test_remove_tree_of_a_missing_root_is_fine(ws):
    ws.remove_tree()


# -- listing and removing a directory's files (kept versions) ---------------------------------


def test_file_exists_is_no_follow_and_refuses_a_symlink(ws, settings, tmp_path):
    assert ws.file_exists("agents/.memory-versions/a") is False
    ws.replace_authorized_file("agents/.memory-versions/a", b"x")
    assert ws.file_exists("agents/.memory-versions/a") is True
    (_agents_dir(settings) / ".memory-versions" / "b").symlink_to(tmp_path / "missing")
    with pytest.raises(WorkspacePathRefused):
        ws.file_exists("agents/.memory-versions/b")


def test_file_sizes_lists_regular_files_only_and_refuses_a_symlinked_directory(
    ws, settings, tmp_path
):
    assert ws.file_sizes("agents/.memory-versions") == {}
    ws.replace_authorized_file("agents/.memory-versions/a", b"abc")
    directory = _agents_dir(settings) / ".memory-versions"
    (directory / "sub").mkdir()
    (directory / "link").symlink_to(directory / "a")
    assert ws.file_sizes("agents/.memory-versions") == {"a": 3}
    (_agents_dir(settings) / "elsewhere").symlink_to(directory, target_is_directory=True)
    with pytest.raises(WorkspacePathRefused):
        ws.file_sizes("agents/elsewhere")


def test_remove_files_except_removes_links_not_their_targets_and_keeps_what_it_is_told(
    ws, settings, tmp_path
):
    assert ws.remove_files_except("agents/.memory-versions", (), durable=True) == 0
    for name in ("keep", "drop"):
        ws.replace_authorized_file(f"agents/.memory-versions/{name}", name.encode())
    directory = _agents_dir(settings) / ".memory-versions"
    outside = tmp_path / "outside"
    outside.write_bytes(b"not the workspace's")
    (directory / "link").symlink_to(outside)
    (directory / "sub").mkdir()
    assert ws.remove_files_except("agents/.memory-versions", {"keep"}, durable=True) == 2
    assert _listing(directory) == ["keep", "sub"]
    assert outside.read_bytes() == b"not the workspace's"
    (_agents_dir(settings) / "elsewhere").symlink_to(directory, target_is_directory=True)
    with pytest.raises(WorkspacePathRefused):
        ws.remove_files_except("agents/elsewhere", (), durable=False)
    assert _listing(directory) == ["keep", "sub"]


@pytest.mark.parametrize("durable", [True, False])
def test_remove_files_except_fsyncs_the_directory_only_when_asked(ws, monkeypatch, durable):
    ws.replace_authorized_file("agents/.memory-versions/drop", b"x")
    synced: list[bool] = []
    real_fsync = os.fsync

    def recording_fsync(fd):
        synced.append(stat.S_ISDIR(os.fstat(fd).st_mode))
        return real_fsync(fd)

    monkeypatch.setattr(workspace_writes.os, "fsync", recording_fsync)
    assert ws.remove_files_except("agents/.memory-versions", (), durable=durable) == 1
    assert synced == ([True] if durable else [])
