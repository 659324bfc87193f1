"""Cost of the safe memory write next to its floor and its parts, and its throughput.

The floor is what no implementation of the write can avoid: a bare durable publish plus the
very statements `remember_memory` sends (advisory lock with its settings, run row lock, clock +
user + switch, the ledger row just before the rename), as one raw psycopg transaction. The
target is `remember_memory` <= 1.3x its floor.

It also shows what keeping the replaced version (for undo) adds to a write: the same writes
with `MEMORY_VERSIONS_KEPT` at 20 and at 0, side by side.

Run: .venv/bin/python bench/memory_write.py [latency] [throughput] [versions]   (default: all;
BENCH_DATABASE_URL picks the database). It creates its own users and runs under a temporary
workspace root, prints its figures, and removes everything it created.
"""

import multiprocessing
import os
import statistics
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path

from benchenv import setup_django

setup_django()

from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.db import connection, connections, transaction  # noqa: E402

from conversations import runs  # noqa: E402
from conversations.models import AgentRun, Conversation  # noqa: E402
from conversations.utils.db_functions import ClockTimestamp  # noqa: E402
from memory_app import authorization, locks  # noqa: E402
from memory_app.models import MemoryEventKind, UserConfig  # noqa: E402
from memory_app.runtime import ToolRuntimeContext  # noqa: E402
from memory_app.selectors import read_memory_file  # noqa: E402
from memory_app.services import remember_memory, write_memory_file  # noqa: E402
from memory_app.versions import MEMORY_VERSIONS_DIR  # noqa: E402
from memory_app.workspace import MEMORY_RELPATH, Workspace  # noqa: E402

LATENCY_SAMPLES = 200
THROUGHPUT_APPENDS = 160
WRITER_COUNTS = (1, 4, 16)
PREFIX = f"bench-{uuid.uuid4().hex[:8]}"


def _user(name: str):
    user = get_user_model().objects.create(username=f"{PREFIX}-{name}")
    UserConfig.objects.create(user=user, enable_memory=True)
    return user


def _context(user, name: str) -> ToolRuntimeContext:
    """A claimed top-level chat run of `user` with a long lease, as the Chat service makes."""
    conversation = Conversation.objects.create(thread_id=f"{PREFIX}-{name}", user=user)
    run = AgentRun.objects.create(
        user=user,
        conversation=conversation,
        request_id=f"{PREFIX}-{name}",
        status=AgentRun.Status.RUNNING,
        worker_id=f"worker-{name}",
        started_at=ClockTimestamp(),
        lease_expires_at=ClockTimestamp() + timedelta(hours=1),
    )
    return ToolRuntimeContext(
        uid=str(user.pk),
        thread_id=conversation.thread_id,
        run_id=str(run.run_id),
        request_id=run.request_id,
        worker_id=run.worker_id,
    )


def _timed(call, *args) -> float:
    start = time.perf_counter()
    call(*args)
    return (time.perf_counter() - start) * 1000


def _percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def _print_latencies(
    title: str, samples: dict[str, list[float]], rows: tuple[tuple[str, str], ...]
) -> dict[str, float]:
    """Print each row's median and p95 under `title`; returns the medians."""
    med = {name: statistics.median(values) for name, values in samples.items()}
    print(title)
    for name, label in rows:
        print(f"  {label:<42}{med[name]:>8.3f} {_percentile(samples[name], 0.95):>8.3f}")
    return med


def _one_commit(run_id: str) -> None:
    """One durable PostgreSQL commit: a transaction that locks a row, as the safe path does."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT 1 FROM conversations_agentrun WHERE run_id = %s FOR UPDATE", [run_id]
        )


class Floor:
    """`remember_memory`'s statements on a raw psycopg connection around a bare publish."""

    def __init__(self, ctx: ToolRuntimeContext) -> None:
        self.raw = connection.get_new_connection(connection.get_connection_params())
        self.uid, self.run_uuid = int(ctx.uid), uuid.UUID(ctx.run_id)
        self.run_pk = AgentRun.objects.get(run_id=self.run_uuid).pk
        self.workspace = Workspace.for_user(self.uid)
        self.timeout = f"{settings.MEMORY_LOCK_TIMEOUT_MS}ms"
        self.key = locks.MEMORY_LOCK_PREFIX + ctx.uid

    def _authorize(self) -> str:
        """The three statements before the file work; returns the caller's synchronous_commit."""
        held = self.raw.execute(locks._LOCK_SQL, [self.timeout, "off", self.key]).fetchone()
        self.raw.execute(runs._run_for_tool_sql(lock=True), [self.run_uuid]).fetchone()
        self.raw.execute(authorization._state_sql(), [self.uid, self.uid, self.uid]).fetchone()
        return held[1]

    def write(self, data: bytes, before: str) -> None:
        with self.raw.transaction():
            synchronous_commit = self._authorize()
            ledger = [
                synchronous_commit,
                self.uid,
                MemoryEventKind.AGENT_ADDED,
                None,
                self.run_pk,
                before,
                before,
                len(data),
            ]
            self.workspace.publish(
                MEMORY_RELPATH,
                data,
                before_rename=lambda: self.raw.execute(locks._ledger_sql(), ledger),
            )

    def unchanged(self) -> None:
        with self.raw.transaction():
            self._authorize()


