"""Fault harness: chat load on a private PostgreSQL cluster and the production server (gunicorn
with uvicorn workers serving yuxi_site.asgi), with a database restart and a worker kill -9
mid-load, then a check of every promise the app makes.

    .venv/bin/python bench/soak.py            (full: 200 users, 1,000 requests)
    .venv/bin/python bench/soak.py --small    (CI: 8 users, 60 requests, well under a minute)
    .venv/bin/python bench/soak.py --small --pgbouncer   (two app hosts through PgBouncer)
    [--postgres-port 8398] [--site-port 8399] [--pgbouncer-port 8397]
                                (fixed ports, never random: give each run its own)

On its own it: starts a PostgreSQL cluster in a temporary directory (on --postgres-port,
loopback only; run as the `postgres` OS user when started as root), migrates it, creates users with
memory on and logged-in sessions directly in the database, starts gunicorn as
scripts/serve-production does (several uvicorn worker processes, the scripted model), sends a
bounded number of concurrent `POST /api/chat/ {"message": "remember that <unique fact>"}`
requests across the users with
same-user bursts, stops PostgreSQL once mid-load (probing the site while it is down) and starts
it again, kill -9's one gunicorn worker mid-load, stops gunicorn, runs `fail_expired_runs` once
the short leases have lapsed, and verifies:

- no 5xx answer that is not JSON (an HTML 500) ever, and `/healthz` 503 while the database is
  down, 200 after;
- every fact confirmed (HTTP 200, its `remember_memory` call successful) is in its user's
  MEMORY.md exactly once; no fact twice, none in another user's file;
- every MEMORY.md is valid UTF-8 made of whole lines (no torn file);
- every run is terminal after reaping;
- the database's backends are back to idle (none active or idle in a transaction, no advisory
  lock held) once the load is over.

With `--pgbouncer`, two app hosts (two gunicorn instances on --site-port and the port after it,
sharing one WORKSPACE_ROOT, requests alternating between them) reach PostgreSQL through
Debian's PgBouncer in transaction mode (`DATABASE_POOL_MODE=transaction`), and the faults are
PostgreSQL restarted mid-burst, PgBouncer restarted, a worker killed. It also prints the
recovery times (from PostgreSQL's or PgBouncer's start to `/healthz` 200 on every host) and the
peak of PostgreSQL backends beside the peak of PgBouncer's client connections, and fails if
the backends ever exceed PgBouncer's pool size.

Prints the figures and exits 1 on any violation. The verdict depends on counts only: faults
are triggered by the number of answered requests, never by a timer.
"""

import argparse
import contextlib
import http.client
import json
import os
import random
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from benchenv import logged_in_session

PROJECT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT_ROOT))

from tests.pgbouncer import PgBouncer, pgbouncer_missing  # noqa: E402

LOOPBACK = "127.0.0.1"
DATABASE_NAME = "yuxi_soak"
# Short enough that the runs a fault orphans lapse within the harness's run.
LEASE_SECONDS = 5
PENDING_TIMEOUT_SECONDS = 5
REQUEST_TIMEOUT_SECONDS = 60
# PgBouncer's server connections for the harness's database (--pgbouncer), whatever the clients.
PGBOUNCER_POOL_SIZE = 8
HOSTS_BEHIND_PGBOUNCER = 2
# After a restart PostgreSQL's old backends take a moment to exit while new ones log in: the
# backends' peak against the pool size leaves out the restarts and this long after each.
RESTART_SETTLE_SECONDS = 3.0
FACT = re.compile(r"soak-fact-(\d{6})")


@dataclass(frozen=True)
class Config:
    users: int
    requests: int
    concurrency: int
    workers: int
    probes: int  # chat requests sent while PostgreSQL is down
    deadline_seconds: int


SMALL = Config(users=8, requests=60, concurrency=8, workers=2, probes=4, deadline_seconds=120)
# CI's run with two hosts through PgBouncer: three faults, twice the clients.
SMALL_BEHIND_PGBOUNCER = Config(
    users=8, requests=120, concurrency=16, workers=2, probes=4, deadline_seconds=240
)
FULL = Config(
    users=200,
    requests=1000,
    concurrency=32,
    workers=4,
    probes=16,
    deadline_seconds=900,
)


