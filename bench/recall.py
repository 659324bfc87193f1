"""Lookback recall: does a search find the messages that state what the model looks for?

    .venv/bin/python bench/recall.py [--before REV] [--rounds N] [--only REGEX]
    (BENCH_DATABASE_URL picks the database; see benchenv)

Loads each labelled set into the bench database, next to whatever else it holds (the
1M-message seed of `history.py`, so the indexes are as large as there), each conversation as
one user's history: `bench/recall_set/lookback.json` (`make_recall_set.py`) and
`bench/recall_set/second.json` (`make_second_recall_set.py`), keyword questions, one user
each; `bench/recall_set/dialogue.json` (`make_dialogue_set.py`), natural-language questions
over eight long conversations between two people, one user each. Then asks every question as
written with each search, side by side, timed in turn on each question:

- before (REV), with `--before`: `search_thread_messages` as git revision REV had it (a
  refused question is a miss);
- ours (as written): `search_thread_messages` as it is (the whole call, its Python included);
- full text (OR): PostgreSQL's own ranking, every word of the question (`simple`
  configuration) OR-ed, ordered by `ts_rank`, then newest first, over the same visibility,
  with a GIN index of its own on each user's messages (made here, bench only);
- Okapi BM25: the textbook ranking (k1 1.2, b 0.75) over the same rows, in memory: words
  lowercased, CJK runs as overlapping two-character pieces.

Prints, per set, recall@1, @5 and @10 (for a question whose fact spans several turns, the share
of them among the first k hits), p50 and p95 latency, recall@1 and @5 per language and kind of
question, the questions ours misses, and how many hits came from the hidden threads that repeat
facts (always 0, or a visibility bug).
"""

import argparse
import json
import math
import re
import statistics
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from benchenv import repository_at, setup_django

setup_django()

from django.contrib.auth import get_user_model  # noqa: E402
from django.contrib.postgres.indexes import GinIndex  # noqa: E402
from django.db import connection, transaction  # noqa: E402

from conversations.models import Conversation, Message  # noqa: E402
from conversations.repository import search_thread_messages  # noqa: E402
from conversations.repository.arguments import HistoryQueryError  # noqa: E402

SETS_DIR = Path(__file__).resolve().parent / "recall_set"
# (name, file, the user that holds it: with `-N` appended per conversation when it has several)
SETS = [
    ("first set", "lookback.json", "bench-recall"),
    ("second set", "second.json", "bench-recall-2"),
    ("dialogue", "dialogue.json", "bench-recall-dialogue"),
]
LIMIT = 10
ROUNDS = 5
KS = (1, 5, 10)
T0 = datetime(2025, 6, 1, tzinfo=UTC)
# Okapi BM25's usual parameters, for the reference ranking.
OKAPI_K1 = 1.2
OKAPI_B = 0.75
# Runs of CJK characters (kana, ideographs) and runs of other letters or digits: the reference
# ranking's words, CJK runs cut into overlapping two-character pieces (no segmenter).
CJK_RUN = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
TOKENS = re.compile(f"[{CJK_RUN}]+|[^\\W_{CJK_RUN}]+")

# PostgreSQL full text as a model's question would reach it: every word of the question
# (`simple` configuration: no stemming, no stop words), any of them (OR), ranked by ts_rank.
FULL_TEXT_SQL = """
SELECT m.id
FROM conversations_message m
INNER JOIN conversations_conversation c ON c.id = m.conversation_id
CROSS JOIN (
    SELECT to_tsquery('simple', string_agg(quote_literal(w.lexeme), ' | ')) AS q
    FROM unnest(to_tsvector('simple', %(query)s)) w
) AS q
WHERE m.owner_id = %(owner)s AND m.message_type = 'text' AND m.role IN ('user', 'assistant')
  AND c.user_id = %(owner)s AND c.parent_id IS NULL AND c.status = 'active'
  AND NOT (c.source IN ('agent_call', 'agent_evaluation'))
  AND to_tsvector('simple', m.content) @@ q.q
ORDER BY ts_rank(to_tsvector('simple', m.content), q.q) DESC, m.created_at DESC, m.id DESC
LIMIT %(limit)s
"""

# The rows every search may return: the user's visible messages, for the reference ranking.
VISIBLE_SQL = """
SELECT m.id, m.content
FROM conversations_message m
INNER JOIN conversations_conversation c ON c.id = m.conversation_id
WHERE m.owner_id = %(owner)s AND m.message_type = 'text' AND m.role IN ('user', 'assistant')
  AND c.user_id = %(owner)s AND c.parent_id IS NULL AND c.status = 'active'
  AND NOT (c.source IN ('agent_call', 'agent_evaluation'))
"""


