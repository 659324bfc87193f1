"""How long "where each line came from" takes at its bound: a 128 KiB MEMORY.md with 20 kept
versions, walked to the oldest (the worst case: every version is read and compared).

The file starts as ~127 KiB written outside the app (so its lines are `earlier` and every walk
reaches the oldest version), then 20 real changes follow, alternating an agent's
`remember_memory` in a thread of its own and the user's `write_memory_file` that rewrites ten
lines and moves one: 20 kept versions, the last file just under 128 KiB. Timed: the selector
`memory_line_origins` and `GET /api/memory/lines/` in process (session, JSON and all).

Run: .venv/bin/python bench/line_origins.py [--samples N]   (BENCH_DATABASE_URL picks the
database). It creates its own user under a temporary workspace root, prints its figures, and
removes everything it created.
"""

import argparse
import hashlib
import os
import statistics
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

from benchenv import claimed_run_context, setup_django

setup_django()

from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402

from memory_app.models import UserConfig  # noqa: E402
from memory_app.runtime import ToolRuntimeContext  # noqa: E402
from memory_app.selectors import memory_line_origins, read_memory_file  # noqa: E402
from memory_app.services import remember_memory, write_memory_file  # noqa: E402
from memory_app.versions import MEMORY_VERSIONS_DIR  # noqa: E402
from memory_app.workspace import Workspace  # noqa: E402
from memory_app.workspace.paths import MEMORY_RELPATH  # noqa: E402

PREFIX = f"bench-origins-{uuid.uuid4().hex[:8]}"
CHANGES = 20
FILE_BYTES = 131072
# Room the 20 changes need (10 appended facts of ~45 bytes, edits of equal length).
CHANGES_ROOM = 1024
TARGET_P95_MS = 50


def _context(user, name: str) -> ToolRuntimeContext:
    """A claimed top-level chat run of `user` in a thread of its own, as the Chat service makes."""
    return claimed_run_context(user, prefix=PREFIX, name=name)


def _line(number: int, tag: str = "fact") -> str:
    return f"- {tag} {number:05d}: prefers the window seat, row {number % 40:02d}\n"


def _build(user) -> None:
    """The starting file written outside the app, then 20 changes of both kinds."""
    lines, size = [], 0
    while size + len(_line(len(lines))) <= FILE_BYTES - CHANGES_ROOM:
        lines.append(_line(len(lines)))
        size += len(lines[-1])
    workspace = Workspace.for_user(user.pk)
    path = Path(settings.WORKSPACE_ROOT) / str(user.pk) / "agents"
    path.mkdir(parents=True)
    (path / "MEMORY.md").write_text("".join(lines), encoding="utf-8")
    for change in range(CHANGES):
        if change % 2 == 0:
            fact = f"agent fact {change:02d}: the sister's wedding is on June {change + 1}"
            remember_memory(_context(user, f"thread-{change}"), fact)
        else:
            text = read_memory_file(user=user).text
            current = text.splitlines(keepends=True)
            for offset in range(10):  # ten lines rewritten, the same length
                index = (change * 97 + offset * 211) % len(current)
                current[index] = _line(index, "edit")
            current.append(current.pop(change * 13))  # one line moved to the end
            write_memory_file(
                user=user,
                text="".join(current),
                if_match=read_memory_file(user=user).etag,
                actor=user,
            )
    assert workspace.read_digested(MEMORY_RELPATH, 0).size_bytes <= FILE_BYTES


def _percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def _timed(call, samples: int) -> tuple[list[float], list[float]]:
    """Wall-clock and CPU milliseconds of each call (the CPU time is this process's own, so
    it shows the cost apart from waiting for a core on a busy machine)."""
    for _ in range(3):  # warm: imports, the page cache, the connection
        call()
    wall, cpu = [], []
    for _ in range(samples):
        start, start_cpu = time.perf_counter(), time.process_time()
        call()
        wall.append((time.perf_counter() - start) * 1000)
        cpu.append((time.process_time() - start_cpu) * 1000)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=200)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="yuxi-bench-") as root:
        settings.WORKSPACE_ROOT = Path(root)
        user = get_user_model().objects.create(username=PREFIX)
        try:
            UserConfig.objects.create(user=user, enable_memory=True)
            _build(user)
            run(user, options.samples)
        finally:
            get_user_model().objects.filter(username__startswith=PREFIX).delete()


def run(user, samples: int) -> None:
    memory = read_memory_file(user=user)
    kept = Workspace.for_user(user.pk).file_sizes(MEMORY_VERSIONS_DIR)
    with CaptureQueriesContext(connection) as queries:
        lines = memory_line_origins(user=user)
    origins = Counter(line.origin["kind"] for line in lines)
    print(
        f"MEMORY.md: {memory.size_bytes} bytes, {len(lines)} lines; {len(kept)} kept versions "
        f"({sum(kept.values())} bytes); {len(queries)} queries per answer"
    )
    print("  origins: " + ", ".join(f"{kind} {count}" for kind, count in sorted(origins.items())))
    assert hashlib.sha256(b"").hexdigest() not in kept

    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(user)

    def http() -> None:
        response = client.get("/api/memory/lines/")
        assert response.status_code == 200, response.content[:200]

    rows = {
        "memory_line_origins (selector)": _timed(lambda: memory_line_origins(user=user), samples),
        "GET /api/memory/lines/ (in process)": _timed(http, samples),
    }
    header = "wall: min   median      p95   cpu: min   median      p95"
    print(f"\nover {samples} calls (ms)     {header}")
    for name, (wall, cpu) in rows.items():
        print(
            f"  {name:<36} {min(wall):7.3f} {statistics.median(wall):8.3f} "
            f"{_percentile(wall, 0.95):8.3f}  {min(cpu):7.3f} {statistics.median(cpu):8.3f} "
            f"{_percentile(cpu, 0.95):8.3f}"
        )
    wall, cpu = rows["memory_line_origins (selector)"]
    p95, cpu_p95 = _percentile(wall, 0.95), _percentile(cpu, 0.95)
    verdict = "under" if p95 < TARGET_P95_MS else "OVER"
    print(
        f"\nselector p95 {p95:.3f} ms wall ({cpu_p95:.3f} ms CPU): {verdict} the "
        f"{TARGET_P95_MS} ms bound; load average now {os.getloadavg()[0]:.2f} on "
        f"{os.cpu_count()} cores"
    )


if __name__ == "__main__":
    main()