@dataclass(frozen=True)
class Job:
    index: int
    user_index: int

    @property
    def fact(self) -> str:
        return f"soak-fact-{self.index:06d}"


@dataclass
class Answer:
    status: int | str  # the HTTP status, or what went wrong on the wire
    json_body: object = None
    content_type: str = ""

    @property
    def html_5xx(self) -> bool:
        return isinstance(self.status, int) and self.status >= 500 and self.json_body is None

    @property
    def confirmed(self) -> bool:
        """HTTP 200 with a successful `remember_memory` call: the app promised the fact."""
        if self.status != 200 or not isinstance(self.json_body, dict):
            return False
        calls = self.json_body.get("tool_calls") or []
        return any(
            isinstance(call, dict)
            and call.get("name") == "remember_memory"
            and call.get("status") in ("success", "added")
            for call in calls
        )


@dataclass
class Report:
    statuses: Counter = field(default_factory=Counter)
    down_statuses: Counter = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)
    figures: dict[str, object] = field(default_factory=dict)

    def violate(self, message: str) -> None:
        self.violations.append(message)


# The ports the harness listens on unless told others (--postgres-port, --site-port): fixed,
# never random, so a shared machine or CI can give each run its own.
POSTGRES_PORT = 8398
SITE_PORT = 8399
PGBOUNCER_PORT = 8397


def _require_free(port: int) -> int:
    """`port` if nothing listens on it on the loopback address; else exit saying which option
    chooses another."""
    with socket.socket() as sock:
        # Connections of an earlier run in TIME_WAIT do not keep a server from listening.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((LOOPBACK, port))
        except OSError as exc:
            sys.exit(
                f"soak: port {port} is taken ({exc.strerror}): choose free ones with "
                "--postgres-port and --site-port"
            )
    return port


def _postgres_bin() -> Path:
    if os.environ.get("PG_BIN"):
        return Path(os.environ["PG_BIN"])
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parent.parent.name)
    )
    if not found:
        sys.exit("soak: no PostgreSQL server binaries under /usr/lib/postgresql/*/bin (PG_BIN)")
    return found[-1].parent


class Cluster:
    """A throw-away PostgreSQL cluster on a loopback port, owned by the `postgres` OS user
    when the harness runs as root (initdb refuses root)."""

    def __init__(self, root: Path, port: int) -> None:
        self.bin = _postgres_bin()
        self.dir = root / "pg"
        self.data = self.dir / "data"
        self.port = port
        self.dir.mkdir()
        self.as_postgres = os.geteuid() == 0
        if self.as_postgres:
            shutil.chown(self.dir, "postgres", "postgres")

    def _run(self, *args: str) -> None:
        command = [str(self.bin / args[0]), *args[1:]]
        if self.as_postgres:
            command = ["runuser", "-u", "postgres", "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
        if done.returncode:
            raise RuntimeError(f"{args[0]} failed: {done.stderr or done.stdout}")

    def init(self) -> None:
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-locale",
            "--no-sync",
        )

    def start(self) -> None:
        options = (
            f"-c listen_addresses={LOOPBACK} -c port={self.port} "
            f"-c unix_socket_directories={self.dir} -c max_connections=200 "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        )
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.dir / "log"),
            "-o",
            options,
            "-w",
            "-t",
            "60",
            "start",
        )

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    @property
    def url(self) -> str:
        return f"postgres://postgres@{LOOPBACK}:{self.port}/{DATABASE_NAME}"


