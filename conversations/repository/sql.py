"""History lookback's statements: every SQL text a lookback call sends, and how it sends them.

They live apart from the Python that fills their parameters because they are the part that
decides cost and visibility: each is a static, fully parameterised module constant (no ORM
compilation per call, no SQL assembled at run time), selects allowlisted columns only and
spells out visibility itself, as the comment below says. `bench/history.py` times them by
these names (every `*_SQL` constant and `SEARCH_SQLS`).
"""

from typing import Any

from django.db.backends.utils import CursorWrapper

from conversations.repository.terms import QUERY_TERMS_MAX

# Visibility, spelled out literally in every statement below (PostgreSQL uses a partial index
# only when the statement's own text implies the index's condition):
#   a thread (c): the user's, c.parent_id IS NULL AND c.status = 'active'
#                 AND NOT (c.source IN ('agent_call', 'agent_evaluation'))  -- VISIBLE_THREAD
#   a message (m): in such a thread, m.message_type = 'text'
#                 AND m.role IN ('user', 'assistant')                        -- VISIBLE_MESSAGE
# tests/conversations/test_repository.py proves the statements select exactly the rows those
# two model conditions select, over every value of every field they name.
#
# Messages' timestamps leave the statements as text, formatted by `yuxi_utc_iso` (a SQL
# function from migration 0008, equal to Python's `isoformat()` of the UTC value): no Python
# per message for them.

# A search ranks (any term matches), in one statement of these steps (each `... AS
# MATERIALIZED` runs once, and only if a step that runs reads it; the capitalised names are
# the ranking constants of `search.py`, which arrive as parameters):
#   visible the ids of the user's visible threads: every scan of messages keeps those in them.
#           An index scan keeps them as `conversation_id + 0 = ANY (...)`, never an index
#           condition: given the array as a parameter, the planner estimates a few hundred
#           rows and ANDs the thread index's bitmap into the GIN scan's, every message of
#           the user's visible threads (82,400 of the heavy bench user: 12-23 ms a scan).
#   newest  the user's SEARCH_WINDOW newest messages of the visible kinds within the time
#           bounds, of visible threads, each cased once (`u`): one copy every step that
#           walks the window reads (casing the whole window takes 1-3 ms; each step casing
#           what it walked took that for every term probed and for the page of every term).
#           Its threads are checked by a hash of the visible ones (a semi-join), not by `=
#           ANY` of the array, which compares each message with every thread in turn (313
#           threads: 1 ms a window). Its size bounds every walk: a term the indexes cannot
#           narrow is only ever checked here.
#   terms   each distinct term: as written (`bare`, cased in SQL, for STRPOS), its `literal`
#           (its stem, or itself: what every form of it holds, found by STRPOS, half the cost
#           of its LIKE pattern), a CJK run's `grams` (half of which are another form of it)
#           and `chars`, the `anchor` a form match is placed by, its trigram slot, and whether
#           an index serves it.
#   seen    the newest messages holding any term (or a form of it), each with the terms it
#           holds: the one walk of the window that checks every term on every message.
#   probed  how many of the newest messages hold each term, up to FREQUENT_TERM_HITS.
#   window_every / every  the candidates with every term: the newest window's when it holds
#           a page of them, else those and the newest of all the user's other messages with
#           every term, SEARCH_CANDIDATES in all, each term in the condition its index serves
#           (below). Not run when no term is index-served (`indexed` false): such a query
#           only walks the window. The window's are left out of the indexed scan by a
#           `NOT IN`, which also keeps it out of parallel workers (a worker cannot read a
#           CTE; starting two for a scan its gate then stops cost 11 ms).
#   weights each term's BM25 idf among the newest messages (the rarer, the heavier), counted
#           only when partial matches are ranked (else all alike).
#   partial only when `every` holds less than a page and there are several terms: of the
#           window's messages with any term, the WINDOW_CANDIDATES whose terms weigh most
#           together (then the newest), and for each term found in fewer than
#           FREQUENT_TERM_HITS of them (a rare one) and served by an index, of the
#           RARE_LOOKUPS rarest, the newest TERM_CANDIDATES of all the user's messages with it
#           (`_LOOKUP_TEMPLATE`): a word's through the word index (`yuxi_words`, the messages
#           with a word that begins with its form), another term's through its trigrams or
#           CJK pairs.
#   cased / hits / scored  each candidate cased once with its length ratio, then every
#           (candidate, term found) pair with the term's score (as written or in another form:
#           a form match weighs FORM_WEIGHT, a CJK run's times the share of its characters
#           found), then one aggregate a candidate: its terms, their scores summed, how close
#           together they are (the span of their first positions); ranked by relevance, then
#           newest. One set, not a subquery per candidate (192 candidates: 7.7 ms, 12.5 ms as
#           a subquery each).
# The indexed step of `every`, per term: the conditions whose parameter is NULL fold away while
# planning (`NULL IS NULL OR ...`), so each query is planned with only the conditions it has:
#   pattern_1..8  a term with a trigram (a run of 3+ letters or digits) as a LIKE pattern: the
#                 trigram index;
#   pairs         the terms of two caseless CJK characters: containing such a pair is having it
#                 among the content's bigrams, the bigram index;
#   checked       the other terms' patterns, or every term's when one may be left to it
#                 (below): LIKE ALL is never an index condition, so such a term only narrows
#                 what the others found.
#   One term drives: a GIN scan walks the posting lists of every trigram of every term it is
#   given, also when a rare term alone yields a few hundred candidates. So when some
#   index-served term is found in fewer of the newest messages than FREQUENT_TERM_HITS, each
#   trigram term found at least that often, and each other rare one but the trigram term
#   found least often (the first of them on a tie), is `filtered`: its slot's pattern
#   becomes '%', which the trigram index leaves out of the scan (no trigram; the other
#   conditions drive it), and the term is still required by `checked`. Which terms are
#   filtered changes the cost, never the result (three rare words: 21 trigrams' posting
#   lists walked before, 7 after). A long question's terms were counted before the
#   statement (`driven`): its caller chose the driving term the same way and left the other
#   slots NULL, and `filtered` is empty.
# Pattern arrays arrive in array text form and are cased by UPPER as a whole (Python's case
# mapping is not PostgreSQL's). The outer query cuts snippets for the kept hits only, around
# the first position of the first term found, in query order.


