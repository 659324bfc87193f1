"""Cost of the CJK bigram function behind the 2-character search index, by message length.

    .venv/bin/python bench/cjk_bigrams.py   (BENCH_DATABASE_URL picks the database)

Prints, per length, the migrated `yuxi_cjk_bigrams` next to migration 0002's per-position
`substr` version (recreated as a temporary function), so a long CJK message's insert cost
can be seen to grow linearly, not quadratically.
"""

import importlib
import random
import statistics
import time

from benchenv import setup_django

setup_django()

from django.db import connection  # noqa: E402

LENGTHS = (1_000, 5_000, 20_000, 40_000)
OLD_MAX_LENGTH = 20_000  # the quadratic version takes seconds beyond this
RUNS = 3


def _median_ms(function: str, text: str) -> float:
    samples = []
    with connection.cursor() as cursor:
        for _ in range(RUNS):
            started = time.perf_counter()
            cursor.execute(f"SELECT cardinality({function}(%s))", [text])
            cursor.fetchone()
            samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def main() -> None:
    migration = importlib.import_module("conversations.migrations.0003_linear_cjk_bigrams")
    old_sql = migration.QUADRATIC_SQL.replace(
        "FUNCTION yuxi_cjk_bigrams(", "FUNCTION pg_temp.old_cjk_bigrams("
    )
    with connection.cursor() as cursor:
        cursor.execute(old_sql)
    rng = random.Random(1)
    print("length   linear ms   ms per 1k chars   0002 (substr) ms   0002 / linear")
    for length in LENGTHS:
        text = "".join(chr(0x4E00 + rng.randrange(2500)) for _ in range(length))
        new = _median_ms("yuxi_cjk_bigrams", text)
        if length <= OLD_MAX_LENGTH:
            old = _median_ms("pg_temp.old_cjk_bigrams", text)
            old_cells = f"{old:>16.1f}   {old / new:>12.1f}x"
        else:
            old_cells = f"{'(skipped)':>16}   {'':>13}"
        print(f"{length:>6}   {new:>9.1f}   {new / length * 1000:>15.2f}   {old_cells}")


if __name__ == "__main__":
    main()