def _load(data: dict, username: str) -> tuple[dict[int, int], list[int]]:
    """The set as the history of its bench users (replacing an earlier load): one user
    `username`, or `username-N` for each conversation N of a set with several (`owner`). The
    users by conversation, and the message ids."""
    owners = sorted({thread.get("owner", 0) for thread in data["threads"]})
    users = {
        owner: get_user_model().objects.get_or_create(
            username=username if len(owners) == 1 else f"{username}-{owner}"
        )[0]
        for owner in owners
    }
    with transaction.atomic():
        Message.objects.filter(conversation__user__in=users.values()).delete()
        Conversation.objects.filter(user__in=users.values()).delete()
        threads = Conversation.objects.bulk_create(
            Conversation(
                thread_id=f"{username}-{n}",
                user=users[thread.get("owner", 0)],
                title=thread["title"],
                status=thread["status"],
                source=thread["source"],
            )
            for n, thread in enumerate(data["threads"])
        )
        messages = Message.objects.bulk_create(
            Message(
                conversation=threads[message["thread"]],
                role=message["role"],
                content=message["content"],
                created_at=T0 + timedelta(minutes=n),
            )
            for n, message in enumerate(data["messages"])
        )
    with connection.cursor() as cursor:
        # Every GIN index of messages: what the load left in their pending lists, merged.
        for index in Message._meta.indexes:
            if isinstance(index, GinIndex):
                cursor.execute("SELECT gin_clean_pending_list(%s::regclass)", [index.name])
        for user in users.values():
            fts_index = f"bench_recall_fts_{int(user.pk)}_idx"
            cursor.execute(f"DROP INDEX IF EXISTS {fts_index}")
            cursor.execute(
                f"CREATE INDEX {fts_index} ON conversations_message "
                f"USING gin (to_tsvector('simple', content)) WHERE owner_id = {int(user.pk)}"
            )
        cursor.execute("ANALYZE conversations_conversation")
        cursor.execute("ANALYZE conversations_message")
    return {owner: user.pk for owner, user in users.items()}, [m.pk for m in messages]


def _words(text: str) -> list[str]:
    """The reference ranking's words of `text`: lowercased runs of letters or digits, a CJK run
    as its overlapping two-character pieces (itself when one character)."""
    words: list[str] = []
    for run in TOKENS.findall(text.lower()):
        if re.match(f"[{CJK_RUN}]", run) and len(run) > 1:
            words += [run[i : i + 2] for i in range(len(run) - 1)]
        else:
            words.append(run)
    return words


class OkapiBM25:
    """Okapi BM25 over one user's visible messages, in memory: the reference a search that
    ranks in PostgreSQL is compared with (every message scored, no candidate bound)."""

    def __init__(self, uid: int) -> None:
        with connection.cursor() as cursor:
            cursor.execute(VISIBLE_SQL, {"owner": uid})
            rows = cursor.fetchall()
        self.lengths: dict[int, int] = {}
        self.postings: dict[str, dict[int, int]] = defaultdict(dict)
        for message_id, content in rows:
            words = _words(content)
            self.lengths[message_id] = len(words)
            for word, count in Counter(words).items():
                self.postings[word][message_id] = count
        self.average = sum(self.lengths.values()) / max(len(self.lengths), 1)

    def search(self, query: str) -> list[int]:
        total = len(self.lengths)
        scores: dict[int, float] = defaultdict(float)
        for word in dict.fromkeys(_words(query)):
            posting = self.postings.get(word, {})
            idf = math.log(1 + (total - len(posting) + 0.5) / (len(posting) + 0.5))
            for message_id, tf in posting.items():
                norm = 1 - OKAPI_B + OKAPI_B * self.lengths[message_id] / self.average
                scores[message_id] += idf * tf * (OKAPI_K1 + 1) / (tf + OKAPI_K1 * norm)
        ranked = sorted(scores.items(), key=lambda item: (-item[1], -item[0]))
        return [message_id for message_id, _ in ranked[:LIMIT]]


def _ours(search: Callable[..., dict]) -> Callable[[int, str], list[int]]:
    def run(uid: int, query: str) -> list[int]:
        try:
            return [hit["message_id"] for hit in search(uid, query, limit=LIMIT)["results"]]
        except (HistoryQueryError, ValueError):  # refused: a miss
            return []

    return run


def _full_text(uid: int, query: str) -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute(FULL_TEXT_SQL, {"owner": uid, "query": query, "limit": LIMIT})
        return [row[0] for row in cursor.fetchall()]


def _percentile(samples: list[float], share: float) -> float:
    ordered = sorted(samples)
    return ordered[max(0, round(share * len(ordered)) - 1)]


