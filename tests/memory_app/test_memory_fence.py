"""The file fence: a writer whose database session died can never publish over a later one."""

import os
import threading
import time

import pytest
from django.db import connection

from memory_app.models import MemoryEvent
from memory_app.selectors import read_memory_file
from memory_app.services import (
    MemoryUnavailable,
    MemoryWriteResult,
    hold_memory_locks,
    publish,
    remember_memory,
    write_memory_file,
)
from memory_app.workspace import Workspace
from memory_app.workspace import locking as workspace_locking
from memory_app.workspace.paths import MEMORY_RELPATH
from tests.factories import ConversationFactory, RunningAgentRunFactory, context_for, memory_user
from tests.memory_app.helpers import sha

pytestmark = pytest.mark.django_db(transaction=True)

SEED = b"# Memory\nPrefers tea.\n"
WAIT_SECONDS = 30


def _agents(settings, uid: int):
    return settings.WORKSPACE_ROOT / str(uid) / "agents"


def _new_connection():
    raw = connection.get_new_connection(connection.get_connection_params())
    raw.autocommit = True
    return raw


def _wait_until(raw, sql: str, params: list) -> None:
    """Poll (never assert on time) until `sql` returns a true first column."""
    for _ in range(3000):
        if raw.execute(sql, params).fetchone()[0]:
            return
        time.sleep(0.01)
    raise AssertionError(f"condition never became true: {sql}")


class _Writer(threading.Thread):
    """One write on its own connection, reporting its backend pid and its outcome."""

    def __init__(self, write) -> None:
        super().__init__()
        self.write = write
        self.pid = None
        self.connected = threading.Event()
        self.outcome = None

    def run(self) -> None:
        try:
            connection.ensure_connection()
            self.pid = connection.connection.info.backend_pid
            self.connected.set()
            self.outcome = self.write()
        except Exception as exc:
            self.outcome = exc
        finally:
            self.connected.set()
            connection.close()


def _start(write) -> _Writer:
    writer = _Writer(write)
    writer.start()
    assert writer.connected.wait(WAIT_SECONDS)
    return writer


class _Pause:
    """Stops one chosen thread at a hook until released; tells when it got there."""

    def __init__(self) -> None:
        self.thread: threading.Thread | None = None
        self.reached = threading.Event()
        self.release = threading.Event()

    def __call__(self) -> None:
        if threading.current_thread() is self.thread:
            self.reached.set()
            assert self.release.wait(WAIT_SECONDS)


@pytest.fixture
def pause_before_ledger(monkeypatch) -> _Pause:
    """Pause the chosen writer after its temp file is durable, before its ledger row."""
    pause = _Pause()
    real = publish.record_event

    def paused(*args, **kwargs):
        pause()
        return real(*args, **kwargs)

    monkeypatch.setattr(publish, "record_event", paused)
    return pause


@pytest.fixture
def flock_waiters(monkeypatch) -> dict[threading.Thread, threading.Event]:
    """`flock_waiters[thread]` is set once that thread found the file lock held by another."""
    waiting: dict[threading.Thread, threading.Event] = {}
    real = workspace_locking.fcntl.flock

    def observed(fd, operation):
        try:
            return real(fd, operation)
        except BlockingIOError:
            waiting.setdefault(threading.current_thread(), threading.Event()).set()
            raise

    monkeypatch.setattr(workspace_locking.fcntl, "flock", observed)
    return waiting


def _wait_for_flock_wait(waiters, thread) -> None:
    for _ in range(3000):
        if thread in waiters:
            return
        time.sleep(0.01)
    raise AssertionError("the second writer never waited on the file lock")


@pytest.fixture
def user_with_two_runs():
    user = memory_user()
    runs = [RunningAgentRunFactory(conversation=ConversationFactory(user=user)) for _ in (1, 2)]
    Workspace.for_user(user.pk).replace_authorized_file(MEMORY_RELPATH, SEED)
    return user, runs


def _agent_write(run, fact: str):
    return lambda: remember_memory(context_for(run), fact)


def _user_write(user, text: bytes, etag: str):
    return lambda: write_memory_file(user=user, text=text.decode(), if_match=etag, actor=user)


@pytest.mark.parametrize(
    "holder_kind, waiter_kind", [("agent", "agent"), ("user", "agent"), ("agent", "user")]
)
@pytest.mark.backend_pid
def test_a_holder_whose_backend_died_mid_publish_never_overwrites_the_next_writer(
    settings, user_with_two_runs, pause_before_ledger, flock_waiters, holder_kind, waiter_kind
):
    user, (run_a, run_b) = user_with_two_runs
    seed_etag = read_memory_file(user=user).etag
    holder_text = SEED + b"holder's edit\n"
    writes = {
        "holder": {
            "agent": _agent_write(run_a, "holder's fact"),
            "user": _user_write(user, holder_text, seed_etag),
        }[holder_kind],
        "waiter": {
            "agent": _agent_write(run_b, "waiter's fact"),
            "user": _user_write(user, SEED + b"waiter's edit\n", seed_etag),
        }[waiter_kind],
    }
    probe = _new_connection()
    try:
        holder = _Writer(writes["holder"])
        pause_before_ledger.thread = holder
        holder.start()
        assert pause_before_ledger.reached.wait(WAIT_SECONDS)
        waiter = _start(writes["waiter"])
        # The holder's session dies while it holds every lock and its temp file is on disk.
        probe.execute("SELECT pg_terminate_backend(%s)", [holder.pid])
        _wait_for_flock_wait(flock_waiters, waiter)
        # The waiter got the database locks and now waits on the file lock the holder keeps.
        assert waiter.is_alive()
        pause_before_ledger.release.set()
        holder.join(WAIT_SECONDS)
        waiter.join(WAIT_SECONDS)
    finally:
        probe.close()
    assert isinstance(holder.outcome, MemoryUnavailable)
    final = (_agents(settings, user.pk) / "MEMORY.md").read_bytes()
    if waiter_kind == "agent":
        assert waiter.outcome == MemoryWriteResult(status="added", size_bytes=len(final))
        assert final == SEED + b"waiter's fact\n"
    else:
        assert waiter.outcome.text == final.decode() == (SEED + b"waiter's edit\n").decode()
    # No leftover: the file, its fence, and the one version both writers replaced (kept once).
    agents = _agents(settings, user.pk)
    assert sorted(os.listdir(agents)) == [".memory-versions", ".memory.lock", "MEMORY.md"]
    assert os.listdir(agents / ".memory-versions") == [sha(SEED)]
    events = list(
        MemoryEvent.objects.filter(user=user).values_list("before_sha256", "after_sha256")
    )
    assert events == [(sha(SEED), sha(final))]