# What an index-driven lookup checks of a message `m` besides its terms: the owner's text of a
# visible thread, within `since`/`until`; the thread check a filter (`+ 0`), never an index
# condition (see the comment above).
_VISIBLE_MESSAGE = """       AND m.owner_id = %(owner)s
       AND m.message_type = 'text' AND m.role IN ('user', 'assistant')
       AND m.conversation_id + 0 = ANY ((SELECT ids FROM visible)::bigint[])
       AND (%(since)s::timestamptz IS NULL OR m.created_at >= %(since)s::timestamptz)
       AND (%(until)s::timestamptz IS NULL OR m.created_at < %(until)s::timestamptz)"""

# One rare term's own candidates (see the comment above), for term number `n`: when the rare
# terms were chosen before the statement (`chosen`, from a long question's counts), its lookup
# is there only if chosen, and the statement's own choice folds away while planning. Its
# pattern or prefix query comes through an InitPlan, so the planner estimates it at its default
# selectivity and goes through the GIN index, never a walk of the user's messages in time order
# (a prefix query it estimated as frequent walked 100,000 messages for 50: one second).
_LOOKUP_TEMPLATE = """    UNION ALL
    (SELECT m.id, NULL::int[]
     FROM conversations_message m
     WHERE %(several)s
       AND (%(like_{n})s::text IS NOT NULL OR %(pairs_{n})s::text IS NOT NULL
            OR %(words_{n})s::text IS NOT NULL)
       AND (SELECT count(*) FROM every) < %(limit)s
       AND (%(chosen)s OR (SELECT hits FROM probed WHERE n = {n}) < %(frequent_hits)s
            AND {n} IN (SELECT p.n FROM probed p INNER JOIN terms t ON t.n = p.n
                        WHERE t.served ORDER BY p.hits, p.n LIMIT %(rare_lookups)s))
       AND m.id NOT IN (SELECT id FROM every)
{visible_message}
       AND (%(like_{n})s::text IS NULL
            OR UPPER(m.content) LIKE (SELECT UPPER(%(like_{n})s::text)))
       AND (%(pairs_{n})s::text IS NULL
            OR yuxi_cjk_bigrams(UPPER(m.content)) && %(pairs_{n})s::text[])
       AND (%(words_{n})s::text IS NULL
            OR yuxi_words(m.content)
               @@ (SELECT to_tsquery('simple'::regconfig, %(words_{n})s::text)))
     ORDER BY m.created_at DESC, m.id DESC
     LIMIT %(term_candidates)s)"""


