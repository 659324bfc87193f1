"""What the LangChain runtime costs: graph builds, one chat turn (sync, async, streamed), and
64 chats at once (threads in this process; streamed over HTTP to one uvicorn worker).

Run: .venv/bin/python bench/chat_turn.py [SECTION ...]   (BENCH_DATABASE_URL picks the
database, BENCH_STREAM_PORT the streams section's server port, default 8151; sections: graphs
turns overhead approvals chats streams tokens, default all; BENCH_STREAMS_BEFORE, a checkout of
another commit, adds that commit's site to the streams section, run by its own .venv if it has
one, else by this one's; BENCH_STREAMS_PGBOUNCER_PORT adds the site reaching the database
through PgBouncer in transaction mode, started here on that port)

1. `build_chatbot_graph` by MEMORY.md size, beside the home-made runtime's figures.
2. One turn with the scripted model (no model latency): median latency, SQL statements on
   every connection of the process, and connections taken from the pool, for a plain turn in
   an existing thread and for a turn with one `remember_memory`.
3. Per-turn overhead in one run, the same scripted model and message, each round running
   every entry point once: `chat` (sync), `achat` (async, one loop), `astream_chat` and
   `stream_chat` (streamed), beside a bare LangChain `create_agent` turn (build the agent and
   invoke it; no database, no memory): ms per turn and the ratio to the bare turn; graph
   compiles and SQL statements per `chat` turn in steady state.
3a. A memory write with approval on (the remember turn, interrupted, then the `resume` run
    carrying "approve") beside the direct write: runs, model calls, SQL statements on Django's
    connections (the checkpointer's own pool is counted apart, as checkpoint rows written) and
    latency, per write.
4. 64 concurrent chats with a slow scripted model (seconds per model call) and a short lease,
   so the lease keeper beats during every chat: peak PostgreSQL backends of this process
   (sampled from `pg_stat_activity`), leases lost, and connections still out afterwards.
5. 64 concurrent streamed chats (`POST /api/chat/stream/`) against one warm uvicorn worker
   (gunicorn.conf.py, `WEB_CONCURRENCY=1`, sent once `/healthz` answers) whose model is the
   wire model of the tests (tests/wire_model.py) run here: a `remember_memory` call after
   2.0 s, then the reply's first token 1.0 s after the tool result (3.0 s of model time to
   the first token), with a short lease: median time to the first `token` event (target
   median <= 4.0 s), the worker's CPU per chat (its /proc/<pid>/stat before and after;
   target <= 25 ms), leases lost (0), peak PostgreSQL backends (at most 16 + 1). Three rounds,
   each alternated with the same 64 chats against the floor: bench/bare_stream_app.py, a bare
   `create_agent` + `ChatOpenAI` ASGI app (no Django, no database, no memory) in the same
   kind of worker, so the site's CPU per chat also reads as a multiple of the stack's own;
   and against the Django floor: the same agent behind Django's ASGI handler with the site's
   settings, middleware and session login (bench/django_floor.py; no run, no memory), so
   what Django's request costs reads apart from what the site's turn adds.
   With BENCH_STREAMS_BEFORE set, the same chats also go, in each round, to the site as that
   checkout serves it (its own code, this database), so a change reads side by side.
   With BENCH_STREAMS_PGBOUNCER_PORT set, they also go to the site reaching the same database
   through Debian's PgBouncer in transaction mode (DATABASE_POOL_MODE=transaction: no
   prepared statement anywhere), so the price of a pooler and of no prepared statements reads
   beside the direct site, in the same rounds.
6. What each streamed token costs that worker: 64 plain streamed chats at once, a short reply
   and one 200 tokens longer, round by round; the CPU difference per token.

Works in a temporary workspace root; deletes the users (and so their threads and runs) it made.
"""

import asyncio
import dataclasses
import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from benchenv import PROJECT_ROOT, bench_user, logged_in_session, setup_django

setup_django()

import psycopg  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.db import connection, connections  # noqa: E402
from django.db.models import Count  # noqa: E402
from langchain.agents import create_agent  # noqa: E402
from langchain_core.messages import HumanMessage  # noqa: E402
from pydantic import Field  # noqa: E402

