"""History lookback at scale: latency of the repository next to its bare SQL and a naive ILIKE.

    .venv/bin/python bench/history.py   (BENCH_DATABASE_URL picks the database; see benchenv)

Seeds the bench database once (reused when present): 1,000 ordinary users
with about 950 messages each and one heavy user with 100,000+ (one thread of 20,000), Latin and
Chinese text, hidden threads, tool messages and tool calls. Then prints, per scenario, median
and p95 latency of the repository call, of the very SQL it sent run bare through psycopg
(ratio; the two are timed alternately, so both see the same load on a shared machine; each
statement is checked to be one of the repository's statement constants), and of a naive
unindexed ILIKE (ILIKE ANY of the terms, unranked), followed by the EXPLAIN (ANALYZE, BUFFERS)
plans. Searches of one term, and of two and three terms in any order (frequent and rare words,
Chinese pairs and longer runs, a quoted phrase, a short term, no match), and a hostile set a
careless or hostile model could send (terms no index can narrow, 256-character terms, eight
frequent words, eight one-letter terms, CJK pairs and single CJK characters), for which the
slowest run is printed too.

    .venv/bin/python bench/history.py --before REV

also times each search as the repository of git revision REV made it (its call and its bare
statements, in the same alternation), so a change of the search statement is measured side by
side with what it replaces, under the same load (with its own hit count: a change of the
contract may change the answer).
"""

import argparse
import functools
import json
import random
import re
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from benchenv import repository_at, setup_django

setup_django()

import psycopg  # noqa: E402
from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402

from conversations.models import Conversation, Message  # noqa: E402
from conversations.repository import read_thread_messages, search_thread_messages  # noqa: E402
from conversations.repository import sql as repository_sql  # noqa: E402
from conversations.repository.terms import query_terms  # noqa: E402

USERS = 1_000
MESSAGES_PER_USER = 950
THREADS_PER_USER = 10
HEAVY_THREADS = 400
HEAVY_THREAD_MESSAGES = 200
BIG_THREAD_MESSAGES = 20_000
HEAVY_USERNAME = "bench-heavy"
RUNS = 500
NAIVE_RUNS = 5
SEARCH_INDEXES = (
    "message_owner_recent_idx",
    "message_owner_trgm_idx",
    "message_owner_bigram_idx",
    "message_owner_words_idx",
)

SYLLABLES = [
    "ka",
    "ri",
    "to",
    "mo",
    "na",
    "shi",
    "ve",
    "lan",
    "dor",
    "pel",
    "qu",
    "ix",
    "zen",
    "bo",
    "ta",
    "rus",
    "mi",
    "gel",
    "fa",
    "no",
]
WORDS = sorted({a + b + c for a in SYLLABLES for b in SYLLABLES for c in SYLLABLES[:8]})
HANZI = [chr(0x4E00 + i) for i in range(0, 2500)]


def _zipf_weights(n: int) -> list[float]:
    return [1 / (rank + 1) for rank in range(n)]


WORD_WEIGHTS = _zipf_weights(len(WORDS))
HANZI_WEIGHTS = _zipf_weights(len(HANZI))


def _text(rng: random.Random) -> str:
    if rng.random() < 0.25:
        return "".join(rng.choices(HANZI, HANZI_WEIGHTS, k=rng.randint(8, 160)))
    return " ".join(rng.choices(WORDS, WORD_WEIGHTS, k=rng.randint(4, 60)))


def _dsn() -> str:
    db = settings.DATABASES["default"]
    return psycopg.conninfo.make_conninfo(
        dbname=db["NAME"],
        user=db["USER"] or None,
        password=db["PASSWORD"] or None,
        host=db["HOST"] or None,
        port=db["PORT"] or None,
    )


def _seeded(cur: psycopg.Cursor) -> bool:
    cur.execute("SELECT id FROM auth_user WHERE username = %s", [HEAVY_USERNAME])
    if cur.fetchone() is None:
        return False
    cur.execute("SELECT reltuples FROM pg_class WHERE relname = 'conversations_message'")
    return cur.fetchone()[0] >= 1_000_000