def latency() -> None:
    """Interleave the paths call by call, rotating their order, so that drift, noise and the
    cost one call leaves to the next (dirty pages, journal commits) hit them alike.

    With `MEMORY_VERSIONS_KEPT=0`: the floor publishes no kept version, and what keeping one
    adds is `versions()`'s figure."""
    kept = settings.MEMORY_VERSIONS_KEPT
    settings.MEMORY_VERSIONS_KEPT = 0
    try:
        _latency()
    finally:
        settings.MEMORY_VERSIONS_KEPT = kept


def _latency() -> None:
    ctx = _context(_user("latency"), "latency")
    floor = Floor(_context(_user("floor"), "floor"))
    other_run = _context(_user("commit"), "commit").run_id
    bare = Workspace.for_user(10**12)  # a uid no bench user has
    plain = Path(settings.WORKSPACE_ROOT) / "plain" / "MEMORY.md"
    plain.parent.mkdir(parents=True)
    samples: dict[str, list[float]] = {
        "safe": [],
        "floor": [],
        "unchanged": [],
        "floor_unchanged": [],
        "publish": [],
        "write_text": [],
        "commit": [],
    }
    names = list(samples)
    # Warm up, and give the first "unchanged" call a fact that is already there.
    remember_memory(ctx, "benchmark fact number -1 记住 🥜")
    for i in range(LATENCY_SAMPLES):
        fact = f"benchmark fact number {i} 记住 🥜"
        # The same bytes the safe path is about to publish.
        current, _ = Workspace.for_user(ctx.uid).read_bounded(MEMORY_RELPATH, 1 << 20)
        data = current + f"{fact}\n".encode()
        calls = {
            "safe": (remember_memory, ctx, fact),
            "floor": (floor.write, data, "0" * 64),
            "unchanged": (remember_memory, ctx, f"benchmark fact number {i - 1} 记住 🥜"),
            "floor_unchanged": (floor.unchanged,),
            "publish": (bare.replace_authorized_file, MEMORY_RELPATH, data),
            "write_text": (plain.write_bytes, data),
            "commit": (_one_commit, other_run),
        }
        for name in names[i % len(names) :] + names[: i % len(names)]:
            samples[name].append(_timed(*calls[name]))
    med = _print_latencies(
        f"latency over {LATENCY_SAMPLES} appends, no version kept (ms){'median':>9}{'p95':>9}",
        samples,
        (
            ("safe", "remember_memory (full safe path)"),
            ("floor", "floor: bare publish + its statements, raw"),
            ("unchanged", "remember_memory, unchanged (no publish)"),
            ("floor_unchanged", "floor of unchanged: its statements, raw"),
            ("publish", "bare durable publish"),
            ("commit", "one durable PostgreSQL commit"),
            ("write_text", "plain write (no fsync)"),
        ),
    )
    budget = med["publish"] + med["commit"]
    print("ratios (median)")
    print(f"  safe / floor                        {med['safe'] / med['floor']:>8.2f}x")
    print(
        f"  unchanged / its floor               {med['unchanged'] / med['floor_unchanged']:>8.2f}x"
    )
    print(f"  safe / bare publish                 {med['safe'] / med['publish']:>8.2f}x")
    print(f"  safe / (bare publish + one commit)  {med['safe'] / budget:>8.2f}x")
    parts = med["unchanged"] + med["publish"]
    print(f"  safe / (unchanged + bare publish)   {med['safe'] / parts:>8.2f}x")
    print(f"  safe / plain write                  {med['safe'] / med['write_text']:>8.2f}x")
    print(f"  bare publish / plain write          {med['publish'] / med['write_text']:>8.2f}x")
    floor.raw.close()


def _append_facts(k: int, ctx: ToolRuntimeContext, count: int, barrier) -> None:
    """One writer process: its own connection, `count` appends after the common start."""
    barrier.wait()
    for i in range(count):
        remember_memory(ctx, f"writer {k} fact {i}")
    connection.close()


