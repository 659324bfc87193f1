"""Lookback recall: does a search find the message that states what the model looks for?

    .venv/bin/python bench/recall.py   (BENCH_DATABASE_URL picks the database; see benchenv)

Loads each labelled set, `bench/recall_set/lookback.json` (written by `make_recall_set.py`) and
`bench/recall_set/second.json` (written apart by `make_second_recall_set.py`), as one user's
history each into the bench database, next to whatever else it holds (the 1M-message seed of
`history.py`, so the indexes are as large as there), then asks every question of a set with
each search, side by side, the three timed in turn on each question:

- literal: the search before terms, its statements copied here as they were (the query one
  case-insensitive substring, served by the same indexes);
- ranked: `search_thread_messages` as it is (the whole call, its Python included);
- full text: PostgreSQL's own ranking, `to_tsvector('simple', content)` matched with
  `websearch_to_tsquery('simple', query)` and ordered by `ts_rank`, then newest first, over the
  same visibility, with a GIN index of its own on this user's messages (made here, bench only).

Prints, per set, recall@1, @5 and @10 (the share of questions whose fact is among the first k
hits), p50 and p95 latency, recall@1 and @5 per language and kind of question, and how many
hits came from the hidden threads that repeat facts (always 0, or a visibility bug).
"""

import json
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from benchenv import setup_django

setup_django()

from django.contrib.auth import get_user_model  # noqa: E402
from django.db import connection, transaction  # noqa: E402

from conversations.models import Conversation, Message  # noqa: E402
from conversations.repository import (  # noqa: E402
    SNIPPET_LEAD_BYTES,
    SNIPPET_MAX_BYTES,
    TITLE_MAX_BYTES,
    _is_cjk_pair,
    _like_pattern,
    search_thread_messages,
)

SETS_DIR = Path(__file__).resolve().parent / "recall_set"
# (name, file, the user that holds it)
SETS = [
    ("first set", "lookback.json", "bench-recall"),
    ("second set", "second.json", "bench-recall-2"),
]
LIMIT = 10
ROUNDS = 5
KS = (1, 5, 10)
T0 = datetime(2025, 6, 1, tzinfo=UTC)

# The search before terms, as `conversations/repository.py` sent it: the whole query one
# substring (a LIKE pattern), or, for two caseless CJK characters, one bigram.
LITERAL_SQL = """
SELECT hit.thread_id, LEFT(hit.title, %(title_chars)s), hit.id, hit.role,
       yuxi_utc_iso(hit.created_at),
       SUBSTRING(hit.content, GREATEST(found.at - %(lead_chars)s, 1), %(window_chars)s),
       found.at, LENGTH(hit.content)
FROM (
    SELECT c.thread_id, c.title, m.id, m.role, m.created_at, m.content
    FROM conversations_message m
    INNER JOIN conversations_conversation c ON c.id = m.conversation_id
    WHERE m.owner_id = %(owner)s AND m.message_type = 'text' AND m.role IN ('user', 'assistant')
      AND c.user_id = %(owner)s AND c.parent_id IS NULL AND c.status = 'active'
      AND NOT (c.source IN ('agent_call', 'agent_evaluation'))
      AND UPPER(m.content) LIKE UPPER(%(pattern)s)
    ORDER BY m.created_at DESC, m.id DESC
    LIMIT %(limit)s
) hit
CROSS JOIN LATERAL (SELECT STRPOS(UPPER(hit.content), UPPER(%(query)s)) AS at) found
ORDER BY hit.created_at DESC, hit.id DESC
"""

LITERAL_CJK_PAIR_SQL = LITERAL_SQL.replace(
    "UPPER(m.content) LIKE UPPER(%(pattern)s)",
    "yuxi_cjk_bigrams(UPPER(m.content)) @> ARRAY[%(query)s]",
)
assert LITERAL_CJK_PAIR_SQL != LITERAL_SQL

FULL_TEXT_SQL = """
SELECT m.id
FROM conversations_message m
INNER JOIN conversations_conversation c ON c.id = m.conversation_id
CROSS JOIN websearch_to_tsquery('simple', %(query)s) AS q
WHERE m.owner_id = %(owner)s AND m.message_type = 'text' AND m.role IN ('user', 'assistant')
  AND c.user_id = %(owner)s AND c.parent_id IS NULL AND c.status = 'active'
  AND NOT (c.source IN ('agent_call', 'agent_evaluation'))
  AND to_tsvector('simple', m.content) @@ q
ORDER BY ts_rank(to_tsvector('simple', m.content), q) DESC, m.created_at DESC, m.id DESC
LIMIT %(limit)s
"""


