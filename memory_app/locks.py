"""The locks every memory writer takes, in one order: the per-user advisory lock (taken in one
round trip with the waits' bound), the file fence (an exclusive flock on `agents/.memory.lock`)
and the ledger row, the last statement before a rename and so the proof that the session
still holds its locks. `hold_memory_locks` holds both locks for work that must exclude every
memory writer of a user.

A leaf: it imports only the workspace, the models and the errors. Lock SQL is parameterized;
the key derivation is PostgreSQL's `hashtextextended` of `MEMORY_LOCK_PREFIX` + uid.
"""

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from functools import cache

from django.db import connection

from memory_app.conf import setting
from memory_app.errors import MemoryUnavailable, memory_errors
from memory_app.models import MemoryEvent
from memory_app.workspace import Workspace
from memory_app.workspace.paths import MEMORY_LOCK_RELPATH

# Advisory lock names are this prefix plus the uid, hashed by PostgreSQL (see `_LOCK_SQL`).
MEMORY_LOCK_PREFIX = "yuxi-memory:"

# One round trip: remember the caller's settings, bound the waits that follow (the advisory
# lock here, the run row lock next) and take the lock. Target-list entries are evaluated in
# order, so the timeout is set before the lock is waited for. A NULL second parameter leaves
# synchronous_commit as it is.
_LOCK_SQL = (
    "SELECT current_setting('lock_timeout'), current_setting('synchronous_commit'), "
    "set_config('lock_timeout', %s, true), "
    "set_config('synchronous_commit', COALESCE(%s, current_setting('synchronous_commit')), true),"
    " pg_advisory_xact_lock(hashtextextended(%s, 0))"
)
_SET_LOCK_TIMEOUT_SQL = "SELECT set_config('lock_timeout', %s, true)"


@cache
def _ledger_sql() -> str:
    """The ledger row, restoring the transaction's durable commit in the same statement."""
    return (
        "WITH durable AS (SELECT set_config('synchronous_commit', %s, true)) "
        f'INSERT INTO "{MemoryEvent._meta.db_table}" '
        '("user_id", "kind", "actor_id", "run_id", "before_sha256", "after_sha256", '
        '"size_bytes") SELECT %s, %s, %s, %s, %s, %s, %s FROM durable'
    )


@dataclass(frozen=True)
class CallerSettings:
    """The transaction's settings from before the advisory lock changed them: its own
    `lock_timeout` to give back, and the `synchronous_commit` the ledger row restores."""

    lock_timeout: str
    synchronous_commit: str


def memory_lock_key(uid: str) -> int:
    """The 64-bit advisory lock key of `uid`'s memory, so operators and tests can hold it."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT hashtextextended(%s, 0)", [MEMORY_LOCK_PREFIX + uid])
        return cursor.fetchone()[0]


def _lock_timeout_ms() -> int:
    timeout_ms = int(setting("MEMORY_LOCK_TIMEOUT_MS"))
    if timeout_ms <= 0:
        raise MemoryUnavailable("MEMORY_LOCK_TIMEOUT_MS must be positive")
    return timeout_ms


def take_memory_lock(uid: str, *, owns_transaction: bool) -> CallerSettings:
    """Wait (bounded by `MEMORY_LOCK_TIMEOUT_MS`) for `uid`'s transaction advisory lock.

    The timeout stays set for the rest of the transaction, so it also bounds the run row lock
    that follows. A transaction the write path opened waits for no WAL flush until its ledger
    row asks for it back (a write that changed nothing only marked a row, and a crash releases
    the locks anyway); a caller's transaction keeps its own durability.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            _LOCK_SQL,
            [
                f"{_lock_timeout_ms()}ms",
                "off" if owns_transaction else None,
                MEMORY_LOCK_PREFIX + uid,
            ],
        )
        lock_timeout, synchronous_commit = cursor.fetchone()[:2]
    return CallerSettings(lock_timeout=lock_timeout, synchronous_commit=synchronous_commit)


def restore_lock_timeout(caller: CallerSettings) -> None:
    """Give a caller's transaction back its own `lock_timeout`."""
    with connection.cursor() as cursor:
        cursor.execute(_SET_LOCK_TIMEOUT_SQL, [caller.lock_timeout])


@contextmanager
def file_fence(workspace: Workspace) -> Iterator[None]:
    """The exclusive flock on `agents/.memory.lock`, bounded by `MEMORY_LOCK_TIMEOUT_MS`."""
    with workspace.locked(MEMORY_LOCK_RELPATH, timeout_seconds=_lock_timeout_ms() / 1000):
        yield


def record_event(
    caller: CallerSettings,
    *,
    user_id: int,
    kind: str,
    actor_id: int | None,
    run_id: int | None,
    before: str,
    after: str,
    size_bytes: int,
) -> None:
    """The ledger row: the last statement before a rename, so also the liveness check.

    If the session died (its locks with it), this fails and the caller publishes nothing.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            _ledger_sql(),
            [caller.synchronous_commit, user_id, kind, actor_id, run_id, before, after, size_bytes],
        )


@contextmanager
def hold_memory_locks(*, user_id: int) -> Iterator[Workspace]:
    """Hold `user_id`'s advisory lock (until the transaction ends) and file lock (until exit).

    For work that must exclude every memory writer of the user, erasure included; use inside
    `transaction.atomic()`. Both waits are bounded by `MEMORY_LOCK_TIMEOUT_MS`: a timeout is
    `MemoryUnavailable`. The user's state is not checked here (erasure holds the locks for an
    inactive user); the caller's own `lock_timeout` is back in force inside the block.
    """
    if not connection.in_atomic_block:
        raise RuntimeError("hold_memory_locks must be used inside transaction.atomic()")
    workspace = Workspace.for_user(user_id)
    with ExitStack() as stack:
        # Only the waits are translated: the caller's own errors inside the block pass as raised.
        with memory_errors():
            caller = take_memory_lock(str(workspace.uid), owns_transaction=False)
            restore_lock_timeout(caller)
            stack.enter_context(file_fence(workspace))
        yield workspace