def _measure(
    path: Path, username: str, methods: dict[str, Callable], rounds: int
) -> tuple[dict, dict, dict, dict]:
    """Ask every question of the set at `path`, loaded as its users' histories: per search,
    each question's share of its fact's turns among the first k hits (k of KS), the timings,
    and the hits from hidden threads; and the set itself."""
    data = json.loads(path.read_text(encoding="utf-8"))
    started = time.perf_counter()
    uids, ids = _load(data, username)
    okapi = {owner: OkapiBM25(uid) for owner, uid in uids.items()}
    print(
        f"{path.name}: loaded {len(ids):,} messages, {len(data['questions'])} questions "
        f"in {time.perf_counter() - started:.0f} s",
        flush=True,
    )
    visible_threads = {n for n, t in enumerate(data["threads"]) if t["status"] == "active"}
    visible_threads -= {n for n, t in enumerate(data["threads"]) if t["source"] != "chat"}
    hidden = {ids[n] for n, m in enumerate(data["messages"]) if m["thread"] not in visible_threads}
    gold: dict[int, set[int]] = defaultdict(set)
    for n, message in enumerate(data["messages"]):
        if message["fact"] is not None:
            gold[message["fact"]].add(ids[n])

    every = {**methods, "Okapi BM25": None}
    found_at: dict[str, list[dict[int, float]]] = {name: [] for name in every}
    times: dict[str, list[float]] = {name: [] for name in every}
    hidden_hits = dict.fromkeys(every, 0)
    for question in data["questions"]:
        owner = question.get("owner", 0)
        calls = {**methods, "Okapi BM25": lambda _uid, query, o=owner: okapi[o].search(query)}
        for round_ in range(rounds + 1):  # the first round is the answer, the rest timed
            for name, method in calls.items():
                began = time.perf_counter()
                found = method(uids[owner], question["query"])
                taken = (time.perf_counter() - began) * 1000
                if round_ == 0:
                    target = gold[question["fact"]]
                    found_at[name].append(
                        {k: len(target.intersection(found[:k])) / len(target) for k in KS}
                    )
                    hidden_hits[name] += len(hidden.intersection(found))
                else:
                    times[name].append(taken)
    return data, found_at, times, hidden_hits


def _recall(shares: list[dict[int, float]], k: int) -> float:
    return sum(share[k] for share in shares) / len(shares)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", metavar="REV", help="also ask the search of revision REV")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help=f"timed rounds ({ROUNDS})")
    parser.add_argument("--only", metavar="REGEX", help="only the sets whose name matches")
    args = parser.parse_args()
    methods: dict[str, Callable] = {}
    if args.before:
        methods[f"before ({args.before})"] = _ours(
            repository_at(args.before).search_thread_messages
        )
    methods["ours (as written)"] = _ours(search_thread_messages)
    methods["full text (OR)"] = _full_text
    names = [*methods, "Okapi BM25"]
    measured = {
        name: _measure(SETS_DIR / file_name, username, methods, args.rounds)
        for name, file_name, username in SETS
        if not args.only or re.search(args.only, name)
    }
    header = (
        f"{'set':<12}{'search':<22}{'recall@1':>9}{'recall@5':>9}{'recall@10':>10}"
        f"{'p50 ms':>9}{'p95 ms':>9}{'hidden hits':>13}"
    )
    print(f"\n{header}\n{'-' * len(header)}")
    for set_name, (_, found_at, times, hidden_hits) in measured.items():
        for name in names:
            recalls = [_recall(found_at[name], k) for k in KS]
            cells = "".join(f"{r:>9.3f}" for r in recalls[:2]) + f"{recalls[2]:>10.3f}"
            timing = (
                f"{statistics.median(times[name]):>9.2f}{_percentile(times[name], 0.95):>9.2f}"
                if times[name]
                else f"{'-':>9}{'-':>9}"
            )
            print(f"{set_name:<12}{name:<22}{cells}{timing}{hidden_hits[name]:>13}")

    for set_name, (data, found_at, _, _) in measured.items():
        groups = sorted({(q["lang"], q["kind"]) for q in data["questions"]})
        print(f"\n{set_name}: recall@1 / recall@5 by language and kind of question")
        print(f"{'group':<22}{'questions':>10}" + "".join(f"{name:>22}" for name in names))
        for lang, kind in groups:
            members = [
                i for i, q in enumerate(data["questions"]) if (q["lang"], q["kind"]) == (lang, kind)
            ]
            cells = "".join(
                f"{_recall([found_at[name][i] for i in members], 1):>15.2f} / "
                f"{_recall([found_at[name][i] for i in members], 5):.2f}"
                for name in names
            )
            print(f"{lang + ' ' + kind:<22}{len(members):>10}{cells}")
        ours = found_at["ours (as written)"]
        for k in (1, 5):
            misses = [q["query"] for i, q in enumerate(data["questions"]) if ours[i][k] < 1]
            print(f"{set_name}: ours, the fact's turns not all among the first {k}: {misses}")


if __name__ == "__main__":
    main()