def _seed(conn: psycopg.Connection) -> None:
    rng = random.Random(4)
    t0 = datetime(2025, 1, 1, tzinfo=UTC)
    started = time.perf_counter()
    with conn.cursor() as cur:
        cur.execute(
            "TRUNCATE conversations_toolcall, conversations_message, conversations_agentrun, "
            "conversations_conversation, memory_app_userconfig, auth_user CASCADE"
        )
        for name in SEARCH_INDEXES:
            cur.execute(f'DROP INDEX IF EXISTS "{name}"')
        with cur.copy(
            "COPY auth_user (id, username, password, is_superuser, first_name, last_name, "
            "email, is_staff, is_active, date_joined) FROM STDIN"
        ) as copy:
            for uid in range(1, USERS + 2):
                name = HEAVY_USERNAME if uid == USERS + 1 else f"bench-{uid}"
                copy.write_row((uid, name, "!", False, "", "", "", False, True, t0))
        threads: list[tuple[int, int, int]] = []  # (conversation id, user id, messages)
        hidden = ["archived", "deleted"]
        with cur.copy(
            "COPY conversations_conversation (id, thread_id, user_id, title, status, source, "
            "metadata, created_at, updated_at) FROM STDIN"
        ) as copy:
            cid = 0
            for uid in range(1, USERS + 2):
                heavy = uid == USERS + 1
                count = HEAVY_THREADS + 1 if heavy else THREADS_PER_USER
                for n in range(count):
                    cid += 1
                    status, source = "active", "chat"
                    if n % 7 == 3:
                        status = hidden[n % 2]
                    elif n % 11 == 5:
                        source = "agent_call"
                    if heavy:
                        size = BIG_THREAD_MESSAGES if n == 0 else HEAVY_THREAD_MESSAGES
                    else:
                        size = MESSAGES_PER_USER // THREADS_PER_USER
                    copy.write_row(
                        (cid, f"t-{cid}", uid, _text(rng)[:80], status, source, "{}", t0, t0)
                    )
                    threads.append((cid, uid, size))
        rng.shuffle(threads)
        mid = 0
        per_thread: dict[int, int] = {}
        with cur.copy(
            "COPY conversations_message (id, conversation_id, role, message_type, content, "
            "attachments, feedback, metadata, created_at) FROM STDIN"
        ) as copy:
            # Interleave threads so every user's messages spread over the whole year.
            pending = [(cid, size) for cid, _, size in threads]
            while pending:
                survivors = []
                for cid, size in pending:
                    step = max(1, size // 200)
                    for _ in range(min(step, size - per_thread.get(cid, 0))):
                        mid += 1
                        n = per_thread.get(cid, 0)
                        per_thread[cid] = n + 1
                        role, kind = ("user", "text") if n % 2 == 0 else ("assistant", "text")
                        if n % 10 == 9:
                            role, kind = "assistant", "tool_call"
                        elif n % 10 == 7:
                            role = "system"
                        created = t0 + timedelta(seconds=mid * 30)
                        copy.write_row(
                            (mid, cid, role, kind, _text(rng), "[]", "{}", "{}", created)
                        )
                    if per_thread[cid] < size:
                        survivors.append((cid, size))
                pending = survivors
        cur.execute(
            "SELECT id FROM conversations_message WHERE role = 'assistant' "
            "AND message_type = 'text' AND id % 3 = 0"
        )
        with_tools = [row[0] for row in cur.fetchall()]
        with cur.copy(
            "COPY conversations_toolcall (message_id, tool_call_id, name, input, output, "
            "status, error, metadata, created_at) FROM STDIN"
        ) as copy:
            for message_id in with_tools:
                copy.write_row(
                    (
                        message_id,
                        f"call_{message_id}",
                        "lookup",
                        json.dumps({"q": rng.choice(WORDS)}),
                        _text(rng),
                        "success",
                        "",
                        "{}",
                        t0,
                    )
                )
        for table in ("auth_user", "conversations_conversation", "conversations_message"):
            cur.execute(
                f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), max(id)) FROM {table}"
            )
    conn.commit()
    print(f"seeded {mid:,} messages in {time.perf_counter() - started:.0f} s", flush=True)


def _ensure_indexes() -> None:
    with connection.cursor() as cur:
        cur.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'conversations_message'")
        present = {row[0] for row in cur.fetchall()}
        cur.execute("SET maintenance_work_mem = '512MB'")
    with connection.schema_editor() as editor:
        for index in Message._meta.indexes:
            if index.name in SEARCH_INDEXES and index.name not in present:
                started = time.perf_counter()
                editor.add_index(Message, index)
                print(f"built {index.name} in {time.perf_counter() - started:.0f} s", flush=True)
    with connection.cursor() as cur:
        cur.execute("ANALYZE")


