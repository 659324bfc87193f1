"""Cost of the safe memory write next to its floor, and its throughput.

The floor is the write made exactly as the contract says and nothing else (`Floor`): the file
fence, the bounded read, the replaced bytes kept as a version by a hard link with its
directory fsynced and the 21st-oldest unlinked, the durable publish, and the very statements
`remember_memory` sent replayed in one raw psycopg transaction. The target is
`remember_memory` <= 1.5x its floor, side by side in one run; the credential detector's share
is timed beside it (the same write without it, and the detector alone).

It also shows what keeping the replaced version (for undo) adds to a write: the same writes
with `MEMORY_VERSIONS_KEPT` at 20 and at 0, side by side; and (`history`) what the check
against the credentials a user stated costs for a user with a long history: the lookup of
their recent messages and the detection over those it returns, with the needles as they are
(stop words left out) beside the same lookup with stop words as needles, alternated.

Run: .venv/bin/python bench/memory_write.py [latency] [throughput] [versions] [history]
(default: all;
BENCH_DATABASE_URL picks the database). It creates its own users and runs under a temporary
workspace root, prints its figures, and removes everything it created.
"""

import fcntl
import hashlib
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from benchenv import claimed_run_context, setup_django

setup_django()

from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.db import connection, connections  # noqa: E402
from django.db.models import QuerySet  # noqa: E402

from conversations.models import Conversation, Message  # noqa: E402
from conversations.selectors import stated_messages  # noqa: E402
from memory_app import credentials  # noqa: E402
from memory_app.credentials import credential_kinds, produced_credential  # noqa: E402
from memory_app.memory_file import MEMORY_FILE_MAX_BYTES  # noqa: E402
from memory_app.models import UserConfig  # noqa: E402
from memory_app.runtime import ToolRuntimeContext  # noqa: E402
from memory_app.selectors import read_memory_file  # noqa: E402
from memory_app.services import agent_write, plan, remember_memory, write_memory_file  # noqa: E402
from memory_app.versions import MEMORY_VERSIONS_DIR  # noqa: E402
from memory_app.workspace import Workspace  # noqa: E402

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
    return claimed_run_context(user, prefix=PREFIX, name=name)


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