from conversations.models import AgentRun  # noqa: E402
from conversations.utils.connections import direct_connection  # noqa: E402
from conversations.utils.statements import count_statements  # noqa: E402
from memory_app import services  # noqa: E402
from memory_app.llm import ScriptedChatModel  # noqa: E402
from memory_app.runtime import (  # noqa: E402
    achat,
    agent_run,
    astream_chat,
    build_chatbot_graph,
    chat,
    graphs,
    stream_chat,
)
from tests.pgbouncer import PgBouncer  # noqa: E402
from tests.wire_model import Received, Reply, WireModel, echo_script  # noqa: E402

GRAPH_ROUNDS = 100
TURN_ROUNDS = 30
OVERHEAD_ROUNDS = 30
CONCURRENT_CHATS = 64
SLOW_MODEL_SECONDS = 2.0
# The wire model of the streams section: a remember turn's tool call after this long, then its
# reply's first token this long after the tool result (3.0 s of model time to the first token).
WIRE_CALL_SECONDS = 2.0
WIRE_FIRST_TOKEN_SECONDS = 1.0
FIRST_TOKEN_TARGET_SECONDS = 4.0
CPU_PER_CHAT_TARGET_MS = 25
STREAM_PORT = int(os.environ.get("BENCH_STREAM_PORT", "8151"))
PEAK_BACKENDS_ALLOWED = 16 + 1
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


def _backends(monitor: psycopg.Connection, application: str | None = None) -> int:
    """The database's backends but the monitor's own (only `application`'s, when named)."""
    sql = (
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND pid <> pg_backend_pid()"
    )
    with monitor.cursor() as cursor:
        if application is None:
            cursor.execute(sql)
        else:
            cursor.execute(sql + " AND application_name = %s", [application])
        return cursor.fetchone()[0]