def _percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[max(0, round(0.95 * len(ordered)) - 1)]


def _time(fn: Callable[[], object], runs: int) -> list[float]:
    return _time_alternately([fn], runs)[0]


def _time_alternately(fns: list[Callable[[], object]], runs: int) -> list[list[float]]:
    """Milliseconds per call of each of `fns`, called in turn `runs` times (after a warm-up)."""
    samples: list[list[float]] = [[] for _ in fns]
    for fn in fns:
        fn()
    for _ in range(runs):
        for fn, taken in zip(fns, samples, strict=True):
            started = time.perf_counter()
            fn()
            taken.append((time.perf_counter() - started) * 1000)
    return samples


def _statement_pattern(sql: str) -> re.Pattern:
    """`sql` as sent, its parameters bound: a regex."""
    parts = re.split(r"%\(\w+\)s", sql)
    return re.compile(
        "(?:.+?)".join(re.escape(part.replace("%%", "%")) for part in parts), re.DOTALL
    )


# The search statements by their number of terms (SEARCH_SQL is the last of them).
STATEMENTS = {
    **{
        name: _statement_pattern(sql)
        for name, sql in vars(repository_sql).items()
        if name.endswith("_SQL") and name != "SEARCH_SQL"
    },
    **{
        f"SEARCH_{n}_SQL": _statement_pattern(sql)
        for n, sql in enumerate(repository_sql.SEARCH_SQLS, 1)
    },
}


def _statement_name(sql: str) -> str:
    """Which of the repository's statement constants `sql` (as sent, parameters bound) is."""
    names = [name for name, pattern in STATEMENTS.items() if pattern.fullmatch(sql)]
    if len(names) > 1:  # the search statements differ in their number of term slots
        names = [name for name in names if name == f"SEARCH_{sql.count('LIKE CASE WHEN')}_SQL"]
    if len(names) != 1:
        raise SystemExit(f"not one repository statement: {names}\n{sql}")
    return names[0].removesuffix("_SQL")


def _bare(conn: psycopg.Connection, statements: list[str]) -> Callable[[], None]:
    def run() -> None:
        with conn.cursor() as cur:
            for sql in statements:
                cur.execute(sql.encode())
                cur.fetchall()

    return run


def _naive_search(conn: psycopg.Connection, uid: int, query: str) -> Callable[[], None]:
    patterns = [
        "%" + term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        for term in query_terms(query)
    ]

    def run() -> None:
        with conn.cursor() as cur:
            cur.execute("SET enable_indexscan = off")
            cur.execute("SET enable_bitmapscan = off")
            cur.execute(
                "SELECT c.thread_id, c.title, m.id, m.role, m.created_at, m.content "
                "FROM conversations_message m JOIN conversations_conversation c "
                "ON c.id = m.conversation_id "
                "WHERE c.user_id = %s AND c.status = 'active' AND c.parent_id IS NULL "
                "AND c.source NOT IN ('agent_call', 'agent_evaluation') "
                "AND m.role IN ('user', 'assistant') AND m.message_type = 'text' "
                "AND m.content ILIKE ANY (%s) ORDER BY m.created_at DESC, m.id DESC LIMIT 10",
                [uid, patterns],
            )
            cur.fetchall()
            cur.execute("RESET enable_indexscan")
            cur.execute("RESET enable_bitmapscan")

    return run