def _found_sql(text: str) -> str:
    """SQL: whether the cased text `text` holds the term `t` (a row of `terms`) in some form:
    its literal, or, for a CJK run, at least half its bigrams."""
    return (
        f"(STRPOS({text}, t.literal) > 0 OR (t.grams IS NOT NULL AND (SELECT count(*)"
        f" FROM unnest(t.grams) g WHERE STRPOS({text}, g) > 0) * 2 >= cardinality(t.grams)))"
    )


# The user's visible threads and newest visible messages (the window), as every search
# statement begins (see the comment above).
_WINDOW_CTES = """
WITH visible AS MATERIALIZED (
    SELECT array_agg(c.id) AS ids
    FROM conversations_conversation c
    WHERE c.user_id = %(owner)s AND c.parent_id IS NULL AND c.status = 'active'
      AND NOT (c.source IN ('agent_call', 'agent_evaluation'))
),
newest AS MATERIALIZED (
    SELECT m.id, m.created_at, UPPER(m.content) AS u
    FROM (
        SELECT m.id, m.conversation_id, m.created_at, m.content
        FROM conversations_message m
        WHERE m.owner_id = %(owner)s
          AND m.message_type = 'text' AND m.role IN ('user', 'assistant')
          AND (%(since)s::timestamptz IS NULL OR m.created_at >= %(since)s::timestamptz)
          AND (%(until)s::timestamptz IS NULL OR m.created_at < %(until)s::timestamptz)
        ORDER BY m.created_at DESC, m.id DESC
        LIMIT %(window)s
    ) m
    WHERE m.conversation_id IN (SELECT unnest(ids) FROM visible)
)"""