def all_at_once(
    work, count: int, monitor: psycopg.Connection, application: str | None = None
) -> tuple[float, int, int]:
    """Run `work(i)` for i in range(count), each on its own thread, released together, while
    sampling the database's backends (`application`'s, when named) every 20 ms: (wall
    seconds, backends before, peak)."""
    before = _backends(monitor, application)
    peak = [before]
    done = threading.Event()
    barrier = threading.Barrier(count)

    def sample() -> None:
        while not done.wait(0.02):
            peak[0] = max(peak[0], _backends(monitor, application))

    def released(index: int) -> None:
        barrier.wait()
        work(index)

    sampler = threading.Thread(target=sample)
    sampler.start()
    start = time.perf_counter()
    threads = [threading.Thread(target=released, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    done.set()
    sampler.join()
    return elapsed, before, peak[0]


def concurrent_chats(made: list) -> None:
    settings.AGENT_RUN_LEASE_SECONDS = CONCURRENT_LEASE_SECONDS
    users = [bench_user(prefix="bench-chat", enabled=True) for _ in range(CONCURRENT_CHATS)]
    made += users
    connection.close()
    monitor = direct_connection(autocommit=True)
    outcomes: list[str] = []

    def one(index: int) -> None:
        try:
            turn = chat(
                user_id=users[index].pk,
                message="remember that I like tea",
                model=SlowScriptedModel(),
            )
            outcomes.append(turn.tool_calls[0]["status"])
        except Exception as exc:  # reported below
            outcomes.append(type(exc).__name__)
        finally:
            connection.close()

    elapsed, before, peak = all_at_once(one, CONCURRENT_CHATS, monitor)
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
    print(f"  peak backends (pool 16 + keeper)  {peak:8d}   (home-made runtime: 116 at 64 chats)")
    print(f"  connections out of the pool after {checked_out:8d}")
    print(f"  backends after (idle in the pool) {after:8d}")
    print(f"  backends after closing the pool   {after_pool_closed:8d}")


def overhead(made: list) -> None:
    """ms per turn of each entry point beside a bare `create_agent` turn, in one run: each
    round runs every entry point once, in turn, so a change in the machine's load falls on all
    of them alike (the ratios are the figures; the ms drift with the machine). Also the graph
    compiles and SQL statements per turn in steady state."""
    user = bench_user(prefix="bench-chat", enabled=True)
    made.append(user)
    thread = chat(user_id=user.pk, message="hello").thread_id
    arguments = {"user_id": user.pk, "message": "and again", "thread_id": thread}
    model = ScriptedChatModel()
    loop = asyncio.new_event_loop()

    def bare() -> None:
        agent = create_agent(model, tools=[], system_prompt="You are Yuxi.")
        agent.invoke({"messages": [HumanMessage("and again")]}, config={"max_concurrency": 1})

    def sync_turn() -> None:
        chat(**arguments)

    def streamed_sync() -> None:
        for _event in stream_chat(**arguments):
            pass

    async def streamed() -> None:
        async for _event in astream_chat(**arguments):
            pass

    entry_points = [
        ("bare create_agent turn (no db)", bare),
        ("chat (sync)", sync_turn),
        ("achat (async)", lambda: loop.run_until_complete(achat(**arguments))),
        ("astream_chat (async, streamed)", lambda: loop.run_until_complete(streamed())),
        ("stream_chat (sync, streamed)", streamed_sync),
    ]
    timings: dict[str, list[float]] = {label: [] for label, _ in entry_points}
    cpu: dict[str, list[float]] = {label: [] for label, _ in entry_points}
    for round_number in range(OVERHEAD_ROUNDS + 1):  # the first is a warm-up
        for label, turn in entry_points:
            start, start_cpu = time.perf_counter(), time.process_time()
            turn()
            if round_number:
                timings[label].append((time.perf_counter() - start) * 1000)
                cpu[label].append((time.process_time() - start_cpu) * 1000)
    compiles = _compiles_per_turn(sync_turn)
    with count_statements() as counted:
        sync_turn()
    loop.close()
    bare_ms = statistics.median(timings[entry_points[0][0]])
    bare_cpu = statistics.median(cpu[entry_points[0][0]])
    print(f"\nper-turn overhead, scripted model, plain turn, median of {OVERHEAD_ROUNDS} rounds")
    print("(wall: what a caller waits, database round trips included; CPU: the process's own")
    print(" work in every thread, which a loaded machine does not inflate)")
    print(f"{'entry point':34} {'ms/turn':>8} {'x bare':>7} {'CPU ms':>8} {'x bare':>7}")
    for label, _ in entry_points:
        ms, cpu_ms = statistics.median(timings[label]), statistics.median(cpu[label])
        print(f"{label:34} {ms:8.2f} {ms / bare_ms:6.1f}x {cpu_ms:8.2f} {cpu_ms / bare_cpu:6.1f}x")
    print(f"graph compiles per chat turn in steady state: {compiles:g}")
    print(f"SQL statements per chat turn (all connections): {len(counted)}")


def _compiles_per_turn(turn, rounds: int = 10) -> float:
    """`create_agent` calls of the runtime per `turn()`, over `rounds` turns."""
    made = []
    real = graphs.create_agent

    def counting(*args, **kwargs):
        made.append(1)
        return real(*args, **kwargs)

    graphs.create_agent = counting
    try:
        for _ in range(rounds):
            turn()
    finally:
        graphs.create_agent = real
    return len(made) / rounds


def _wire_script(request: Received) -> Reply:
    """The wire model of the streams section: the scripted answers (a `remember_memory` call,
    then "Saved: <result>"), the call after WIRE_CALL_SECONDS, the reply's first token
    WIRE_FIRST_TOKEN_SECONDS after the tool result."""
    reply = echo_script(request)
    wait = WIRE_FIRST_TOKEN_SECONDS if reply.text else WIRE_CALL_SECONDS
    return dataclasses.replace(reply, first_token_after=wait)


def _stream_chat_over_http(
    session: tuple[str, str], message: str, *, port: int = STREAM_PORT
) -> dict:
    """One `POST /api/chat/stream/`: its events and when each kind first came (seconds)."""
    key, csrf = session
    connection_ = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    start = time.perf_counter()
    connection_.request(
        "POST",
        "/api/chat/stream/",
        body=json.dumps({"message": message}),
        headers={
            "Content-Type": "application/json",
            "Cookie": f"sessionid={key}; csrftoken={csrf}",
            "X-CSRFToken": csrf,
        },
    )
    response = connection_.getresponse()
    events, seen = [], {}
    if response.status != 200:
        return {"status": response.status, "events": [], "seen": {}}
    for line in response:
        if line.startswith(b"data: "):
            event = json.loads(line[len(b"data: ") :])
            seen.setdefault(event["event"], time.perf_counter() - start)
            events.append(event)
    connection_.close()
    return {"status": 200, "events": events, "seen": seen}


def _healthz(port: int = STREAM_PORT) -> int | None:
    """The status `/healthz` answers on `port`, None while nothing listens there."""
    try:
        connection_ = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        connection_.request("GET", "/healthz")
        return connection_.getresponse().status
    except OSError:
        return None


# The floor of the streams section: bench/bare_stream_app.py, on the next port.
FLOOR_APPLICATION = ("--pythonpath", str(Path(__file__).parent), "bare_stream_app:application")
# The same agent behind Django's request with the site's settings (bench/django_floor.py).
DJANGO_FLOOR_APPLICATION = ("--pythonpath", str(Path(__file__).parent), "django_floor:application")


def _serve_one_worker(
    root: Path,
    model_url: str,
    *,
    application: tuple[str, ...] = ("yuxi_site.asgi",),
    port: int = STREAM_PORT,
    checkout: Path = PROJECT_ROOT,
    database_url: str = "",
    pool_mode: str = "session",
) -> subprocess.Popen:
    """gunicorn with one uvicorn worker (gunicorn.conf.py, as ./scripts/serve-production runs
    it) serving `application` on `port` from `checkout` (its code), returned once its worker is
    warm: `/healthz` answers 200. Its database connections carry the application name
    `_server_name(port)`, so its backends can be counted apart. `database_url` (default: the
    bench's) and `pool_mode` (DATABASE_POOL_MODE) say how it reaches the database."""
    env = {
        **os.environ,
        "DATABASE_URL": _named(database_url or os.environ["DATABASE_URL"], _server_name(port)),
        "DATABASE_POOL_MODE": pool_mode,
        "HOST": "127.0.0.1",
        "PORT": str(port),
        "WEB_CONCURRENCY": "1",
        "LLM_BASE_URL": model_url,
        "LLM_API_KEY": "unused",
        "LLM_MODEL": "wire-model",
        "LLM_TIMEOUT_SECONDS": "60",
        "AGENT_RUN_LEASE_SECONDS": str(CONCURRENT_LEASE_SECONDS),
        "WORKSPACE_ROOT": str(root),
        "GUNICORN_LOG_LEVEL": "warning",
    }
    with open(root / "server.log", "ab") as log:  # its request and memory logs, apart
        server = subprocess.Popen(
            [_python_of(checkout), "-m", "gunicorn", "-c", "gunicorn.conf.py", *application],
            cwd=checkout,
            env=env,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
    for _ in range(600):
        if _healthz(port) == 200:
            return server
        time.sleep(0.1)
    os.killpg(server.pid, signal.SIGKILL)
    raise RuntimeError(f"the uvicorn worker of {application[-1]} did not become healthy")


def _python_of(checkout: Path) -> str:
    """The Python that serves `checkout`: its own .venv's, else this one."""
    own = checkout / ".venv" / "bin" / "python"
    return str(own) if own.exists() else sys.executable


def _server_name(port: int) -> str:
    """The PostgreSQL application name of the bench's server on `port`."""
    return f"yuxi-bench-{port}"


def _named(url: str, application: str) -> str:
    """The database URL `url` with `application_name` set (django-environ passes it on)."""
    parts = urlsplit(url)
    query = [*parse_qsl(parts.query), ("application_name", application)]
    return urlunsplit(parts._replace(query=urlencode(query)))


def _stop(server: subprocess.Popen) -> None:
    os.killpg(server.pid, signal.SIGTERM)
    server.wait(30)


def _worker_of(master: int) -> int:
    """The pid of the one worker process gunicorn `master` runs."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == master:
            return int(stat.parent.name)
    raise RuntimeError("gunicorn started no worker")


def _cpu_seconds(pid: int) -> float:
    """CPU time (user + system) process `pid` has used so far (/proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# Rounds of CONCURRENT_CHATS streamed chats in the streams section, the site's and the floor's
# alternated (every server up, one burst at a time).
STREAM_ROUNDS = 3


def _remembered(result: dict) -> bool:
    return bool(result["events"]) and result["events"][-1].get("tool_calls") == [
        {"name": "remember_memory", "status": "success"}
    ]


def _burst(
    worker: int, chat: Callable[[int], dict], monitor: psycopg.Connection, port: int
) -> dict:
    """CONCURRENT_CHATS streamed chats at once (`chat(index)`) to the server on `port`: the
    worker's CPU per chat (ms), the results, and that server's database backends before the
    burst and at its peak."""
    results: list[dict] = [{}] * CONCURRENT_CHATS

    def one(index: int) -> None:
        try:
            results[index] = chat(index)
        except Exception as exc:  # reported by the caller
            results[index] = {"status": type(exc).__name__, "events": [], "seen": {}}

    cpu_before = _cpu_seconds(worker)
    _elapsed, before, peak = all_at_once(one, CONCURRENT_CHATS, monitor, _server_name(port))
    cpu_ms = (_cpu_seconds(worker) - cpu_before) / CONCURRENT_CHATS * 1000
    return {"cpu_ms": cpu_ms, "results": results, "before": before, "peak": peak}


def _median_seen(results: list[dict], event: str) -> float:
    """The median time to the first `event` of the chats that had one (NaN: none had)."""
    times = [r["seen"][event] for r in results if event in r["seen"]]
    return statistics.median(times) if times else float("nan")


def _first_seen(results: list[dict], event: str) -> float:
    """The earliest first `event` of the chats (NaN: none had one)."""
    times = [r["seen"][event] for r in results if event in r["seen"]]
    return min(times) if times else float("nan")


def concurrent_streams(made: list) -> None:
    """64 streamed chats at once over HTTP to one warm uvicorn worker, against the wire model
    (tests/wire_model.py) run here, with a short lease; round by round, alternated with the
    same chats against the floor (bench/bare_stream_app.py) and the Django floor
    (bench/django_floor.py) in the same kind of worker."""
    users = [bench_user(prefix="bench-stream", enabled=True) for _ in range(CONCURRENT_CHATS)]
    made += users
    sessions = [logged_in_session(user) for user in users]
    before = os.environ.get("BENCH_STREAMS_BEFORE")
    # The other commit's site gets users of its own: its runs and memory files apart.
    before_users = [
        bench_user(prefix="bench-stream-before", enabled=True)
        for _ in range(CONCURRENT_CHATS if before else 0)
    ]
    made += before_users
    before_sessions = [logged_in_session(user) for user in before_users]
    pgbouncer_port = os.environ.get("BENCH_STREAMS_PGBOUNCER_PORT")
    pooled_users = [
        bench_user(prefix="bench-stream-pooled", enabled=True)
        for _ in range(CONCURRENT_CHATS if pgbouncer_port else 0)
    ]
    made += pooled_users
    pooled_sessions = [logged_in_session(user) for user in pooled_users]
    connection.close()
    connections["default"].close_pool()  # this process holds no backend from here on
    model = WireModel(_wire_script)
    model.__enter__()
    monitor = direct_connection(autocommit=True)
    root = Path(settings.WORKSPACE_ROOT)
    # Each side: its port and how to start its server; the site as another checkout serves it
    # too when BENCH_STREAMS_BEFORE names one.
    sides: dict[str, tuple[int, Callable[[int], subprocess.Popen]]] = {
        "site": (STREAM_PORT, lambda port: _serve_one_worker(root, model.url, port=port)),
        "floor": (
            STREAM_PORT + 1,
            lambda port: _serve_one_worker(
                root, model.url, application=FLOOR_APPLICATION, port=port
            ),
        ),
        "django floor": (
            STREAM_PORT + 3,
            lambda port: _serve_one_worker(
                root, model.url, application=DJANGO_FLOOR_APPLICATION, port=port
            ),
        ),
    }
    if before:
        sides["before"] = (
            STREAM_PORT + 2,
            lambda port: _serve_one_worker(root, model.url, port=port, checkout=Path(before)),
        )
    bouncer = None
    if pgbouncer_port:
        database = urlsplit(os.environ["DATABASE_URL"])
        bouncer = PgBouncer(
            port=int(pgbouncer_port),
            server_host=database.hostname or "127.0.0.1",
            server_port=database.port or 5432,
            pool_size=16,
        )
        pooled_url = bouncer.url(database.path.lstrip("/"))
        sides["pgbouncer"] = (
            STREAM_PORT + 4,
            lambda port: _serve_one_worker(
                root, model.url, port=port, database_url=pooled_url, pool_mode="transaction"
            ),
        )
    servers: dict[str, subprocess.Popen] = {}
    bursts: dict[str, list[dict]] = {side: [] for side in sides}
    try:
        if bouncer is not None:
            bouncer.start()
        for side, (port, serve) in sides.items():
            servers[side] = serve(port)
        workers = {side: _worker_of(server.pid) for side, server in servers.items()}
        for round_number in range(STREAM_ROUNDS):
            for side, (port, _) in sides.items():

                def chat(index: int, round_number: int = round_number, side=side, port=port):
                    fact = f"remember that stream fact {side} {round_number}-{index}"
                    if side == "floor":
                        session = ("", "")
                    else:  # the Django floor reads the site's users' sessions, writes nothing
                        session = {"before": before_sessions, "pgbouncer": pooled_sessions}.get(
                            side, sessions
                        )[index]
                    return _stream_chat_over_http(session, fact, port=port)

                bursts[side].append(_burst(workers[side], chat, monitor, port))
    finally:
        for server in servers.values():
            _stop(server)
        if bouncer is not None:
            bouncer.__exit__(None, None, None)
        model.close()
    results = [r for burst in bursts["site"] for r in burst["results"]]
    lasts = [r["events"][-1]["event"] if r["events"] else str(r["status"]) for r in results]
    lost = (
        sum(1 for r in results if r["events"] and r["events"][-1].get("status_code") == 503)
        + AgentRun.objects.filter(user__in=users, status=AgentRun.Status.RUNNING).count()
    )
    statuses, before_statuses, pooled_statuses = (
        dict(AgentRun.objects.filter(user__in=side).values_list("status").annotate(n=Count("id")))
        for side in (users, before_users, pooled_users)
    )
    connection.close()
    monitor.close()

    def cpu(side: str) -> list[float]:
        return [burst["cpu_ms"] for burst in bursts[side]]

    def seen(side: str, event: str) -> list[float]:
        return [_median_seen(burst["results"], event) for burst in bursts[side]]

    def line(values: list[float], unit: str) -> str:
        each = ", ".join(f"{v:.1f}" if unit == "ms" else f"{v:.2f}" for v in values)
        return f"{statistics.median(values):6.2f} {unit}  (rounds: {each})"

    alone = WIRE_CALL_SECONDS + WIRE_FIRST_TOKEN_SECONDS
    print(
        f"\n{CONCURRENT_CHATS} concurrent streamed chats over HTTP, one warm uvicorn worker, "
        f"wire model (the tool call after {WIRE_CALL_SECONDS:.1f} s, the reply's first token "
        f"{WIRE_FIRST_TOKEN_SECONDS:.1f} s after the tool result), lease "
        f"{CONCURRENT_LEASE_SECONDS} s; {STREAM_ROUNDS} rounds, each beside the floor (a bare "
        "create_agent + ChatOpenAI ASGI app, bench/bare_stream_app.py), medians"
    )
    site_cpu, floor_cpu = cpu("site"), cpu("floor")
    print(
        f"  worker CPU per chat, site         {line(site_cpu, 'ms')}   (target <= "
        f"{CPU_PER_CHAT_TARGET_MS} ms; machine load {os.getloadavg()[0]:.1f})"
    )
    print(f"  worker CPU per chat, floor        {line(floor_cpu, 'ms')}")
    ratios = [ours / bare for ours, bare in zip(site_cpu, floor_cpu, strict=True)]
    print(f"  site / floor, CPU per chat        {statistics.median(ratios):6.2f}x")
    django_cpu = cpu("django floor")
    print(f"  worker CPU per chat, Django floor {line(django_cpu, 'ms')}")
    ratios = [ours / bare for ours, bare in zip(site_cpu, django_cpu, strict=True)]
    print(f"  site / Django floor, CPU per chat {statistics.median(ratios):6.2f}x")
    print(
        f"  time to first token event, site   {line(seen('site', 'token'), 's')}   (target: "
        f"median <= {FIRST_TOKEN_TARGET_SECONDS:.1f} s; the model alone: {alone:.1f} s)"
    )
    print(f"  time to first token event, floor  {line(seen('floor', 'token'), 's')}")
    print(f"  time to first token, Django floor {line(seen('django floor', 'token'), 's')}")
    for event in ("run", "tool_call", "done"):
        print(f"  time to first {event:9}, site      {line(seen('site', event), 's')}")

    def first(side: str) -> list[float]:
        return [_first_seen(burst["results"], "run") for burst in bursts[side]]

    print(f"  first run event of a burst, site  {line(first('site'), 's')}")
    if "before" in bursts:
        befores = [r for burst in bursts["before"] for r in burst["results"]]
        print(f"  the site as {before} serves it:")
        print(f"    worker CPU per chat             {line(cpu('before'), 'ms')}")
        print(f"    time to first token event       {line(seen('before', 'token'), 's')}")
        print(f"    time to first run event         {line(seen('before', 'run'), 's')}")
        print(f"    time to first tool_call event   {line(seen('before', 'tool_call'), 's')}")
        print(f"    first run event of a burst      {line(first('before'), 's')}")
        remembered = sum(map(_remembered, befores))
        print(f"    facts remembered                {remembered} of {len(befores)}")
        peak_before = max(burst["peak"] for burst in bursts["before"])
        print(f"    peak backends (server process)  {peak_before:8d}")
        print(f"    runs by status                  {before_statuses}")
    if "pgbouncer" in bursts:
        pooled = [r for burst in bursts["pgbouncer"] for r in burst["results"]]
        print("  the site through PgBouncer (transaction mode, no prepared statements):")
        print(f"    worker CPU per chat             {line(cpu('pgbouncer'), 'ms')}")
        ratios = [ours / direct for ours, direct in zip(cpu("pgbouncer"), site_cpu, strict=True)]
        print(f"    / the site direct, CPU per chat {statistics.median(ratios):6.2f}x")
        print(f"    time to first token event       {line(seen('pgbouncer', 'token'), 's')}")
        print(f"    time to first run event         {line(seen('pgbouncer', 'run'), 's')}")
        print(f"    time to first tool_call event   {line(seen('pgbouncer', 'tool_call'), 's')}")
        print(f"    first run event of a burst      {line(first('pgbouncer'), 's')}")
        print(
            f"    facts remembered                {sum(map(_remembered, pooled))} of {len(pooled)}"
        )
        peak_pooled = max(burst["peak"] for burst in bursts["pgbouncer"])
        print(f"    peak backends (its server)      {peak_pooled:8d}   (PgBouncer's pool: 16)")
        print(f"    runs by status                  {pooled_statuses}")
    floor_results = [r for burst in bursts["floor"] for r in burst["results"]]
    print(f"  leases lost                       {lost:8d}   (target 0)")
    peak = max(burst["peak"] for burst in bursts["site"])
    print(f"  peak backends (server process)    {peak:8d}   (allowed {PEAK_BACKENDS_ALLOWED})")
    print(f"  backends before                   {bursts['site'][0]['before']:8d}")
    print(f"  last events, site                 {dict((e, lasts.count(e)) for e in set(lasts))}")
    django_results = [r for burst in bursts["django floor"] for r in burst["results"]]
    print(
        f"  facts remembered, site / floor / Django floor  {sum(map(_remembered, results))} / "
        f"{sum(map(_remembered, floor_results))} / {sum(map(_remembered, django_results))} "
        f"of {len(results)}"
    )
    print(f"  runs by status                    {statuses}")


# The tokens section: plain streamed chats whose replies (the wire model echoes the message)
# are this many tokens apart, and how many rounds of CONCURRENT_CHATS chats each runs.
LONG_REPLY_EXTRA_TOKENS = 200
TOKEN_ROUNDS = 3


def streamed_tokens(made: list) -> None:
    """Worker CPU per streamed token: CONCURRENT_CHATS plain streamed chats at once over HTTP
    to one warm uvicorn worker, a short reply then one LONG_REPLY_EXTRA_TOKENS tokens longer
    (the wire model echoes the message word by word, with no wait), round by round; the
    difference per extra token is what every streamed token costs the worker on its way from
    the model's socket to the client's (parsing, LangChain and LangGraph, the event, SSE)."""
    users = [bench_user(prefix="bench-tokens", enabled=True) for _ in range(CONCURRENT_CHATS)]
    made += users
    sessions = [logged_in_session(user) for user in users]
    connection.close()
    connections["default"].close_pool()
    model = WireModel()
    model.__enter__()
    monitor = direct_connection(autocommit=True)
    server = _serve_one_worker(Path(settings.WORKSPACE_ROOT), model.url)
    extra = " ".join(f"w{i}" for i in range(LONG_REPLY_EXTRA_TOKENS))
    cpu: dict[str, list[float]] = {"short": [], "long": []}
    try:
        worker = _worker_of(server.pid)
        for round_number in range(TOKEN_ROUNDS + 1):  # the first is a warm-up
            for label, tail in (("short", ""), ("long", f" {extra}")):
                before = _cpu_seconds(worker)

                ended: list[str] = []

                def one(index: int, tail: str = tail, ended: list[str] = ended) -> None:
                    result = _stream_chat_over_http(sessions[index], f"hello {index}{tail}")
                    last = result["events"][-1] if result["events"] else {}
                    ended.append(last.get("status", str(result["status"])))

                all_at_once(one, CONCURRENT_CHATS, monitor)
                if ended != ["succeeded"] * CONCURRENT_CHATS:  # a figure of failed chats is none
                    raise SystemExit(f"tokens: chats ended {sorted(ended)}")
                if round_number:
                    cpu[label].append((_cpu_seconds(worker) - before) / CONCURRENT_CHATS * 1000)
    finally:
        _stop(server)
        model.close()
        monitor.close()
    short, long = (statistics.median(cpu[label]) for label in ("short", "long"))
    print(
        f"\nworker CPU per streamed chat, {CONCURRENT_CHATS} at once, median of {TOKEN_ROUNDS} "
        f"rounds: short reply {short:.1f} ms, {LONG_REPLY_EXTRA_TOKENS} tokens longer "
        f"{long:.1f} ms"
    )
    per_token_us = (long - short) / LONG_REPLY_EXTRA_TOKENS * 1000
    print(f"  per streamed token                {per_token_us:8.0f} us of worker CPU")


SECTIONS = {
    "graphs": graph_builds,
    "turns": turns,
    "overhead": overhead,
    "approvals": approved_writes,
    "chats": concurrent_chats,
    "streams": concurrent_streams,
    "tokens": streamed_tokens,
}


def main() -> None:
    chosen = sys.argv[1:] or list(SECTIONS)
    made: list = []
    with tempfile.TemporaryDirectory() as root:
        settings.WORKSPACE_ROOT = Path(root)
        try:
            for name in chosen:
                SECTIONS[name](made)
        finally:
            get_user_model().objects.filter(pk__in=[user.pk for user in made]).delete()


if __name__ == "__main__":
    main()