def _load(data: dict, username: str) -> tuple[int, list[int]]:
    """The set as the history of the bench user `username` (replacing an earlier load); its
    message ids."""
    user, _ = get_user_model().objects.get_or_create(username=username)
    with transaction.atomic():
        Message.objects.filter(conversation__user=user).delete()
        Conversation.objects.filter(user=user).delete()
        threads = Conversation.objects.bulk_create(
            Conversation(
                thread_id=f"{username}-{n}",
                user=user,
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
        for index in ("message_owner_trgm_idx", "message_owner_bigram_idx"):
            cursor.execute("SELECT gin_clean_pending_list(%s::regclass)", [index])
        fts_index = f"bench_recall_fts_{int(user.pk)}_idx"
        cursor.execute(f"DROP INDEX IF EXISTS {fts_index}")
        cursor.execute(
            f"CREATE INDEX {fts_index} ON conversations_message "
            f"USING gin (to_tsvector('simple', content)) WHERE owner_id = {int(user.pk)}"
        )
        cursor.execute("ANALYZE conversations_conversation")
        cursor.execute("ANALYZE conversations_message")
    return user.pk, [m.pk for m in messages]


def _literal(uid: int, query: str) -> list[int]:
    params = {
        "owner": uid,
        "query": query,
        "limit": LIMIT,
        "title_chars": TITLE_MAX_BYTES + 1,
        "lead_chars": SNIPPET_LEAD_BYTES,
        "window_chars": SNIPPET_LEAD_BYTES + SNIPPET_MAX_BYTES,
    }
    with connection.cursor() as cursor:
        if _is_cjk_pair(query):
            cursor.execute(LITERAL_CJK_PAIR_SQL, params)
        else:
            cursor.execute(LITERAL_SQL, {**params, "pattern": _like_pattern(query)})
        return [row[2] for row in cursor.fetchall()]


def _terms(uid: int, query: str) -> list[int]:
    return [hit["message_id"] for hit in search_thread_messages(uid, query, limit=LIMIT)["results"]]


def _full_text(uid: int, query: str) -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute(FULL_TEXT_SQL, {"owner": uid, "query": query, "limit": LIMIT})
        return [row[0] for row in cursor.fetchall()]


METHODS: dict[str, Callable[[int, str], list[int]]] = {
    "literal (before)": _literal,
    "ranked (now)": _terms,
    "full text (simple)": _full_text,
}


def _percentile(samples: list[float], share: float) -> float:
    ordered = sorted(samples)
    return ordered[max(0, round(share * len(ordered)) - 1)]


def _measure(path: Path, username: str) -> tuple[dict, dict, dict, dict]:
    """Ask every question of the set at `path`, loaded as `username`'s history: per search,
    the rank of the fact in each question's hits (None when missing), the timings, and the
    hits from hidden threads; and the set itself."""
    data = json.loads(path.read_text(encoding="utf-8"))
    started = time.perf_counter()
    uid, ids = _load(data, username)
    print(
        f"{path.name}: loaded {len(ids):,} messages, {len(data['questions'])} questions "
        f"in {time.perf_counter() - started:.0f} s",
        flush=True,
    )
    visible_threads = {n for n, t in enumerate(data["threads"]) if t["status"] == "active"}
    visible_threads -= {n for n, t in enumerate(data["threads"]) if t["source"] != "chat"}
    hidden = {ids[n] for n, m in enumerate(data["messages"]) if m["thread"] not in visible_threads}
    gold = {m["fact"]: ids[n] for n, m in enumerate(data["messages"]) if m["fact"] is not None}

    ranks: dict[str, list[int | None]] = {name: [] for name in METHODS}
    times: dict[str, list[float]] = {name: [] for name in METHODS}
    hidden_hits = dict.fromkeys(METHODS, 0)
    for question in data["questions"]:
        for round_ in range(ROUNDS + 1):  # the first round warms up, untimed
            for name, method in METHODS.items():
                began = time.perf_counter()
                found = method(uid, question["query"])
                taken = (time.perf_counter() - began) * 1000
                if round_ == 0:
                    target = gold[question["fact"]]
                    ranks[name].append(found.index(target) + 1 if target in found else None)
                    hidden_hits[name] += len(hidden.intersection(found))
                else:
                    times[name].append(taken)
    return data, ranks, times, hidden_hits


def _recall(ranks: list[int | None], k: int) -> float:
    return sum(1 for r in ranks if r and r <= k) / len(ranks)


def main() -> None:
    measured = {
        name: _measure(SETS_DIR / file_name, username) for name, file_name, username in SETS
    }
    header = (
        f"{'set':<12}{'search':<20}{'recall@1':>9}{'recall@5':>9}{'recall@10':>10}"
        f"{'p50 ms':>9}{'p95 ms':>9}{'hidden hits':>13}"
    )
    print(f"\n{header}\n{'-' * len(header)}")
    for set_name, (_, ranks, times, hidden_hits) in measured.items():
        for name in METHODS:
            recalls = [_recall(ranks[name], k) for k in KS]
            cells = "".join(f"{r:>9.2f}" for r in recalls[:2]) + f"{recalls[2]:>10.2f}"
            print(
                f"{set_name:<12}{name:<20}{cells}{statistics.median(times[name]):>9.2f}"
                f"{_percentile(times[name], 0.95):>9.2f}{hidden_hits[name]:>13}"
            )

    for set_name, (data, ranks, _, _) in measured.items():
        groups = sorted({(q["lang"], q["kind"]) for q in data["questions"]})
        print(f"\n{set_name}: recall@1 / recall@5 by language and kind of question")
        print(f"{'group':<22}{'questions':>10}" + "".join(f"{name:>20}" for name in METHODS))
        for lang, kind in groups:
            members = [
                i for i, q in enumerate(data["questions"]) if (q["lang"], q["kind"]) == (lang, kind)
            ]
            cells = "".join(
                f"{_recall([ranks[name][i] for i in members], 1):>15.2f} / "
                f"{_recall([ranks[name][i] for i in members], 5):.2f}"
                for name in METHODS
            )
            print(f"{lang + ' ' + kind:<22}{len(members):>10}{cells}")
        misses = [
            (q["query"], ranks["ranked (now)"][i])
            for i, q in enumerate(data["questions"])
            if not ranks["ranked (now)"][i] or ranks["ranked (now)"][i] > 1
        ]
        print(f"{set_name}: ranked, the fact not first: {misses}")


if __name__ == "__main__":
    main()