_SEARCH_TEMPLATE = (
    _WINDOW_CTES
    + """,
terms AS MATERIALIZED (
    SELECT t.n::int AS n, t.bare, t.literal, t.anchor, string_to_array(t.grams, ' ') AS grams,
           string_to_array(t.bare, NULL) AS chars, t.slot, t.served
    FROM unnest(UPPER(%(bares)s::text)::text[], UPPER(%(literals)s::text)::text[],
                UPPER(%(anchors)s::text)::text[], %(grams)s::text[], %(slots)s::int[],
                %(served)s::boolean[])
         WITH ORDINALITY AS t (bare, literal, anchor, grams, slot, served, n)
),
seen AS MATERIALIZED (
    SELECT w.id, w.created_at, array_agg(t.n) AS found
    FROM newest w CROSS JOIN terms t
    WHERE {found_w}
    GROUP BY w.id, w.created_at
),
probed AS MATERIALIZED (
    SELECT t.n, LEAST((SELECT count(*) FROM seen s WHERE t.n = ANY (s.found)),
                      %(frequent_hits)s) AS hits
    FROM terms t
),
filtered AS MATERIALIZED (
    SELECT array_agg(t.slot) FILTER (
               WHERE t.slot IS NOT NULL AND (p.hits >= %(frequent_hits)s OR t.n <> (
                   SELECT d.n FROM terms d INNER JOIN probed q ON q.n = d.n
                   WHERE d.slot IS NOT NULL ORDER BY q.hits, d.n LIMIT 1)))
           AS slots
    FROM terms t INNER JOIN probed p ON p.n = t.n
    WHERE t.served
    HAVING NOT %(driven)s AND min(p.hits) < %(frequent_hits)s
),
window_every AS MATERIALIZED (
    SELECT s.id, s.found FROM seen s
    WHERE cardinality(s.found) = (SELECT count(*) FROM terms)
    ORDER BY s.created_at DESC, s.id DESC
    LIMIT %(candidates)s
),
every AS MATERIALIZED (
    SELECT id, found FROM window_every
    UNION ALL
    (SELECT m.id, NULL::int[]
     FROM conversations_message m
     WHERE %(indexed)s AND (SELECT count(*) FROM window_every) < %(limit)s
       AND m.id NOT IN (SELECT id FROM window_every)
{visible_message}
{patterns}
       AND (%(pairs)s::text IS NULL
            OR yuxi_cjk_bigrams(UPPER(m.content)) @> %(pairs)s::text[])
{grams}
       AND (%(checked)s::text IS NULL
            OR UPPER(m.content) LIKE ALL (UPPER(%(checked)s::text)::text[]))
       AND (NOT %(overlap)s OR NOT EXISTS (
            SELECT 1 FROM terms t WHERE t.grams IS NOT NULL AND NOT {found_m}))
     ORDER BY m.created_at DESC, m.id DESC
     LIMIT %(candidates)s - (SELECT count(*) FROM window_every))
),
weights AS MATERIALIZED (
    SELECT t.n, ln(1 + (COALESCE(f.total, 0) - COALESCE(f.df, 0) + 0.5)
                      / (COALESCE(f.df, 0) + 0.5)) AS weight
    FROM terms t
    LEFT JOIN LATERAL (
        SELECT (SELECT count(*) FROM seen s WHERE t.n = ANY (s.found))::float8 AS df,
               (SELECT count(*) FROM newest)::float8 AS total
        WHERE %(several)s AND (SELECT count(*) FROM every) < %(limit)s
    ) f ON TRUE
),
partial AS MATERIALIZED (
    (SELECT s.id, s.found FROM seen s
     WHERE %(several)s AND (SELECT count(*) FROM every) < %(limit)s
     ORDER BY (SELECT sum(wt.weight) FROM weights wt WHERE wt.n = ANY (s.found)) DESC,
              s.created_at DESC, s.id DESC
     LIMIT %(window_candidates)s)
{lookups}
),
lengths AS MATERIALIZED (
    SELECT avg(LENGTH(x.u))::float8 AS average FROM newest x
),
cased AS MATERIALIZED (
    SELECT m.id, m.created_at, up.u, k.found,
           %(length_step)s::float8 ^ GREATEST(floor(ln(GREATEST(LENGTH(up.u), 1)::float8
               / COALESCE(NULLIF((SELECT average FROM lengths), 0), GREATEST(LENGTH(up.u), 1)))
               / ln(%(length_step)s::float8)), 0) AS ratio,
           %(asks_when)s AND up.u ~ %(date_or_time)s AS dated
    FROM (SELECT c.id, max(c.found) AS found
          FROM (SELECT id, found FROM every UNION ALL SELECT id, found FROM partial) c
          GROUP BY c.id) k
    INNER JOIN conversations_message m ON m.id = k.id
    CROSS JOIN LATERAL (SELECT UPPER(m.content) AS u OFFSET 0) up
),
hits AS MATERIALIZED (
    SELECT k.id, t.n, p.at,
           wt.weight * CASE WHEN p.bare_at > 0 THEN 1
                            WHEN t.grams IS NULL THEN %(form_weight)s::float8
                            ELSE %(form_weight)s::float8 * (
                                SELECT count(*) FILTER (WHERE STRPOS(k.u, c) > 0)
                                FROM unnest(t.chars) c)::float8 / cardinality(t.chars)
                       END
           * p.tf * (%(k1)s::float8 + 1)
           / (p.tf + %(k1)s::float8 * (1 - %(b)s::float8 + %(b)s::float8 * k.ratio)) AS score
    FROM cased k
    CROSS JOIN terms t
    INNER JOIN weights wt ON wt.n = t.n
    CROSS JOIN LATERAL (SELECT STRPOS(k.u, t.bare) AS bare_at) b
    CROSS JOIN LATERAL (
        SELECT CASE WHEN b.bare_at > 0 THEN t.bare ELSE t.anchor END AS seen
    ) s
    CROSS JOIN LATERAL (
        SELECT b.bare_at,
               CASE WHEN b.bare_at > 0 THEN b.bare_at
                    ELSE GREATEST(STRPOS(k.u, t.anchor), 1) END AS at,
               GREATEST((OCTET_LENGTH(k.u) - OCTET_LENGTH(REPLACE(k.u, s.seen, '')))
                        / OCTET_LENGTH(s.seen), 1)::float8 AS tf
    ) p
    WHERE CASE WHEN k.found IS NOT NULL THEN t.n = ANY (k.found) ELSE {found_k} END
),
scored AS MATERIALIZED (
    SELECT k.id, k.created_at, count(*) AS found, array_agg(h.n ORDER BY h.n) AS terms,
           (array_agg(h.at ORDER BY h.n))[1] AS at,
           sum(h.score ORDER BY h.n)
             * (1 + CASE WHEN count(*) > 1
                         THEN %(near_bonus)s::float8 * 2 ^ -floor(
                             ln(1 + (max(h.at) - min(h.at)) / %(near_chars)s::float8) / ln(2))
                         ELSE 0 END)
             * count(*) / (SELECT count(*) FROM terms)
             * CASE WHEN k.dated THEN 1 + %(when_bonus)s::float8 ELSE 1 END AS relevance
    FROM cased k
    INNER JOIN hits h ON h.id = k.id
    GROUP BY k.id, k.created_at, k.dated
)
SELECT c.thread_id, LEFT(c.title, %(title_chars)s), m.id, m.role, yuxi_utc_iso(m.created_at),
       SUBSTRING(m.content, GREATEST(hit.at - %(lead_chars)s, 1), %(window_chars)s),
       hit.at, LENGTH(m.content), hit.terms
FROM (
    SELECT * FROM scored
    ORDER BY relevance DESC, created_at DESC, id DESC
    LIMIT %(limit)s
) hit
INNER JOIN conversations_message m ON m.id = hit.id
INNER JOIN conversations_conversation c ON c.id = m.conversation_id
WHERE c.user_id = %(owner)s AND c.parent_id IS NULL AND c.status = 'active'
  AND NOT (c.source IN ('agent_call', 'agent_evaluation'))
  AND m.message_type = 'text' AND m.role IN ('user', 'assistant')
ORDER BY hit.relevance DESC, hit.created_at DESC, hit.id DESC
"""
)


