"""What the two labelled lookback sets (`make_recall_set.py`, `make_second_recall_set.py`)
share: the thread list (visible, then hidden), the facts of both languages, the facts the hidden
threads repeat, the question list and the file.

The sets are written apart (other topics, other sentences), so that one search tuned on one
is still tested by the other; only this layout is common, so `bench/recall.py` reads both
alike. Standard library only; the same random generator state always gives the same bytes.
"""

import json
import random
from collections.abc import Callable
from pathlib import Path

# The threads no search may return, after the visible ones: (status, source).
HIDDEN_THREADS = [("archived", "chat"), ("deleted", "chat"), ("active", "agent_call")]


def both_languages(
    rng: random.Random,
    english: Callable[[random.Random], list[dict]],
    chinese: Callable[[random.Random], list[dict]],
) -> list[dict]:
    """The English facts then the Chinese ones, each labelled with its language (`lang`)."""
    return [{**f, "lang": "en"} for f in english(rng)] + [{**f, "lang": "zh"} for f in chinese(rng)]


def thread_list(visible: int, title: str, hidden_title: str) -> list[dict]:
    """`visible` active chat threads (`{title} 1` onwards), then `HIDDEN_THREADS`, numbered
    from `visible` in the messages."""
    threads = [
        {"title": f"{title} {n + 1}", "status": "active", "source": "chat"} for n in range(visible)
    ]
    for n, (status, source) in enumerate(HIDDEN_THREADS):
        threads.append({"title": f"{hidden_title} {n + 1}", "status": status, "source": source})
    return threads


def hide_decoys(
    rng: random.Random, messages: list[dict], facts: list[dict], *, count: int, first: int
) -> None:
    """Insert `count` facts, word for word, at random points of `messages`, each in one of the
    hidden threads (numbered from `first`) and labelled with no fact: a search that returns
    one has shown the user a thread it must not."""
    for fact in rng.sample(range(len(facts)), count):
        at = rng.randrange(len(messages) + 1)
        thread = first + rng.randrange(len(HIDDEN_THREADS))
        decoy = {"thread": thread, "role": "user", "content": facts[fact]["text"], "fact": None}
        messages.insert(at, decoy)


def questions_of(facts: list[dict]) -> list[dict]:
    """Every fact's questions, each with the fact it should find, its language and kind."""
    return [
        {"query": query, "fact": index, "lang": fact["lang"], "kind": kind}
        for index, fact in enumerate(facts)
        for kind, query in fact["questions"]
    ]


def write_set(output: Path, data: dict) -> None:
    """Write a set as compact JSON, one message or question a line (small diffs when a
    generator changes), and say what was written."""
    output.parent.mkdir(exist_ok=True)
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    text = text.replace('},{"thread"', '},\n{"thread"').replace('},{"query"', '},\n{"query"')
    output.write_text(text + "\n", encoding="utf-8")
    print(
        f"wrote {output.name}: {len(data['messages']):,} messages, "
        f"{len(data['questions'])} questions, {output.stat().st_size:,} bytes"
    )