def _old_message(uid: int, pattern: str) -> str:
    """An old visible user message of `uid` matching `pattern` (a regex): its text."""
    return (
        Message.objects.filter(
            owner_id=uid,
            role="user",
            message_type="text",
            conversation__in=Conversation.objects.visible_to(uid),
            content__regex=pattern,
        )
        .order_by("created_at")
        .values_list("content", flat=True)[200]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", metavar="REV", help="also time the searches of revision REV")
    parser.add_argument("--runs", type=int, default=RUNS, help=f"calls per scenario ({RUNS})")
    parser.add_argument("--only", metavar="REGEX", help="only the scenarios whose name matches")
    parser.add_argument(
        "--naive-runs",
        type=int,
        default=NAIVE_RUNS,
        help=f"calls of the naive ILIKE per scenario ({NAIVE_RUNS}; 0: none)",
    )
    args = parser.parse_args()
    before = repository_at(args.before) if args.before else None
    with psycopg.connect(_dsn()) as conn:
        with conn.cursor() as cur:
            seeded = _seeded(cur)
        if seeded:
            print("reusing the existing seed", flush=True)
        else:
            _seed(conn)
    _ensure_indexes()

    with connection.cursor() as cur:
        cur.execute("SELECT id FROM auth_user WHERE username = %s", [HEAVY_USERNAME])
        uid = cur.fetchone()[0]
        cur.execute("SELECT count(*) FROM conversations_message")
        total = cur.fetchone()[0]
        cur.execute("SELECT count(*) FROM conversations_message WHERE owner_id = %s", [uid])
        heavy_total = cur.fetchone()[0]
        cur.execute(
            "SELECT conversation_id FROM conversations_message WHERE owner_id = %s "
            "GROUP BY 1 ORDER BY count(*) DESC LIMIT 1",
            [uid],
        )
        big_thread = Conversation.objects.get(pk=cur.fetchone()[0])
    visible = list(
        Message.objects.filter(
            conversation=big_thread, role__in=("user", "assistant"), message_type="text"
        )
        .order_by("created_at", "id")
        .values_list("id", flat=True)
    )
    deep_anchor = visible[len(visible) // 10]
    old_chinese = _old_message(uid, r"^[一-鿿]{3}")
    old_latin = _old_message(uid, r"^[a-z]+( [a-z]+){19}")
    # The message's rarest words (latest in WORDS), rarest first: not in the message's order.
    rare = sorted(set(old_latin.split()), key=WORDS.index, reverse=True)
    adjacent = " ".join(old_latin.split()[3:5])
    print(
        f"\n{total:,} messages, {USERS + 1:,} users; heavy user {heavy_total:,} messages, "
        f"big thread {len(visible):,} visible of {big_thread.messages.count():,}\n"
    )

    searches = [
        ("search ASCII common", WORDS[3]),
        ("search ASCII rare", WORDS[-7]),
        ("search Chinese 3 chars", old_chinese[:3]),
        ("search Chinese 2 chars", old_chinese[1:3]),
        ("search Chinese 2 frequent", HANZI[0] + HANZI[1]),
        ("search no match", "qxzvjw"),
        ("2 terms ASCII common", f"{WORDS[5]} {WORDS[3]}"),
        ("3 terms ASCII common", f"{WORDS[8]} {WORDS[3]} {WORDS[5]}"),
        ("2 terms ASCII rare", " ".join(rare[:2])),
        ("3 terms ASCII rare", " ".join(rare[:3])),
        ("2 terms common + rare", f"{WORDS[3]} {rare[0]}"),
        ("2 terms rare + short", f"{rare[0]} {rare[0][:2]}"),
        ("2 terms, phrase", f'"{adjacent}" {rare[0]}'),
        ("2 terms Chinese pairs", f"{old_chinese[5:7]} {old_chinese[1:3]}"),
        ("3 terms Chinese rare", f"{old_chinese[6:8]} {old_chinese[:3]} {old_chinese[3:5]}"),
        ("2 terms Chinese common", f"{HANZI[2]}{HANZI[3]} {HANZI[0]}{HANZI[1]}"),
        (
            "3 terms Chinese common",
            f"{HANZI[0]}{HANZI[1]} {HANZI[1]}{HANZI[0]} {HANZI[0]}{HANZI[2]}",
        ),
        ("2 terms Chinese + 1 char", f"{old_chinese[1:3]} {old_chinese[5]}"),
        ("3 terms no match", f"{WORDS[3]} qxzvjw {HANZI[0]}{HANZI[1]}"),
        ("question as written", f"When did {rare[0]} and the {WORDS[3]} meet {WORDS[5]}?"),
        ("question, 12 words", f"What did {' '.join(old_latin.split()[:12])}?"),
        ("question in Chinese", f"{old_chinese[:2]}的{old_chinese[3:5]}是什么时候？"),
    ]
    hostile = [
        ("hostile C++", "C++"),
        ("hostile ...", "..."),
        ("hostile %%%", "%%%"),
        ("hostile 256 %", "%" * 256),
        ("hostile 256 letters", (WORDS[3] * 64)[:256]),
        ("hostile 100 dashes", "\u2014" * 100),
        ("hostile 8 frequent words", " ".join(WORDS[:8])),
        ("hostile 8 one-letter", "a e i o u k r t"),
        ("hostile 4 CJK pairs", " ".join(HANZI[i] + HANZI[i + 1] for i in range(0, 8, 2))),
        ("hostile 4 CJK chars", " ".join(HANZI[:4])),
        ("hostile 40 words", " ".join(WORDS[:40])[:256]),
        ("hostile 24 one-letter", " ".join("bcdefghjklmnopqrtuvwxyz")),
        ("hostile 85 CJK pairs", " ".join(HANZI[i] + HANZI[i + 1] for i in range(0, 170, 2))),
        ("hostile 256 CJK chars", "".join(HANZI[:256])),
    ]
    searches += hostile
    scenarios: list[tuple[str, Callable[[], dict], str | None]] = [
        (name, functools.partial(search_thread_messages, uid, query, limit=10), query)
        for name, query in searches
    ]
    before_calls = {
        name: functools.partial(before.search_thread_messages, uid, query, limit=10)
        for name, query in searches
        if before is not None
    }
    scenarios += [
        ("read latest page", lambda: read_thread_messages(uid, big_thread.thread_id), None),
        (
            "read deep anchor",
            lambda: read_thread_messages(uid, big_thread.thread_id, message_id=deep_anchor),
            None,
        ),
        (
            "read with tools",
            lambda: read_thread_messages(uid, big_thread.thread_id, include_tools=True),
            None,
        ),
    ]
    if args.only:
        scenarios = [s for s in scenarios if re.search(args.only, s[0])]
    plans: list[tuple[str, str]] = []
    header = (
        f"{'scenario':<26}{'statements':<28}{'hits':>5}{'repo med':>10}{'repo p95':>10}"
        f"{'repo max':>10}{'bare med':>10}{'bare p95':>10}{'ratio':>7}{'naive med':>11}"
        f"{'naive/repo':>11}"
    )
    if before is not None:
        header += f"{'hits':>5}{'before med':>12}{'before p95':>12}{'before max':>12}{'ratio':>7}"
    print(header)
    print("-" * len(header))
    with psycopg.connect(_dsn(), autocommit=True) as bare_conn:
        # Django's connection never prepares statements; nor does this one, so both plan
        # every query (the plan depends on how frequent the searched text is).
        bare_conn.prepare_threshold = None
        for name, call, query in scenarios:
            with CaptureQueriesContext(connection) as captured:
                result = call()
            statements = [q["sql"] for q in captured.captured_queries]
            names = "+".join(_statement_name(sql) for sql in statements)
            hits = len(result.get("results", result.get("messages", [])))
            timed = [call, _bare(bare_conn, statements)]
            before_call = before_calls.get(name)
            before_hits = ""
            if before_call is not None:
                try:
                    with CaptureQueriesContext(connection) as captured:
                        before_hits = f"{len(before_call()['results']):>5}"
                except ValueError as error:  # the search before refused the query
                    before_hits = f"  refused: {error}"
                else:
                    before_statements = [q["sql"] for q in captured.captured_queries]
                    timed += [before_call, _bare(bare_conn, before_statements)]
            repo, bare, *before_times = _time_alternately(timed, args.runs)
            repo_med, repo_p95 = _percentiles(repo)
            bare_med, bare_p95 = _percentiles(bare)
            naive = ""
            if query is not None and args.naive_runs:
                naive_run = _naive_search(bare_conn, uid, query)
                naive_med, _ = _percentiles(_time(naive_run, args.naive_runs))
                naive = f"{naive_med:>9.1f}ms{naive_med / repo_med:>10.0f}x"
            if before_times:
                old_med, old_p95 = _percentiles(before_times[0])
                old_bare_med, _ = _percentiles(before_times[1])
                naive += (
                    f"{before_hits}{old_med:>10.2f}ms{old_p95:>10.2f}ms"
                    f"{max(before_times[0]):>10.2f}ms{old_med / old_bare_med:>6.2f}x"
                )
            else:
                naive += before_hits
            print(
                f"{name:<26}{names:<28}{hits:>5}{repo_med:>8.2f}ms{repo_p95:>8.2f}ms"
                f"{max(repo):>8.2f}ms{bare_med:>8.2f}ms{bare_p95:>8.2f}ms"
                f"{repo_med / bare_med:>6.2f}x{naive}",
                flush=True,
            )
            for sql in statements:
                with bare_conn.cursor() as cur:
                    cur.execute(b"EXPLAIN (ANALYZE, BUFFERS) " + sql.encode())
                    plans.append((name, "\n".join(row[0] for row in cur.fetchall())))
    for name, plan in plans:
        print(f"\n=== {name}\n{plan}")


if __name__ == "__main__":
    main()