def _throughput(contexts: list[ToolRuntimeContext]) -> float:
    """Appends per second of len(contexts) writer processes, each with its own connection.

    Processes, as a deployment runs workers: threads of one interpreter would measure the GIL
    (Django's per-query Python work), not the per-user lock.
    """
    per_writer = THROUGHPUT_APPENDS // len(contexts)
    fork = multiprocessing.get_context("fork")
    barrier = fork.Barrier(len(contexts) + 1)
    connections.close_all()  # children must not share the parent's socket
    writers = [
        fork.Process(target=_append_facts, args=(k, ctx, per_writer, barrier))
        for k, ctx in enumerate(contexts)
    ]
    for writer in writers:
        writer.start()
    barrier.wait()
    start = time.perf_counter()
    for writer in writers:
        writer.join()
    elapsed = time.perf_counter() - start
    if any(writer.exitcode for writer in writers):
        raise RuntimeError("a writer process failed; the figures would be wrong")
    return per_writer * len(contexts) / elapsed


def throughput() -> None:
    print(
        f"appends per second ({THROUGHPUT_APPENDS} appends per row, writer processes, "
        f"{os.cpu_count()} cores)"
    )
    print("  writers   one uid   distinct uids   distinct / one")
    for count in WRITER_COUNTS:
        shared = _user(f"shared-{count}")
        one_uid = [_context(shared, f"shared-{count}-{k}") for k in range(count)]
        distinct = [_context(_user(f"own-{count}-{k}"), f"own-{count}-{k}") for k in range(count)]
        same, spread = _throughput(one_uid), _throughput(distinct)
        print(f"  {count:>7} {same:>9.1f} {spread:>15.1f} {spread / same:>15.2f}x")


def _user_replace(user, text: str) -> None:
    write_memory_file(user=user, text=text, if_match=read_memory_file(user=user).etag, actor=user)


def versions() -> None:
    """What keeping the replaced version adds to a write: the same writes with
    `MEMORY_VERSIONS_KEPT` at 20 (each change keeps a version, and from the 21st on prunes
    one) and at 0 (none kept), interleaved call by call with their order rotating."""
    kept = settings.MEMORY_VERSIONS_KEPT
    paths = {
        "agent_kept": (_context(_user("kept"), "kept"), 20),
        "agent_none": (_context(_user("none"), "none"), 0),
        "user_kept": (_user("user-kept"), 20),
        "user_none": (_user("user-none"), 0),
    }
    samples: dict[str, list[float]] = {name: [] for name in paths}
    names = list(paths)
    # Every write replaces a non-empty file; past the 20th, the kept path prunes one version.
    for target, _ in paths.values():
        if isinstance(target, ToolRuntimeContext):
            remember_memory(target, "the first fact 记住")
        else:
            _user_replace(target, "the first text 记住\n")
    try:
        for i in range(LATENCY_SAMPLES):
            for name in names[i % len(names) :] + names[: i % len(names)]:
                target, count = paths[name]
                settings.MEMORY_VERSIONS_KEPT = count
                if isinstance(target, ToolRuntimeContext):
                    call = (remember_memory, target, f"versioned fact {i} 记住 🥜")
                else:
                    call = (_user_replace, target, f"the user's text, take {i} 记住\n" * 40)
                samples[name].append(_timed(*call))
    finally:
        settings.MEMORY_VERSIONS_KEPT = kept
    med = _print_latencies(
        f"kept versions over {LATENCY_SAMPLES} changes each (ms){'median':>17}{'p95':>9}",
        samples,
        (
            ("agent_kept", "remember_memory, MEMORY_VERSIONS_KEPT=20"),
            ("agent_none", "remember_memory, MEMORY_VERSIONS_KEPT=0"),
            ("user_kept", "write_memory_file, MEMORY_VERSIONS_KEPT=20"),
            ("user_none", "write_memory_file, MEMORY_VERSIONS_KEPT=0"),
        ),
    )
    print("ratios (median): keeping a version / keeping none")
    print(f"  remember_memory                     {med['agent_kept'] / med['agent_none']:>8.2f}x")
    print(f"  write_memory_file                   {med['user_kept'] / med['user_none']:>8.2f}x")
    for name in ("agent_kept", "user_kept"):
        target = paths[name][0]
        uid = target.uid if isinstance(target, ToolRuntimeContext) else target.pk
        on_disk = len(Workspace.for_user(uid).file_sizes(MEMORY_VERSIONS_DIR))
        print(f"  versions on disk after the run ({name}): {on_disk}")


SECTIONS = {"latency": latency, "throughput": throughput, "versions": versions}


def main() -> None:
    chosen = sys.argv[1:] or list(SECTIONS)
    with tempfile.TemporaryDirectory(prefix="yuxi-bench-") as root:
        settings.WORKSPACE_ROOT = Path(root)
        try:
            for name in chosen:
                SECTIONS[name]()
        finally:
            get_user_model().objects.filter(username__startswith=f"{PREFIX}-").delete()


if __name__ == "__main__":
    main()