@pytest.mark.backend_pid
def test_a_holder_paused_before_its_ledger_row_keeps_a_waiting_writer_out(
    settings, user_with_two_runs, pause_before_ledger, flock_waiters
):
    """Without a dead session the fence is just a lock: both facts land, in order."""
    user, (run_a, run_b) = user_with_two_runs
    holder = _Writer(_agent_write(run_a, "first"))
    pause_before_ledger.thread = holder
    holder.start()
    assert pause_before_ledger.reached.wait(WAIT_SECONDS)
    probe = _new_connection()
    try:
        waiter = _start(_agent_write(run_b, "second"))
        # Alive, the holder keeps its advisory lock: the waiter waits on the database first.
        _wait_until(
            probe,
            "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = %s AND NOT granted)",
            [waiter.pid],
        )
        pause_before_ledger.release.set()
        holder.join(WAIT_SECONDS)
        waiter.join(WAIT_SECONDS)
    finally:
        probe.close()
    assert (holder.outcome.status, waiter.outcome.status) == ("added", "added")
    assert (_agents(settings, user.pk) / "MEMORY.md").read_bytes() == SEED + b"first\nsecond\n"


def test_a_file_lock_held_past_the_timeout_is_unavailable_and_changes_nothing(
    settings, user_with_two_runs
):
    settings.MEMORY_LOCK_TIMEOUT_MS = 100
    user, (run, _) = user_with_two_runs
    lock = os.open(_agents(settings, user.pk) / ".memory.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        workspace_locking.fcntl.flock(lock, workspace_locking.fcntl.LOCK_EX)
        with pytest.raises(MemoryUnavailable):
            remember_memory(context_for(run), "blocked")
        with pytest.raises(MemoryUnavailable):
            write_memory_file(
                user=user, text="x", if_match=read_memory_file(user=user).etag, actor=user
            )
    finally:
        os.close(lock)
    assert (_agents(settings, user.pk) / "MEMORY.md").read_bytes() == SEED
    assert remember_memory(context_for(run), "free again").status == "added"


def test_the_lock_file_is_private_and_a_planted_symlink_is_refused(settings, tmp_path):
    from memory_app.services import MemoryAccessDenied

    user = memory_user()
    run = RunningAgentRunFactory(conversation=ConversationFactory(user=user))
    remember_memory(context_for(run), "fact")
    lock = _agents(settings, user.pk) / ".memory.lock"
    assert (lock.stat().st_mode & 0o777, lock.stat().st_size) == (0o600, 0)
    lock.unlink()
    target = tmp_path / "elsewhere"
    target.write_bytes(b"")
    lock.symlink_to(target)
    with pytest.raises(MemoryAccessDenied):
        remember_memory(context_for(run), "another fact")
    assert (_agents(settings, user.pk) / "MEMORY.md").read_bytes() == b"fact\n"


def test_hold_memory_locks_excludes_every_writer_until_it_ends(settings, user_with_two_runs):
    from django.db import transaction

    settings.MEMORY_LOCK_TIMEOUT_MS = 200
    user, (run, _) = user_with_two_runs
    held = threading.Event()
    done = threading.Event()

    def hold() -> None:
        try:
            with transaction.atomic(), hold_memory_locks(user_id=user.pk) as workspace:
                assert workspace == Workspace.for_user(user.pk)
                held.set()
                assert done.wait(WAIT_SECONDS)
        finally:
            connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(WAIT_SECONDS)
        with pytest.raises(MemoryUnavailable):
            remember_memory(context_for(run), "blocked")
    finally:
        done.set()
        holder.join(WAIT_SECONDS)
    assert remember_memory(context_for(run), "free again").status == "added"


def test_hold_memory_locks_outside_a_transaction_is_a_programming_error(user_with_two_runs):
    user, _ = user_with_two_runs
    with pytest.raises(RuntimeError), hold_memory_locks(user_id=user.pk):
        pass


def test_a_lock_path_that_is_a_directory_is_refused(settings, user_with_two_runs):
    from memory_app.services import MemoryAccessDenied

    user, (run, _) = user_with_two_runs
    (_agents(settings, user.pk) / ".memory.lock").mkdir()
    with pytest.raises(MemoryAccessDenied):
        remember_memory(context_for(run), "fact")
    assert (_agents(settings, user.pk) / "MEMORY.md").read_bytes() == SEED


def test_hold_memory_locks_lets_the_callers_own_errors_through(user_with_two_runs):
    from django.db import DatabaseError, transaction

    user, _ = user_with_two_runs
    with (
        pytest.raises(DatabaseError),
        transaction.atomic(),
        hold_memory_locks(user_id=user.pk),
        connection.cursor() as cursor,
    ):
        cursor.execute("SELECT 1/0")