def _search_sql(terms: int) -> str:
    """The search statement for queries of `terms` distinct terms: a slot and a lookup for each
    of them, no more (every slot costs planning time whether its parameter is NULL or not)."""
    return _SEARCH_TEMPLATE.format(
        found_w=_found_sql("w.u"),
        found_m=_found_sql("UPPER(m.content)"),
        found_k=_found_sql("k.u"),
        grams="\n".join(
            f"       AND (%(grams_{n})s::text IS NULL"
            f" OR yuxi_cjk_bigrams(UPPER(m.content)) && %(grams_{n})s::text[])"
            for n in range(1, terms + 1)
        ),
        patterns="\n".join(
            f"       AND (%(pattern_{n})s::text IS NULL OR UPPER(m.content) LIKE CASE"
            f" WHEN (SELECT {n} = ANY (slots) FROM filtered) THEN '%%'"
            f" ELSE UPPER(%(pattern_{n})s) END)"
            for n in range(1, terms + 1)
        ),
        lookups="\n".join(
            _LOOKUP_TEMPLATE.format(n=n, visible_message=_VISIBLE_MESSAGE)
            for n in range(1, terms + 1)
            if terms > 1
        ),
        visible_message=_VISIBLE_MESSAGE,
    )


# The search statement of a query of n distinct terms is SEARCH_SQLS[n - 1]; SEARCH_SQL is
# the largest, of QUERY_TERMS_MAX.
SEARCH_SQLS = tuple(_search_sql(terms) for terms in range(1, QUERY_TERMS_MAX + 1))
SEARCH_SQL = SEARCH_SQLS[-1]

# For a query of more than QUERY_TERMS_MAX terms, which to keep: each term's matches (its
# literal: itself or its stem) among the newest visible messages, and, for a term found in none
# of them that an index serves, whether any older visible message has it (one index probe). A
# term no index serves, or a CJK run of three or more characters (found by half its pieces,
# which no index probe can tell cheaply), not found among the newest, counts as found nowhere;
# so does an index-served one past the first QUERY_TERMS_MAX of them (each probe walks the
# index: eighty CJK pairs took 160 ms).
TERM_COUNTS_SQL = (
    _WINDOW_CTES
    + f""",
terms AS MATERIALIZED (
    SELECT t.n::int AS n, t.literal, t.lookup, t.pairs
    FROM unnest(UPPER(%(literals)s::text)::text[], UPPER(%(lookups)s::text)::text[],
                %(pairs)s::text[])
         WITH ORDINALITY AS t (literal, lookup, pairs, n)
),
counted AS MATERIALIZED (
    SELECT t.n, t.lookup, t.pairs, h.hits,
           row_number() OVER (PARTITION BY h.hits = 0 AND (t.lookup IS NOT NULL OR
                                                           t.pairs IS NOT NULL)
                              ORDER BY t.n) AS turn
    FROM terms t
    CROSS JOIN LATERAL (
        SELECT count(*) AS hits FROM (
            SELECT 1 FROM newest x WHERE STRPOS(x.u, t.literal) > 0 LIMIT %(counted_hits)s
        ) found
    ) h
)
SELECT t.n, t.hits,
       CASE WHEN t.hits > 0 THEN TRUE
            WHEN t.turn > %(probes)s THEN FALSE
            WHEN t.lookup IS NOT NULL THEN EXISTS (
                SELECT 1 FROM conversations_message m
                WHERE UPPER(m.content) LIKE t.lookup
{_VISIBLE_MESSAGE})
            WHEN t.pairs IS NOT NULL THEN EXISTS (
                SELECT 1 FROM conversations_message m
                WHERE yuxi_cjk_bigrams(UPPER(m.content)) && ARRAY[t.pairs]
{_VISIBLE_MESSAGE})
            ELSE FALSE END AS anywhere
FROM counted t
ORDER BY t.n
"""
)

