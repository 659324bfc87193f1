"""Cost of assembling the chatbot graph for one run, by MEMORY.md size, side by side.

Run: .venv/bin/python bench/memory_prompt.py   (BENCH_DATABASE_URL picks the database)
Works in a rolled-back transaction and a temporary workspace root: it leaves nothing behind.
"""

import os
import statistics
import tempfile
import time
from pathlib import Path

from benchenv import bench_user, setup_django

setup_django()

from django.conf import settings  # noqa: E402
from django.db import transaction  # noqa: E402

from conversations import runs  # noqa: E402
from conversations.models import Conversation  # noqa: E402
from memory_app.runtime import build_chatbot_graph  # noqa: E402

ROUNDS = 200
CASES = [
    ("memory off (10 MB file present)", False, 10 * 1024 * 1024),
    ("memory on, file missing", True, None),
    ("memory on, 24 KiB file", True, 24 * 1024),
    ("memory on, 10 MB file", True, 10 * 1024 * 1024),
]


class _Rollback(Exception):
    pass


def _case_context(index: int, enabled: bool, size: int | None) -> runs.ToolRuntimeContext:
    user = bench_user(prefix=f"bench-{index}", enabled=enabled, memory_bytes=size)
    thread = Conversation.objects.create(thread_id=f"bench-{user.pk}", user=user)
    run = runs.create_run(user_id=user.pk, conversation=thread, request_id="bench")
    runs.claim_run(worker_id="bench", run_id=run.run_id)
    return runs.ToolRuntimeContext(
        str(user.pk), thread.thread_id, str(run.run_id), "bench", "bench"
    )


def _build(ctx: runs.ToolRuntimeContext, read_sizes: list[int]) -> tuple[float, int, int]:
    """One build: time (ms), file bytes read, prompt length."""
    real_read = os.read

    def counting_read(fd: int, n: int) -> bytes:
        data = real_read(fd, n)
        read_sizes.append(len(data))
        return data

    os.read = counting_read
    try:
        start = time.perf_counter()
        graph = build_chatbot_graph(ctx)
        elapsed = (time.perf_counter() - start) * 1000
    finally:
        os.read = real_read
    return elapsed, sum(read_sizes), len(graph.system_prompt)


def main() -> None:
    """Round-robin over the cases (after one warm-up build each), so no case runs colder."""
    with tempfile.TemporaryDirectory() as root:
        settings.WORKSPACE_ROOT = Path(root)
        timings: dict[str, list[float]] = {label: [] for label, _, _ in CASES}
        last: dict[str, tuple[int, int]] = {}
        try:
            with transaction.atomic():
                contexts = [
                    (label, _case_context(index, enabled, size))
                    for index, (label, enabled, size) in enumerate(CASES)
                ]
                for _label, ctx in contexts:
                    _build(ctx, [])
                for _ in range(ROUNDS):
                    for label, ctx in contexts:
                        elapsed, read, prompt = _build(ctx, [])
                        timings[label].append(elapsed)
                        last[label] = (read, prompt)
                raise _Rollback
        except _Rollback:
            pass
    medians = {label: statistics.median(values) for label, values in timings.items()}
    baseline = medians["memory on, 24 KiB file"]
    print(f"build_chatbot_graph, median of {ROUNDS} round-robin builds per case")
    print(f"{'case':34} {'ms/build':>9} {'bytes read':>11} {'prompt chars':>13} {'vs 24 KiB':>10}")
    for label, _, _ in CASES:
        read, prompt = last[label]
        ratio = medians[label] / baseline
        print(f"{label:34} {medians[label]:9.3f} {read:11d} {prompt:13d} {ratio:9.2f}x")


if __name__ == "__main__":
    main()