class Site:
    """gunicorn serving the ASGI app with uvicorn workers (gunicorn.conf.py) on a loopback port."""

    def __init__(self, root: Path, env: dict[str, str], config: Config, port: int) -> None:
        self.port = port
        self.log = root / f"gunicorn-{port}.log"
        self.env = {
            **env,
            "HOST": LOOPBACK,
            "PORT": str(self.port),
            "WEB_CONCURRENCY": str(config.workers),
            "GUNICORN_TIMEOUT": str(REQUEST_TIMEOUT_SECONDS),
        }
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py", "yuxi_site.asgi"],
                cwd=PROJECT_ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def workers(self) -> list[int]:
        """The pids of the master's worker processes, oldest first."""
        children = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == self.process.pid:
                children.append(int(stat.parent.name))
        return sorted(children)

    def wait_ready(self, workers: int, deadline: float) -> None:
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"gunicorn exited:\n{self.log.read_text()[-3000:]}")
            if len(self.workers()) >= workers and get(self.port, "/healthz").status == 200:
                return
            time.sleep(0.2)
        raise RuntimeError("gunicorn did not become ready in time")

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)


def _answer(connection: http.client.HTTPConnection) -> Answer:
    try:
        response = connection.getresponse()
        body = response.read()
    except TimeoutError:
        return Answer("timeout")
    except (ConnectionError, http.client.HTTPException) as exc:
        return Answer(f"disconnected ({type(exc).__name__})")
    finally:
        connection.close()
    content_type = response.getheader("Content-Type", "")
    parsed = None
    if content_type.startswith("application/json"):
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
    return Answer(response.status, parsed, content_type)


def get(port: int, path: str) -> Answer:
    connection = http.client.HTTPConnection(LOOPBACK, port, timeout=REQUEST_TIMEOUT_SECONDS)
    try:
        connection.request("GET", path)
    except OSError as exc:
        connection.close()
        return Answer(f"refused ({type(exc).__name__})")
    return _answer(connection)


def post_chat(port: int, session: tuple[str, str], message: str) -> Answer:
    session_key, csrf = session
    body = json.dumps({"message": message}).encode()
    headers = {
        "Content-Type": "application/json",
        "Cookie": f"sessionid={session_key}; csrftoken={csrf}",
        "X-CSRFToken": csrf,
    }
    connection = http.client.HTTPConnection(LOOPBACK, port, timeout=REQUEST_TIMEOUT_SECONDS)
    try:
        connection.request("POST", "/api/chat/", body=body, headers=headers)
    except OSError as exc:
        connection.close()
        return Answer(f"refused ({type(exc).__name__})")
    return _answer(connection)


def plan(config: Config, seed: int) -> list[Job]:
    """The requests in sending order: bursts of 1-4 requests of one user, adjacent so that a
    burst runs concurrently."""
    rng = random.Random(seed)
    jobs: list[Job] = []
    while len(jobs) < config.requests:
        user_index = rng.randrange(config.users)
        for _ in range(min(rng.choice((1, 1, 2, 3, 4)), config.requests - len(jobs))):
            jobs.append(Job(index=len(jobs), user_index=user_index))
    return jobs