# The thread, and the anchor's timestamp when it is a visible message of that thread (NULL
# when there is no anchor or it is not), in one round trip. The timestamp is plain UTC: the
# driver loads that in C, where Django's zone-aware loader runs Python for every value.
THREAD_SQL = """
SELECT c.id, LEFT(c.title, %(title_chars)s),
       (SELECT m.created_at AT TIME ZONE 'UTC' FROM conversations_message m
        WHERE m.id = %(anchor)s AND m.conversation_id = c.id
          AND m.message_type = 'text' AND m.role IN ('user', 'assistant'))
FROM conversations_conversation c
WHERE c.user_id = %(owner)s AND c.thread_id = %(thread_id)s
  AND c.parent_id IS NULL AND c.status = 'active'
  AND NOT (c.source IN ('agent_call', 'agent_evaluation'))
"""

# The latest visible messages of a (visible) thread, newest first.
LATEST_SQL = """
SELECT m.id, m.role, yuxi_utc_iso(m.created_at), LEFT(m.content, %(content_chars)s)
FROM conversations_message m
WHERE m.conversation_id = %(conversation)s
  AND m.message_type = 'text' AND m.role IN ('user', 'assistant')
ORDER BY m.created_at DESC, m.id DESC
LIMIT %(limit)s
"""

# Visible messages around an anchor: up to `limit` at or before it (flag true), up to `limit`
# after it, the whole in (created_at, id) order. `anchor_at` is the anchor's plain UTC
# timestamp, as the thread statement gave it.
AROUND_SQL = """
SELECT id, role, created_at, content, at_or_before FROM (
    (SELECT m.id, m.role, yuxi_utc_iso(m.created_at) AS created_at,
            LEFT(m.content, %(content_chars)s) AS content, TRUE AS at_or_before,
            m.created_at AS sort_at
     FROM conversations_message m
     WHERE m.conversation_id = %(conversation)s
       AND m.message_type = 'text' AND m.role IN ('user', 'assistant')
       AND (m.created_at, m.id) <= (%(anchor_at)s::timestamp AT TIME ZONE 'UTC', %(anchor)s)
     ORDER BY m.created_at DESC, m.id DESC
     LIMIT %(limit)s)
    UNION ALL
    (SELECT m.id, m.role, yuxi_utc_iso(m.created_at), LEFT(m.content, %(content_chars)s), FALSE,
            m.created_at
     FROM conversations_message m
     WHERE m.conversation_id = %(conversation)s
       AND m.message_type = 'text' AND m.role IN ('user', 'assistant')
       AND (m.created_at, m.id) > (%(anchor_at)s::timestamp AT TIME ZONE 'UTC', %(anchor)s)
     ORDER BY m.created_at ASC, m.id ASC
     LIMIT %(limit)s)
) around
ORDER BY sort_at, id
"""

# The allowlisted fields of the returned messages' tool calls, in message order. Both arrays
# arrive in PostgreSQL's array text form (see `read.py`'s `_array_text`).
TOOL_CALLS_SQL = """
SELECT t.tool_call_id, t.message_id, t.name, t.status,
       LEFT(t.input::text, %(input_chars)s),
       CASE WHEN t.name = ANY(%(lookback_tools)s::text[]) THEN NULL
            ELSE LEFT(t.output, %(field_chars)s) END,
       LEFT(t.error, %(field_chars)s)
FROM conversations_toolcall t
INNER JOIN conversations_message m ON m.id = t.message_id
WHERE t.message_id = ANY(%(messages)s::bigint[])
ORDER BY m.created_at, t.message_id, t.created_at, t.id
LIMIT %(count)s
"""


def fetch(cursor: CursorWrapper, sql: str, params: dict[str, Any]) -> list[tuple]:
    """Every row of one of the statements above, sent through Django's connection."""
    cursor.execute(sql, params)
    return cursor.fetchall()