class Floor:
    """The memory write made exactly as the contract says, and nothing else: on a raw psycopg
    connection, in one transaction, the very statements `remember_memory` sent for this
    user's run (captured from one of its calls, replayed with the same parameters: advisory
    lock with its settings, run row lock, clock + user + switch, the versions window, and
    last the ledger row just before the rename); the file fence (an exclusive flock on
    `agents/.memory.lock`, opened afresh); the bounded read; the replaced bytes kept as a
    version by a hard link and its directory fsynced; the durable publish (temp file, fsync,
    ledger row, rename, directory fsync); the 21st-oldest version unlinked; the commit."""

    def __init__(self, ctx: ToolRuntimeContext) -> None:
        self.raw = connection.get_new_connection(connection.get_connection_params())
        self.agents = Path(settings.WORKSPACE_ROOT) / ctx.uid / "agents"
        self.kept: deque[str] = deque()
        # Captured from the run's own calls: a write (the ledger row last) and an unchanged one.
        remember_memory(ctx, "the floor's first fact")
        self.write_statements = _statements_of(remember_memory, ctx, "the floor's second fact")
        self.unchanged_statements = _statements_of(remember_memory, ctx, "the floor's first fact")
        assert "INSERT INTO" in self.write_statements[-1][0], "the ledger row comes last"

    def _replay(self, statements: list[tuple[str, list]]) -> None:
        for sql, params in statements:
            cursor = self.raw.execute(sql, params)
            if cursor.description is not None:
                cursor.fetchall()

    @contextmanager
    def _fenced(self) -> Iterator[tuple[int, bytes]]:
        """The flock and the bounded read, under it: the directory fd and the current bytes."""
        dir_fd = os.open(self.agents, _NOFOLLOW_DIRECTORY)
        lock_fd = os.open(".memory.lock", _LOCK_FLAGS, 0o600, dir_fd=dir_fd)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
            fd = os.open("MEMORY.md", os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dir_fd)
            try:
                current = os.read(fd, MEMORY_FILE_MAX_BYTES + 1)
            finally:
                os.close(fd)
            yield dir_fd, current
        finally:
            os.close(lock_fd)
            os.close(dir_fd)

    def write(self, fact: str) -> None:
        with self.raw.transaction():
            self._replay(self.write_statements[:-1])
            with self._fenced() as (dir_fd, current):
                versions_fd = os.open(
                    MEMORY_VERSIONS_DIR.split("/")[1], _NOFOLLOW_DIRECTORY, dir_fd=dir_fd
                )
                try:
                    name = hashlib.sha256(current).hexdigest()
                    os.link("MEMORY.md", name, src_dir_fd=dir_fd, dst_dir_fd=versions_fd)
                    os.fsync(versions_fd)
                    self.kept.append(name)
                    temp = f".MEMORY.md.{uuid.uuid4().hex[:16]}.tmp"
                    fd = os.open(temp, _TEMP_FLAGS, 0o600, dir_fd=dir_fd)
                    try:
                        os.write(fd, current + f"{fact}\n".encode())
                        os.fsync(fd)
                    finally:
                        os.close(fd)
                    self._replay(self.write_statements[-1:])
                    os.rename(temp, "MEMORY.md", src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
                    os.fsync(dir_fd)
                    if len(self.kept) > settings.MEMORY_VERSIONS_KEPT:
                        os.unlink(self.kept.popleft(), dir_fd=versions_fd)
                finally:
                    os.close(versions_fd)

    def unchanged(self) -> None:
        with self.raw.transaction():
            self._replay(self.unchanged_statements)
            with self._fenced():
                pass


_NOFOLLOW_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
_LOCK_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW
_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW


def _statements_of(call, *args) -> list[tuple[str, list]]:
    """The SQL statements (and their parameters) `call(*args)` sends on Django's connection."""
    sent: list[tuple[str, list]] = []

    def record(execute, sql, params, many, context):
        sent.append((sql, list(params or ())))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        call(*args)
    return sent


def _cost_of_one_write(ctx: ToolRuntimeContext, fact: str) -> dict[str, int]:
    """Statements, fsyncs and ORM query clones of one `remember_memory` that appends."""
    counts = {"fsyncs": 0, "clones": 0}
    real_fsync, real_clone = os.fsync, QuerySet._clone

    def fsync(fd):
        counts["fsyncs"] += 1
        return real_fsync(fd)

    def clone(self, *args, **kwargs):
        counts["clones"] += 1
        return real_clone(self, *args, **kwargs)

    os.fsync, QuerySet._clone = fsync, clone
    try:
        counts["statements"] = len(_statements_of(remember_memory, ctx, fact))
    finally:
        os.fsync, QuerySet._clone = real_fsync, real_clone
    return counts


def _without_detector(ctx: ToolRuntimeContext, fact: str) -> None:
    """`remember_memory` with its credential checks taken out: the content's, the produced
    lines', and the look through the turn's and the user's recent messages (their two queries
    included): what the detector costs."""
    turn_message = agent_write.stated_messages.turn_message
    real = (plan.credential_kinds, plan.produced_credential, agent_write.refuse_stated_credential)
    plan.credential_kinds = lambda content: []
    plan.produced_credential = lambda text, start, end: None
    agent_write.refuse_stated_credential = lambda user_id, content, turn=None: None
    agent_write.stated_messages.turn_message = lambda conversation_id: None
    try:
        remember_memory(ctx, fact)
    finally:
        (
            plan.credential_kinds,
            plan.produced_credential,
            agent_write.refuse_stated_credential,
        ) = real
        agent_write.stated_messages.turn_message = turn_message


# What the produced lines of an append are read with: the file's last lines before it.
_FILE_TAIL = "".join(f"warm-up fact {i}\n" for i in range(3))


def _detector_alone(fact: str) -> None:
    """The detector's own work in a write, without the database: the content, then the lines
    an append produces with the lines before them."""
    credential_kinds(fact)
    produced = f"{_FILE_TAIL}{fact}\n"
    produced_credential(produced, len(_FILE_TAIL), len(produced) - 1)


def latency() -> None:
    """`remember_memory` beside its floor, versions kept as configured (default 20: from the
    21st change on, each write prunes one), interleaving the paths call by call with their
    order rotating, so that drift, noise and the cost one call leaves to the next (dirty
    pages, journal commits) hit them alike."""
    ctx = _context(_user("latency"), "latency")
    bare_ctx = _context(_user("bare"), "bare")
    floor = Floor(_context(_user("floor"), "floor"))
    samples: dict[str, list[float]] = {
        "safe": [],
        "no_detector": [],
        "floor": [],
        "unchanged": [],
        "floor_unchanged": [],
        "detector": [],
    }
    names = list(samples)
    # Warm up past the versions kept, so every timed write prunes one.
    for i in range(settings.MEMORY_VERSIONS_KEPT + 2):
        for target in (ctx, bare_ctx):
            remember_memory(target, f"warm-up fact {i}")
        floor.write(f"warm-up fact {i}")
    cost = _cost_of_one_write(ctx, "a fact counted 记住")
    for i in range(LATENCY_SAMPLES):
        fact = f"benchmark fact number {i} 记住 🥜"
        calls = {
            "safe": (remember_memory, ctx, fact),
            "no_detector": (_without_detector, bare_ctx, fact),
            "floor": (floor.write, fact),
            "unchanged": (remember_memory, ctx, "warm-up fact 0"),
            "floor_unchanged": (floor.unchanged,),
            "detector": (_detector_alone, fact),
        }
        for name in names[i % len(names) :] + names[: i % len(names)]:
            samples[name].append(_timed(*calls[name]))
    kept = settings.MEMORY_VERSIONS_KEPT
    med = _print_latencies(
        f"latency over {LATENCY_SAMPLES} appends, {kept} versions kept (ms){'median':>9}{'p95':>9}",
        samples,
        (
            ("safe", "remember_memory (full safe path)"),
            ("no_detector", "remember_memory without the detector"),
            ("floor", "floor: the contract's steps, raw"),
            ("unchanged", "remember_memory, unchanged (no publish)"),
            ("floor_unchanged", "floor of unchanged: statements + fence"),
            ("detector", "the credential detector alone (no query)"),
        ),
    )
    print(
        f"one remember_memory append: {cost['statements']} statements, {cost['fsyncs']} fsyncs, "
        f"{cost['clones']} ORM query clones (floor: {len(floor.write_statements)} statements, "
        "3 fsyncs, none)"
    )
    print("ratios (median)")
    print(f"  safe / floor                        {med['safe'] / med['floor']:>8.2f}x")
    print(f"  without the detector / floor        {med['no_detector'] / med['floor']:>8.2f}x")
    print(
        f"  unchanged / its floor               {med['unchanged'] / med['floor_unchanged']:>8.2f}x"
    )
    print(f"  detector's share of a write         {med['detector'] / med['safe']:>8.1%}")
    share = (med["safe"] - med["no_detector"]) / med["safe"]
    print(f"  all credential checks' share        {share:>8.1%}   (with the messages query)")
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
    # Children must not share the parent's sockets, nor inherit its connection pool: the
    # pool's worker threads do not survive a fork, so a child waiting on the inherited pool
    # for a new connection times out, and one taking an inherited idle connection shares
    # its socket with the parent and its siblings. Each child opens a pool of its own.
    connections.close_all()
    connections["default"].close_pool()
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


HISTORY_MESSAGES = 1000
HISTORY_ROUNDS = 40


def _needles_with_stop_words(content: str) -> list[str]:
    """`repeat_needles` as it was before stop words were left out."""
    saved = credentials.ENGLISH_STOP_WORDS
    credentials.ENGLISH_STOP_WORDS = frozenset()
    try:
        return credentials.repeat_needles(content)
    finally:
        credentials.ENGLISH_STOP_WORDS = saved


def _stated_check(user_id: int, content: str, turn: str) -> None:
    agent_write.refuse_stated_credential(user_id, content, turn=turn)


def history() -> None:
    """The stated-credential check of one remembering turn for a user whose last
    `HISTORY_MESSAGES` messages all say "remember that ...", none stating a credential."""
    user = _user("history")
    thread = Conversation.objects.get(thread_id=_context(user, "history").thread_id)
    Message.objects.bulk_create(
        Message(
            conversation=thread,
            owner=user,
            role=Message.Role.USER,
            message_type=Message.Type.TEXT,
            content=f"please remember that I read chapter {n} of the novel this week",
        )
        for n in range(HISTORY_MESSAGES)
    )
    turn = "Please remember that I like green tea"
    content = "User likes green tea"
    sides = {"now": credentials.repeat_needles, "stop words": _needles_with_stop_words}
    samples: dict[str, list[float]] = {name: [] for name in sides}
    read: dict[str, int] = {}
    real = agent_write.repeat_needles
    try:
        for _ in range(HISTORY_ROUNDS):
            for name, needles in sides.items():
                agent_write.repeat_needles = needles
                samples[name].append(_timed(_stated_check, user.pk, content, turn))
                found = needles(content) + needles(turn)
                read[name] = len(
                    stated_messages.user_messages_containing(user_id=user.pk, needles=found)
                )
    finally:
        agent_write.repeat_needles = real
    _print_latencies(
        f"\nthe stated-credential check of one write, a user with {HISTORY_MESSAGES:,} recent "
        f"messages (ms, median and p95 of {HISTORY_ROUNDS})",
        samples,
        tuple((name, f"needles {name} ({read[name]:,} messages read)") for name in sides),
    )


SECTIONS = {"latency": latency, "throughput": throughput, "versions": versions, "history": history}


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