def create_users(count: int) -> list[tuple[int, tuple[str, str]]]:
    """`count` users with memory on and a logged-in session each: (user id, (session key,
    CSRF secret)). Made directly in the database, as a login would leave them."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.hashers import make_password

    from memory_app.models import UserConfig

    User = get_user_model()
    User.objects.bulk_create(
        User(username=f"soak-{i:04d}", password=make_password(None)) for i in range(count)
    )
    users = list(User.objects.filter(username__startswith="soak-").order_by("username"))
    UserConfig.objects.bulk_create(UserConfig(user=user, enable_memory=True) for user in users)
    return [(user.pk, logged_in_session(user)) for user in users]


class Load:
    """Sends the planned requests from a pool of client threads, alternating between the app
    hosts; faults fire when a given number of requests have been answered."""

    def __init__(
        self,
        config: Config,
        sites: list[Site],
        cluster: Cluster,
        users: list,
        report: Report,
        bouncer: PgBouncer | None = None,
    ):
        self.config = config
        self.sites = sites
        self.cluster = cluster
        self.bouncer = bouncer
        self.users = users
        self.report = report
        self.answers: dict[int, Answer] = {}
        self.answered = 0
        self.changed = threading.Condition()
        self.gate = threading.Event()  # cleared while PostgreSQL is deliberately down
        self.gate.set()
        self.restarts: list[tuple[float, float]] = []  # (started, settled) monotonic times

    def _send(self, job: Job) -> None:
        self.gate.wait()
        uid, session = self.users[job.user_index]
        site = self.sites[job.index % len(self.sites)]
        answer = post_chat(site.port, session, f"remember that {job.fact} belongs to user {uid}")
        with self.changed:
            self.answers[job.index] = answer
            self.answered += 1
            self.changed.notify_all()

    def _wait_answered(self, count: int) -> None:
        with self.changed:
            self.changed.wait_for(lambda: self.answered >= count)

    def _recovered(self, what: str, since: float) -> None:
        """Wait for `/healthz` 200 on every host; the seconds since `since` are the figure."""
        deadline = time.monotonic() + 30
        for site in self.sites:
            while get(site.port, "/healthz").status != 200:
                if time.monotonic() > deadline:
                    self.report.violate(f"/healthz did not recover after the {what}")
                    return
                time.sleep(0.1)
        self.report.figures[f"recovery after the {what} (s)"] = round(time.monotonic() - since, 2)

    def _restart_database(self) -> None:
        """Stop PostgreSQL under the requests in flight, probe the sites while it is down,
        start it again."""
        started = time.monotonic()
        self.gate.clear()
        self.cluster.stop("fast")
        try:
            for site in self.sites:
                started = time.monotonic()
                health = get(site.port, "/healthz")
                self.report.figures[f"healthz while down (:{site.port})"] = (
                    f"{health.status} in {time.monotonic() - started:.1f} s"
                )
                if health.status != 503 or health.json_body is None:
                    self.report.violate(f"/healthz while the database is down: {health.status}")
            uid, session = self.users[0]
            for i in range(self.config.probes):
                site = self.sites[i % len(self.sites)]
                answer = post_chat(site.port, session, f"remember that probe {i} of {uid}")
                self.report.down_statuses[answer.status] += 1
                if answer.html_5xx:
                    self.report.violate(
                        f"HTTP {answer.status} ({answer.content_type or 'no type'}), not JSON, "
                        "while the database was down"
                    )
        finally:
            self.cluster.start()
        self._recovered("database restart", time.monotonic())
        self.restarts.append((started, time.monotonic() + RESTART_SETTLE_SECONDS))
        self.gate.set()

    def _restart_pgbouncer(self) -> None:
        """Stop PgBouncer under the requests in flight (every client connection cut) and start
        it again at once, as `systemctl restart pgbouncer` does."""
        started = time.monotonic()
        self.bouncer.stop()
        self.bouncer.start()
        self._recovered("PgBouncer restart", time.monotonic())
        self.restarts.append((started, time.monotonic() + RESTART_SETTLE_SECONDS))

    def _kill_worker(self) -> None:
        workers = self.sites[0].workers()
        if workers:
            os.kill(workers[0], signal.SIGKILL)
            self.report.figures["worker killed"] = workers[0]
        else:
            self.report.violate("no gunicorn worker to kill")

    def _faults(self, jobs: int) -> None:
        faults = [self._restart_database, self._kill_worker]
        if self.bouncer is not None:
            faults.insert(1, self._restart_pgbouncer)
        try:
            for number, fault in enumerate(faults, start=1):
                self._wait_answered(number * jobs // (len(faults) + 1))
                fault()
        except Exception as exc:  # reported as a violation; the clients must not wait forever
            self.report.violate(f"fault injection failed: {type(exc).__name__}: {exc}")
        finally:
            self.gate.set()

    def run(self, jobs: list[Job]) -> None:
        faults = threading.Thread(target=self._faults, args=(len(jobs),), daemon=True)
        faults.start()
        with ThreadPoolExecutor(max_workers=self.config.concurrency) as pool:
            for future in [pool.submit(self._send, job) for job in jobs]:
                future.result()
        faults.join(60)
        if faults.is_alive():
            self.report.violate("the fault thread did not finish")


class Connections:
    """Samples, while the load runs, PostgreSQL's client backends of the harness's database
    and PgBouncer's client connections to it. A sample that fails (either is down on purpose)
    is skipped."""

    def __init__(self, cluster: Cluster, bouncer: PgBouncer) -> None:
        self.cluster = cluster
        self.bouncer = bouncer
        self.backends: list[tuple[float, int]] = []  # (monotonic time, count)
        self.peak_clients = 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> "Connections":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join(10)

    def _backends(self) -> int:
        with psycopg.connect(self.cluster.url.replace("postgres://", "postgresql://")) as conn:
            return conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s "
                "AND backend_type = 'client backend' AND pid <> pg_backend_pid()",
                [DATABASE_NAME],
            ).fetchone()[0]

    def _sample(self) -> None:
        while not self.done.wait(0.25):
            with contextlib.suppress(psycopg.Error):
                self.backends.append((time.monotonic(), self._backends()))
            with contextlib.suppress(psycopg.Error):
                clients, _ = self.bouncer.clients_and_servers(DATABASE_NAME)
                self.peak_clients = max(self.peak_clients, clients)


def check_backends(report: Report, deadline: float) -> None:
    """Once the load is over, every other backend must be idle and no advisory lock held."""
    from django.db import connection

    busy: list = []
    advisory = 0
    while True:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pid, state, left(query, 80) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                "AND backend_type = 'client backend' AND state <> 'idle'"
            )
            busy = cursor.fetchall()
            cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'")
            advisory = cursor.fetchone()[0]
        if (not busy and not advisory) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    report.figures["busy backends after load"] = len(busy)
    if busy:
        report.violate(f"backends not idle after the load: {busy}")
    if advisory:
        report.violate(f"{advisory} advisory lock(s) still held after the load")


def reap(env: dict[str, str], report: Report) -> None:
    """Wait for the orphans' leases and pending timeouts to lapse, then run the command."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(extract(epoch FROM max(lease_expires_at) - clock_timestamp()), 0) "
            "FROM conversations_agentrun WHERE status = 'running'"
        )
        lease_left = float(cursor.fetchone()[0])
    time.sleep(max(lease_left, 0) + 0.5)
    time.sleep(PENDING_TIMEOUT_SECONDS)  # any pending run is now past its timeout
    done = subprocess.run(
        [sys.executable, "manage.py", "fail_expired_runs"],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode:
        report.violate(f"fail_expired_runs failed: {done.stderr[-2000:]}")
        return
    report.figures["runs reaped"] = int(done.stdout.split()[0])


def verify(report: Report, jobs: list[Job], answers: dict[int, Answer], users: list) -> None:
    from django.conf import settings

    from conversations.models import AgentRun

    for answer in answers.values():
        report.statuses[answer.status] += 1
        if answer.html_5xx:
            report.violate(f"HTTP {answer.status} not JSON ({answer.content_type or 'no type'})")

    owner = {job.index: job.user_index for job in jobs}
    confirmed = {job.index for job in jobs if answers[job.index].confirmed}
    found: Counter = Counter()
    for user_index, (uid, _) in enumerate(users):
        path = Path(settings.WORKSPACE_ROOT) / str(uid) / "agents" / "MEMORY.md"
        if not path.exists():
            continue
        data = path.read_bytes()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            report.violate(f"{path} is not valid UTF-8 (torn)")
            continue
        if data and not data.endswith(b"\n"):
            report.violate(f"{path} does not end with a whole line (torn)")
        for match in FACT.finditer(text):
            index = int(match.group(1))
            found[index] += 1
            if owner.get(index) != user_index:
                report.violate(f"fact {index} is in user {uid}'s memory, not its owner's")
    for index in sorted(confirmed):
        if found[index] != 1:
            report.violate(f"confirmed fact {index} is in its user's memory {found[index]} times")
    for index, count in sorted(found.items()):
        if count > 1 and index not in confirmed:
            report.violate(f"unconfirmed fact {index} is in memory {count} times")

    live = AgentRun.objects.exclude(status__in=AgentRun.TERMINAL_STATUSES)
    report.figures["runs"] = AgentRun.objects.count()
    report.figures["runs not terminal after reaping"] = live.count()
    if live.exists():
        report.violate(f"{live.count()} run(s) not terminal after reaping")
    report.figures["facts confirmed"] = len(confirmed)
    report.figures["confirmed facts found once"] = sum(1 for i in confirmed if found[i] == 1)
    report.figures["confirmed facts lost"] = sum(1 for i in confirmed if found[i] == 0)
    report.figures["facts duplicated"] = sum(1 for count in found.values() if count > 1)
    report.figures["facts found, not confirmed"] = len(set(found) - confirmed)


def soak(
    config: Config,
    seed: int,
    *,
    postgres_port: int,
    site_port: int,
    pgbouncer_port: int | None = None,
) -> Report:
    """The harness's run; with `pgbouncer_port`, two app hosts through PgBouncer."""
    report = Report()
    started = time.monotonic()
    deadline = started + config.deadline_seconds
    root = Path(tempfile.mkdtemp(prefix="yuxi-soak-"))
    root.chmod(0o755)  # the postgres user must reach its directory inside
    cluster = Cluster(root, postgres_port)
    sites: list[Site] = []
    bouncer = None
    try:
        cluster.init()
        cluster.start()
        subprocess.run(
            [
                str(cluster.bin / "createdb"),
                "-h",
                LOOPBACK,
                "-p",
                str(cluster.port),
                "-U",
                "postgres",
                DATABASE_NAME,
            ],
            check=True,
            timeout=60,
        )
        env = {
            **os.environ,
            "DATABASE_URL": cluster.url,
            "WORKSPACE_ROOT": str(root / "workspaces"),
            "SECRET_KEY": secrets.token_urlsafe(50),
            "DEBUG": "False",
            "LLM_BASE_URL": "",
            "AGENT_RUN_LEASE_SECONDS": str(LEASE_SECONDS),
            "AGENT_RUN_PENDING_TIMEOUT_SECONDS": str(PENDING_TIMEOUT_SECONDS),
            "DJANGO_SETTINGS_MODULE": "yuxi_site.settings",
        }
        os.environ.update(env)
        import django
        from django.core.management import call_command
        from django.db import connection

        django.setup()
        call_command("migrate", verbosity=0)  # directly, as DATABASE_DIRECT_URL would
        users = create_users(config.users)
        connection.close()
        connection.close_pool()  # the harness holds no backend while the load runs

        site_env = env
        hosts = 1
        if pgbouncer_port is not None:
            bouncer = PgBouncer(
                port=pgbouncer_port, server_port=cluster.port, pool_size=PGBOUNCER_POOL_SIZE
            )
            bouncer.start()
            site_env = {
                **env,
                "DATABASE_URL": bouncer.url(DATABASE_NAME),
                "DATABASE_DIRECT_URL": cluster.url,
                "DATABASE_POOL_MODE": "transaction",
            }
            hosts = HOSTS_BEHIND_PGBOUNCER
        # Every host shares the one WORKSPACE_ROOT (a shared volume whose locks work across
        # hosts), as docs/operations.md requires.
        sites = [Site(root, site_env, config, site_port + host) for host in range(hosts)]
        for site in sites:
            site.start()
        for site in sites:
            site.wait_ready(config.workers, min(deadline, time.monotonic() + 60))

        jobs = plan(config, seed)
        load = Load(config, sites, cluster, users, report, bouncer)
        load_started = time.monotonic()
        if bouncer is not None:
            with Connections(cluster, bouncer) as sampled:
                load.run(jobs)
            report.figures["app hosts"] = hosts
            report.figures["peak PgBouncer client connections"] = sampled.peak_clients
            steady = [
                count
                for at, count in sampled.backends
                if not any(start <= at <= settled for start, settled in load.restarts)
            ]
            peak = max(steady, default=0)
            report.figures["peak PostgreSQL backends"] = peak
            report.figures["peak PostgreSQL backends during the restarts"] = max(
                (count for _, count in sampled.backends), default=0
            )
            if peak > PGBOUNCER_POOL_SIZE:
                report.violate(
                    f"{peak} backends, above PgBouncer's pool size {PGBOUNCER_POOL_SIZE}"
                )
        else:
            load.run(jobs)
        report.figures["load seconds"] = round(time.monotonic() - load_started, 1)

        connection.close()  # its backend died with the restart
        check_backends(report, min(deadline, time.monotonic() + 15))
        for site in sites:
            health = get(site.port, "/healthz")
            if health.status != 200:
                report.violate(f"/healthz after the load (:{site.port}): {health.status}")
            site.stop()
        reap(env, report)
        verify(report, jobs, load.answers, users)
        connection.close()
        if time.monotonic() > deadline:
            report.violate(f"took longer than {config.deadline_seconds} s")
    except Exception as exc:  # a harness failure is a failed verdict, reported, never hidden
        report.violate(f"harness error: {type(exc).__name__}: {exc}")
        for site in sites:
            if site.log.exists():
                print(site.log.read_text()[-3000:], file=sys.stderr)
    finally:
        for site in sites:
            site.stop()
        if bouncer is not None:
            bouncer.stop()
            shutil.rmtree(bouncer.dir, ignore_errors=True)
        with contextlib.suppress(RuntimeError, subprocess.SubprocessError):
            cluster.stop("immediate")  # fails only when it is already stopped
        shutil.rmtree(root, ignore_errors=True)
    report.figures["total seconds"] = round(time.monotonic() - started, 1)
    return report


def _interrupt(signum: int, frame: object) -> None:
    """SIGTERM (a CI timeout) cleans up as Ctrl-C does."""
    raise KeyboardInterrupt


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", action="store_true", help="the CI configuration")
    parser.add_argument("--seed", type=int, default=10)
    parser.add_argument(
        "--postgres-port",
        type=int,
        default=POSTGRES_PORT,
        help=f"the private PostgreSQL cluster's loopback port (default {POSTGRES_PORT})",
    )
    parser.add_argument(
        "--site-port",
        type=int,
        default=SITE_PORT,
        help=f"gunicorn's loopback port (default {SITE_PORT}); with --pgbouncer the second "
        "host's is the next one",
    )
    parser.add_argument(
        "--pgbouncer",
        action="store_true",
        help="two app hosts reaching PostgreSQL through PgBouncer in transaction mode",
    )
    parser.add_argument(
        "--pgbouncer-port",
        type=int,
        default=PGBOUNCER_PORT,
        help=f"PgBouncer's loopback port with --pgbouncer (default {PGBOUNCER_PORT})",
    )
    return parser.parse_args(argv)


def main() -> None:
    args = parse_args()
    config = SMALL if args.small else FULL
    pgbouncer_port = None
    if args.pgbouncer:
        if reason := pgbouncer_missing():
            sys.exit(f"soak: {reason}")
        config = SMALL_BEHIND_PGBOUNCER if args.small else config
        pgbouncer_port = _require_free(args.pgbouncer_port)
        _require_free(args.site_port + 1)
    signal.signal(signal.SIGTERM, _interrupt)
    hosts = f"{HOSTS_BEHIND_PGBOUNCER} hosts through PgBouncer, " if args.pgbouncer else ""
    print(
        f"soak: {config.users} users, {config.requests} requests, {config.concurrency} clients, "
        f"{hosts}gunicorn {config.workers} uvicorn workers each, seed {args.seed}"
    )
    report = soak(
        config,
        args.seed,
        postgres_port=_require_free(args.postgres_port),
        site_port=_require_free(args.site_port),
        pgbouncer_port=pgbouncer_port,
    )

    def by_status(counter: Counter) -> str:
        return ", ".join(f"{status}: {n}" for status, n in sorted(counter.items(), key=str))

    print(f"requests by status: {by_status(report.statuses)}")
    print(f"while PostgreSQL was down: {by_status(report.down_statuses)}")
    for name, value in report.figures.items():
        print(f"{name}: {value}")
    if report.violations:
        print(f"VIOLATIONS ({len(report.violations)}):")
        for violation, count in list(Counter(report.violations).items())[:50]:
            print(f"  - {violation}" + (f" (x{count})" if count > 1 else ""))
        sys.exit(1)
    print("verdict: ok")


if __name__ == "__main__":
    main()
