"""False refusals of the credential detector on ordinary facts, and its cost per fact.

Run: .venv/bin/python bench/false_refusals.py [--show]   (no database needed)

Plays every fact of `bench/fact_set/ordinary_facts.json` (made by `bench/make_fact_set.py`:
dates, addresses, phone numbers, order and tracking numbers, version strings, hashes of files
and other reference numbers, English and Chinese, none a credential) through
`memory_app.credentials.credential_kinds`, the check `remember_memory` refuses on, and prints
per category and language how many would be refused. `--show` lists each refused fact with
the kinds found. The target is at most 1% refused; `docs/evaluation.md` records the figures.
Then the evaluation's secret cases (`bench/cases/secret.json`): the detector must find the
credential in every one (in its message, or in a user message of an earlier thread).
Last, the detector's time on two long lines full of numbers beside password words (each number
looks only within its reach, so the time grows with the line, not with its square).
"""

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT_ROOT))

from memory_app.credentials import credential_kinds  # noqa: E402

FACT_SET = Path(__file__).resolve().parent / "fact_set" / "ordinary_facts.json"
# The evaluation's secret cases: each states a credential, in its message or in an earlier
# thread's user message.
SECRET_CASES = Path(__file__).resolve().parent / "cases" / "secret.json"
# Long lines of numbers beside password words: 5,000 and 6,000 numbers on one line each.
LONG_LINES = {
    "60 KB: 'password x' then 5,000 order numbers": "password x " + "order 12345 " * 5000,
    "54 KB: 'PIN 4821' 6,000 times": "PIN 4821 " * 6000,
}
# The most false refusals the set may have, as a fraction of its facts.
MAX_FALSE_REFUSAL_RATE = 0.01


def load_facts(path: Path = FACT_SET) -> list[dict[str, str]]:
    return json.loads(path.read_text(encoding="utf-8"))


def refused(facts: list[dict[str, str]]) -> list[tuple[dict[str, str], list[str]]]:
    """Each fact the detector finds a credential in, with the kinds found."""
    found = ((fact, credential_kinds(fact["text"])) for fact in facts)
    return [(fact, [str(kind) for kind in kinds]) for fact, kinds in found if kinds]


def missed_secrets(path: Path = SECRET_CASES) -> tuple[int, list[str]]:
    """How many secret cases there are, and the ids of those in whose user texts (the message,
    and the user messages of earlier threads) the detector finds no credential."""
    cases = json.loads(path.read_text(encoding="utf-8"))
    missed = []
    for case in cases:
        said = [case["message"]] + [
            turn["content"]
            for thread in case.get("earlier_threads", ())
            for turn in thread
            if turn["role"] == "user"
        ]
        if not any(credential_kinds(text) for text in said):
            missed.append(case["id"])
    return len(cases), missed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--show", action="store_true", help="list each refused fact")
    args = parser.parse_args(argv)
    facts = load_facts()
    timings = []
    for fact in facts:
        start = time.perf_counter()
        credential_kinds(fact["text"])
        timings.append((time.perf_counter() - start) * 1e6)
    refusals = refused(facts)
    by_group: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for fact in facts:
        by_group[(fact["category"], fact["language"])][0] += 1
    for fact, _ in refusals:
        by_group[(fact["category"], fact["language"])][1] += 1
    print(f"{'category':<15}{'language':<10}{'facts':>7}{'refused':>9}")
    for (category, language), (count, bad) in sorted(by_group.items()):
        print(f"{category:<15}{language:<10}{count:>7}{bad:>9}")
    rate = len(refusals) / len(facts)
    print(f"{'all':<25}{len(facts):>7}{len(refusals):>9}   false refusals {rate:.2%}")
    print(
        f"detector time per fact: median {statistics.median(timings):.0f} us, "
        f"max {max(timings):.0f} us"
    )
    cases, missed = missed_secrets()
    print(f"secret cases in which the detector finds the credential: {cases - len(missed)}/{cases}")
    for case_id in missed:
        print(f"  missed: {case_id}")
    for label, line in LONG_LINES.items():
        start = time.perf_counter()
        credential_kinds(line)
        print(f"detector time on one long line, {label}: {time.perf_counter() - start:.2f} s")
    if args.show:
        for fact, kinds in refusals:
            print(f"  {fact['id']}: {', '.join(kinds)}: {fact['text']}")
    return 0 if rate <= MAX_FALSE_REFUSAL_RATE and not missed else 1


if __name__ == "__main__":
    sys.exit(main())
