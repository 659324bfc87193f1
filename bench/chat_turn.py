"""What the LangChain runtime costs: graph builds, one chat turn, and 64 chats at once.

Run: .venv/bin/python bench/chat_turn.py [--no-concurrent]   (BENCH_DATABASE_URL picks the
database)

1. `build_chatbot_graph` by MEMORY.md size, beside the home-made runtime's figures.
2. One turn with the scripted model (no model latency): median latency, SQL statements on
   every connection of the process, and connections taken from the pool, for a plain turn in
   an existing thread and for a turn with one `remember_memory`.
3. A memory write with approval on (the remember turn, interrupted, then the `resume` run
   carrying "approve") beside the direct write: runs, model calls, SQL statements on Django's
   connections (the checkpointer's own pool is counted apart, as checkpoint rows written) and
   latency, per write.
4. 64 concurrent chats with a slow scripted model (seconds per model call) and a short lease,
   so the lease keeper beats during every chat: peak PostgreSQL backends of this process
   (sampled from `pg_stat_activity`), leases lost, and connections still out afterwards.

Works in a temporary workspace root; deletes the users (and so their threads and runs) it made.
"""

import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchenv import bench_user, setup_django

setup_django()

import psycopg  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.db import connection, connections  # noqa: E402
from django.db.models import Count  # noqa: E402
from pydantic import Field  # noqa: E402

from conversations.models import AgentRun  # noqa: E402
from memory_app import services  # noqa: E402
from memory_app.llm import ScriptedChatModel  # noqa: E402
from memory_app.runtime import agent_run, build_chatbot_graph, chat  # noqa: E402
from yuxi_site.utils.connections import direct_connection  # noqa: E402
from yuxi_site.utils.statements import count_statements  # noqa: E402

GRAPH_ROUNDS = 100
TURN_ROUNDS = 30
CONCURRENT_CHATS = 64
SLOW_MODEL_SECONDS = 2.0
# Short enough that the keeper (a third of it per beat) renews several times during a chat.
CONCURRENT_LEASE_SECONDS = 3
# The home-made runtime's graph build (urllib client, own loop), ms, from bench/memory_prompt.py.
OLD_GRAPH_BUILD_MS = {
    "memory off (10 MB file present)": 0.98,
    "memory on, file missing": 1.03,
    "memory on, 24 KiB file": 1.12,
    "memory on, 10 MB file": 1.08,
}
CASES = [
    ("memory off (10 MB file present)", False, 10 * 1024 * 1024),
    ("memory on, file missing", True, None),
    ("memory on, 24 KiB file", True, 24 * 1024),
    ("memory on, 10 MB file", True, 10 * 1024 * 1024),
]


def graph_builds(made: list) -> None:
    model = ScriptedChatModel()
    timings: dict[str, list[float]] = {label: [] for label, _, _ in CASES}
    users = [
        (label, bench_user(prefix="bench-chat", enabled=enabled, memory_bytes=size))
        for label, enabled, size in CASES
    ]
    made += [user for _, user in users]
    with agent_run(user_id=users[0][1].pk, thread_id=None) as first:
        runs_ = [(users[0][0], first)]
        handles = []
        for label, user in users[1:]:
            handle = agent_run(user_id=user.pk, thread_id=None)
            runs_.append((label, handle.__enter__()))
            handles.append(handle)
        for _label, run in runs_:
            build_chatbot_graph(run.ctx, model=model)  # warm-up
        for _ in range(GRAPH_ROUNDS):
            for label, run in runs_:
                start = time.perf_counter()
                build_chatbot_graph(run.ctx, model=model)
                timings[label].append((time.perf_counter() - start) * 1000)
        for handle in handles:
            handle.__exit__(None, None, None)
    print(f"build_chatbot_graph, median of {GRAPH_ROUNDS} round-robin builds per case")
    print(f"{'case':34} {'new ms':>8} {'old ms':>8} {'new/old':>8}")
    for label, _, _ in CASES:
        new = statistics.median(timings[label])
        old = OLD_GRAPH_BUILD_MS[label]
        print(f"{label:34} {new:8.2f} {old:8.2f} {new / old:7.1f}x")


def turns(made: list) -> None:
    user = bench_user(prefix="bench-chat", enabled=True)
    made.append(user)
    thread = chat(user_id=user.pk, message="hello").thread_id
    rows = []
    for label, message in (
        ("plain turn, existing thread", "and again"),
        ("turn with one remember_memory", "remember that fact {i}"),
    ):
        latencies, statements, opened = [], [], []
        for i in range(TURN_ROUNDS):
            with count_statements() as counted:
                start = time.perf_counter()
                chat(user_id=user.pk, message=message.format(i=i), thread_id=thread)
                latencies.append((time.perf_counter() - start) * 1000)
            statements.append(len(counted))
            opened.append(counted.connections)
        rows.append((label, statistics.median(latencies), max(statements), max(opened)))
    print(f"\none chat turn, scripted model, median of {TURN_ROUNDS} turns")
    print(f"{'turn':32} {'ms/turn':>8} {'statements':>11} {'connections taken':>18}")
    for label, ms, count, taken in rows:
        print(f"{label:32} {ms:8.1f} {count:11d} {taken:18d}")


class CountingModel(ScriptedChatModel):
    """The scripted model, counting its calls (in a list its tool-bound copies share)."""

    calls: list = Field(default_factory=list)

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        self.calls.append(len(messages))
        return super()._generate(messages, stop, run_manager, **kwargs)


def _checkpoint_rows() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT (SELECT count(*) FROM checkpoints) + (SELECT count(*) FROM checkpoint_writes)"
            " + (SELECT count(*) FROM checkpoint_blobs)"
        )
        return cursor.fetchone()[0]


def approved_writes(made: list) -> None:
    rows = []
    for label, approval in (("direct write (approval off)", False), ("approved write", True)):
        user = bench_user(prefix="bench-chat", enabled=True)
        made.append(user)
        if approval:
            services.set_memory_write_approval(user=user, enabled=True, actor=user)
        thread = chat(user_id=user.pk, message="hello").thread_id
        latencies, statements, run_counts, model_calls, peak_rows = [], [], [], [], []
        for i in range(TURN_ROUNDS):
            model = CountingModel()
            runs_before = AgentRun.objects.filter(user=user).count()
            rows_before = _checkpoint_rows()
            with count_statements() as counted:
                start = time.perf_counter()
                turn = chat(
                    user_id=user.pk,
                    message=f"remember that fact {i}",
                    thread_id=thread,
                    model=model,
                )
                peak_rows.append(_checkpoint_rows() - rows_before)
                if approval:
                    assert turn.status == "interrupted", turn
                    turn = chat(
                        user_id=user.pk,
                        thread_id=thread,
                        resume={"decision": "approve"},
                        model=model,
                    )
                latencies.append((time.perf_counter() - start) * 1000)
            assert turn.status == "succeeded" and turn.tool_calls[0]["status"] == "success", turn
            statements.append(len(counted))
            run_counts.append(AgentRun.objects.filter(user=user).count() - runs_before)
            model_calls.append(len(model.calls))
        assert _checkpoint_rows() == rows_before  # decided: nothing left behind
        rows.append(
            (
                label,
                max(run_counts),
                max(model_calls),
                statistics.median(statements),
                max(peak_rows),
                statistics.median(latencies),
            )
        )
    print(f"\none memory write, scripted model, median of {TURN_ROUNDS} writes")
    print(
        f"{'write':30} {'runs':>5} {'model calls':>12} {'statements':>11} "
        f"{'checkpoint rows':>16} {'ms/write':>9}"
    )
    for label, runs_, calls, count, peak, ms in rows:
        print(f"{label:30} {runs_:5d} {calls:12d} {count:11.0f} {peak:16d} {ms:9.1f}")
    direct, approved = rows
    print(
        f"approved / direct: {approved[1] - direct[1]:+d} run, {approved[2] - direct[2]:+d} model "
        f"call, {approved[5] / direct[5]:.2f}x the latency, "
        f"{approved[3] / direct[3]:.2f}x the statements (user think time not included)"
    )


class SlowScriptedModel(ScriptedChatModel):
    """The scripted model thinking for SLOW_MODEL_SECONDS per call (no database held)."""

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        time.sleep(SLOW_MODEL_SECONDS)
        return super()._generate(messages, stop, run_manager, **kwargs)


def _backends(monitor: psycopg.Connection) -> int:
    with monitor.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0]


def concurrent_chats(made: list) -> None:
    settings.AGENT_RUN_LEASE_SECONDS = CONCURRENT_LEASE_SECONDS
    users = [bench_user(prefix="bench-chat", enabled=True) for _ in range(CONCURRENT_CHATS)]
    made += users
    connection.close()
    monitor = direct_connection(autocommit=True)
    before = _backends(monitor)
    peak = [before]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.02):
            peak[0] = max(peak[0], _backends(monitor))

    outcomes: list[str] = []
    barrier = threading.Barrier(CONCURRENT_CHATS)

    def one(user) -> None:
        try:
            barrier.wait()
            turn = chat(
                user_id=user.pk, message="remember that I like tea", model=SlowScriptedModel()
            )
            outcomes.append(turn.tool_calls[0]["status"])
        except Exception as exc:  # reported below
            outcomes.append(type(exc).__name__)
        finally:
            connection.close()

    sampler = threading.Thread(target=sample)
    sampler.start()
    start = time.perf_counter()
    threads = [threading.Thread(target=one, args=(user,)) for user in users]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    done.set()
    sampler.join()
    pool = connections["default"].pool
    stats = pool.get_stats()
    checked_out = stats["pool_size"] - stats["pool_available"]
    statuses = dict(
        AgentRun.objects.filter(user__in=users).values_list("status").annotate(n=Count("id"))
    )
    connection.close()
    after = _backends(monitor)
    connections["default"].close_pool()
    time.sleep(1)  # a closed connection's backend leaves pg_stat_activity a moment later
    after_pool_closed = _backends(monitor)
    monitor.close()
    print(
        f"\n{CONCURRENT_CHATS} concurrent chats, {SLOW_MODEL_SECONDS:.0f} s per model call "
        f"(2 calls each), lease {CONCURRENT_LEASE_SECONDS} s"
    )
    print(f"  wall time                         {elapsed:8.1f} s")
    print(
        f"  outcomes                          {dict((o, outcomes.count(o)) for o in set(outcomes))}"
    )
    print(f"  runs by status                    {statuses}")
    print(f"  backends before                   {before:8d}")
    print(
        f"  peak backends (pool 16 + keeper)  {peak[0]:8d}   (home-made runtime: 116 at 64 chats)"
    )
    print(f"  connections out of the pool after {checked_out:8d}")
    print(f"  backends after (idle in the pool) {after:8d}")
    print(f"  backends after closing the pool   {after_pool_closed:8d}")


def main() -> None:
    made: list = []
    with tempfile.TemporaryDirectory() as root:
        settings.WORKSPACE_ROOT = Path(root)
        try:
            graph_builds(made)
            turns(made)
            approved_writes(made)
            if "--no-concurrent" not in sys.argv:
                concurrent_chats(made)
        finally:
            get_user_model().objects.filter(pk__in=[user.pk for user in made]).delete()


if __name__ == "__main__":
    main()
