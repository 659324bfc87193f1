"""History lookback: the agent's bounded view of its own user's past conversations.

The one owner of history field choice, per-level byte budgets and truncation flags. Each call
sends static, fully parameterised statements (the module constants below) through Django's
connection: no ORM compilation per call, so a call costs little more than its bare SQL. The
statements select allowlisted columns only and spell out visibility themselves (see the
comment above them). Every budget is counted on UTF-8 bytes; response caps on
`to_json(response)`, the form tools send.
"""

import json
import math
from collections.abc import Iterable
from datetime import UTC, date, datetime
from typing import Any, NamedTuple

from django.db import connection
from django.db.backends.utils import CursorWrapper

from conversations.models import Conversation
from conversations.repository.terms import (
    DATE_OR_TIME,
    QUERY_TERMS_MAX,
    Term,
    asks_when,
    query_terms,
    term,
)
from conversations.utils.ids import parse_uid
from conversations.utils.invisible_text import escape_invisible, escape_invisible_within
from conversations.utils.string_utils import (
    STORABLE_TEXT_REQUIREMENT,
    is_storable_text,
    truncate_utf8,
)

__all__ = [
    "CONTENTS_MAX_BYTES",
    "CONTENT_MAX_BYTES",
    "LOOKBACK_TOOL_NAMES",
    "NOT_FOUND_MESSAGE",
    "QUERY_MAX_CHARS",
    "QUERY_TERMS_MAX",
    "READ_LIMIT_MAX",
    "READ_RESPONSE_MAX_BYTES",
    "SEARCH_LIMIT_MAX",
    "SEARCH_RESPONSE_MAX_BYTES",
    "SNIPPET_MAX_BYTES",
    "TIME_BOUND_FORMAT",
    "TITLE_MAX_BYTES",
    "TOOL_CALLS_MAX",
    "TOOL_CALLS_MAX_BYTES",
    "TOOL_CALL_MAX_BYTES",
    "HistoryNotFound",
    "HistoryQueryError",
    "read_thread_messages",
    "search_thread_messages",
    "to_json",
]

QUERY_MAX_CHARS = 256
# The newest visible messages a search walks: every term is checked on each, and a term no
# index can narrow (no run of three letters or digits, not a CJK pair) is only ever checked
# on these, so no query walks more. They also give each term's frequency, hence its weight.
SEARCH_WINDOW = 1_000
# A term found in this many of those newest messages is frequent: while another term is found
# in fewer, the frequent one is checked on what the index found rather than looked up in it;
# a term found in fewer is rare, and its own newest messages are candidates (TERM_CANDIDATES).
FREQUENT_TERM_HITS = 10
# Candidates with every term: at most this many, the newest.
SEARCH_CANDIDATES = 50
# Candidates with one rare term (or a form of it): at most this many per term, the newest.
TERM_CANDIDATES = 50
# Of a query of more than QUERY_TERMS_MAX terms, a term's matches among the newest messages are
# counted up to this many (a word in most of them stops the count early; forty frequent words
# took 150 ms counted in full): terms found at least this often are alike, the later left out
# first.
COUNTED_HITS = 50
# Rare terms looked up so: at most this many, the rarest (each lookup walks the index and sorts
# its term's messages: eight rare words of a long question took 210 ms at 1M messages).
RARE_LOOKUPS = 3
# What a term found only in another form (its stem, half a CJK run's pieces) weighs, beside 1
# as written.
FORM_WEIGHT = 0.5
# BM25's term-frequency saturation (k1) and document-length normalisation (b): a term found
# twice weighs more than once but not twice as much, and a long message's matches weigh less
# than a message of average length (the average of the newest SEARCH_WINDOW messages). The
# length ratio is coarse on purpose, a power of two and never under 1 (a message up to twice
# the average counts as average, up to four times as twice): two wordings of one fact score
# alike, and the newest (a correction) ranks first.
BM25_K1 = 1.2
BM25_B = 0.75
LENGTH_STEP = 4
# Two or more terms whose first positions lie closer than NEAR_CHARS characters multiply the
# score by 1 + NEAR_BONUS; each doubling of the distance beyond halves the bonus (up to 3
# times NEAR_CHARS apart 1 + NEAR_BONUS / 2, up to 7 times 1 + NEAR_BONUS / 4...).
NEAR_BONUS = 1.0
NEAR_CHARS = 16
# A question that asks when (`asks_when`) scores a message holding a date or a time
# (`DATE_OR_TIME`) 1 + WHEN_BONUS times as high.
WHEN_BONUS = 0.5
TIME_BOUND_FORMAT = (
    "an ISO 8601 date or datetime in UTC, such as 2026-06-14 or 2026-06-14T09:30:00Z"
)
SEARCH_LIMIT_MAX = 10
SNIPPET_MAX_BYTES = 512
# Context kept before the match in a snippet; the rest of the snippet follows the match.
SNIPPET_LEAD_BYTES = 128
SEARCH_RESPONSE_MAX_BYTES = 16_384

READ_LIMIT_MAX = 20
CONTENT_MAX_BYTES = 8_192
CONTENTS_MAX_BYTES = 32_768
READ_RESPONSE_MAX_BYTES = 65_536
TITLE_MAX_BYTES = 256

TOOL_CALLS_MAX = 10
TOOL_CALL_MAX_BYTES = 4_096
TOOL_CALLS_MAX_BYTES = 16_384
# A tool call's `id` and `name`, each serialized.
TOOL_LABEL_MAX_BYTES = 256
# jsonb's text form is at most 1.5x the compact form, so this many characters always hold an
# input that could fit its item whole.
TOOL_INPUT_LOAD_CHARS = 3 * TOOL_CALL_MAX_BYTES
# The lookback tools are named after the functions below. Their recorded outputs are copies of
# other threads' text (which may since be archived or deleted), so reading a thread with its
# tool calls never returns them: their `output` is null.
LOOKBACK_TOOL_NAMES = ("search_thread_messages", "read_thread_messages")

# The most bytes one character takes serialized (a control character, as `\u00XX`).
JSON_CHAR_MAX_BYTES = 6

# Larger ids cannot exist (bigint primary keys).
MESSAGE_ID_MAX = 2**63 - 1
THREAD_ID_MAX_CHARS = Conversation._meta.get_field("thread_id").max_length

NOT_FOUND_MESSAGE = "no such thread or message"

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
# MATERIALIZED` runs once, and only if a step that runs reads it):
#   visible the ids of the user's visible threads: every scan of messages keeps those in them.
#           An index scan keeps them as `conversation_id + 0 = ANY (...)`, never an index
#           condition: given the array as a parameter, the planner estimates a few hundred
#           rows and ANDs the thread index's bitmap into the GIN scan's, every message of
#           the user's visible threads (82,400 of the heavy bench user: 12-23 ms a scan).
#   newest  the user's SEARCH_WINDOW newest messages of the visible kinds within the time
#           bounds, of visible threads, each cased once (`u`): one copy every step that
#           walks the window reads (casing the whole window takes 1-3 ms; each step casing
#           what it walked took that for every term probed and for the page of every term).
#           Its size bounds every walk: a term the indexes cannot narrow is only ever
#           checked here.
#   terms   each distinct term: as written (`bare`, cased in SQL, for STRPOS), its `form` (a
#           LIKE pattern of its stem, or itself), a CJK run's `grams` (half of which are
#           another form of it) and `chars`, the `anchor` a form match is placed by, its
#           trigram slot, and whether an index serves it.
#   probed  how many of the newest messages hold each term, counted up to FREQUENT_TERM_HITS.
#   window_every / every  the candidates with every term: the newest window's when it holds
#           a page of them, else those and the newest of all the user's other messages with
#           every term, SEARCH_CANDIDATES in all, each term in the condition its index serves
#           (below). Not run when no term is index-served (`indexed` false): such a query
#           only walks the window. The window's are left out of the indexed scan by a
#           `NOT IN`, which also keeps it out of parallel workers (a worker cannot read a
#           CTE; starting two for a scan its gate then stops cost 11 ms).
#   weights each term's BM25 idf among the newest messages (the rarer, the heavier), counted
#           only when partial matches are ranked (else all alike).
#   partial only when `every` holds less than a page and there are several terms: the
#           window's messages with any term (or a form of it), and for each term found in
#           fewer than FREQUENT_TERM_HITS of them (a rare one) and served by an index, of the
#           RARE_LOOKUPS rarest, the newest TERM_CANDIDATES of all the user's messages with it
#           (`_LOOKUP_TEMPLATE`).
#   scored  each candidate's terms found (as written or in another form), their weights (a
#           form match weighs FORM_WEIGHT, a CJK run's times the share of its characters
#           found), and how close together they are (the span of their first positions);
#           ranked: terms found, then relevance, then newest.
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
#   lists walked before, 7 after).
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

# One rare term's own candidates (see the comment above), for term number `n`.
_LOOKUP_TEMPLATE = """    UNION
    (SELECT m.id
     FROM conversations_message m
     WHERE %(several)s
       AND (%(like_{n})s::text IS NOT NULL OR %(pairs_{n})s::text IS NOT NULL)
       AND (SELECT count(*) FROM every) < %(limit)s
       AND (SELECT hits FROM probed WHERE n = {n}) < %(frequent_hits)s
       AND {n} IN (SELECT p.n FROM probed p INNER JOIN terms t ON t.n = p.n WHERE t.served
                   ORDER BY p.hits, p.n LIMIT %(rare_lookups)s)
       AND m.id NOT IN (SELECT id FROM every)
{visible_message}
       AND (%(like_{n})s::text IS NULL
            OR UPPER(m.content) LIKE (SELECT UPPER(%(like_{n})s::text)))
       AND (%(pairs_{n})s::text IS NULL
            OR yuxi_cjk_bigrams(UPPER(m.content)) && %(pairs_{n})s::text[])
     ORDER BY m.created_at DESC, m.id DESC
     LIMIT %(term_candidates)s)"""


def _found_sql(text: str) -> str:
    """SQL: whether the cased text `text` holds the term `t` (a row of `terms`) in some form:
    its form's pattern, or, for a CJK run, at least half its bigrams."""
    return (
        f"({text} LIKE t.form OR (t.grams IS NOT NULL AND (SELECT count(*) FROM unnest(t.grams)"
        f" g WHERE STRPOS({text}, g) > 0) * 2 >= cardinality(t.grams)))"
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
    WHERE m.conversation_id = ANY ((SELECT ids FROM visible)::bigint[])
)"""

_SEARCH_TEMPLATE = (
    _WINDOW_CTES
    + """,
terms AS MATERIALIZED (
    SELECT t.n::int AS n, t.bare, t.form, t.anchor, string_to_array(t.grams, ' ') AS grams,
           string_to_array(t.bare, NULL) AS chars, t.slot, t.served
    FROM unnest(UPPER(%(bares)s::text)::text[], UPPER(%(forms)s::text)::text[],
                UPPER(%(anchors)s::text)::text[], %(grams)s::text[], %(slots)s::int[],
                %(served)s::boolean[])
         WITH ORDINALITY AS t (bare, form, anchor, grams, slot, served, n)
),
probed AS MATERIALIZED (
    SELECT t.n, (
        SELECT count(*) FROM (
            SELECT 1 FROM newest x
            WHERE {found_x}
            LIMIT %(frequent_hits)s
        ) found
    ) AS hits
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
    HAVING min(p.hits) < %(frequent_hits)s
),
window_every AS MATERIALIZED (
    SELECT x.id FROM newest x
    WHERE NOT EXISTS (SELECT 1 FROM terms t WHERE NOT {found_x})
    ORDER BY x.created_at DESC, x.id DESC
    LIMIT %(candidates)s
),
every AS MATERIALIZED (
    SELECT id FROM window_every
    UNION ALL
    (SELECT m.id
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
    SELECT t.n, ln(1 + (f.total - f.df + 0.5) / (f.df + 0.5)) AS weight
    FROM terms t
    CROSS JOIN LATERAL (
        SELECT count(*) FILTER (WHERE {found_w})::float8 AS df, count(*)::float8 AS total
        FROM newest w
        WHERE %(several)s AND (SELECT count(*) FROM every) < %(limit)s
    ) f
),
partial AS MATERIALIZED (
    SELECT w.id FROM newest w
    WHERE %(several)s AND (SELECT count(*) FROM every) < %(limit)s
      AND EXISTS (SELECT 1 FROM terms t WHERE {found_w})
{lookups}
),
lengths AS MATERIALIZED (
    SELECT avg(LENGTH(x.u))::float8 AS average FROM newest x
),
scored AS MATERIALIZED (
    SELECT m.id, m.created_at, f.found, f.relevance, f.terms, f.at
    FROM (SELECT id FROM every UNION SELECT id FROM partial) k
    INNER JOIN conversations_message m ON m.id = k.id
    CROSS JOIN LATERAL (SELECT UPPER(m.content) AS u OFFSET 0) up
    CROSS JOIN LATERAL (
        SELECT %(length_step)s::float8 ^ GREATEST(floor(ln(GREATEST(LENGTH(up.u), 1)::float8
                   / COALESCE(NULLIF((SELECT average FROM lengths), 0), GREATEST(LENGTH(up.u), 1)))
                   / ln(%(length_step)s::float8)), 0) AS ratio
    ) dl
    CROSS JOIN LATERAL (
        SELECT count(*) AS found, array_agg(t.n ORDER BY t.n) AS terms,
               (array_agg(p.at ORDER BY t.n))[1] AS at,
               sum(wt.weight * CASE WHEN p.bare_at > 0 THEN 1
                                   WHEN t.grams IS NULL THEN %(form_weight)s::float8
                                   ELSE %(form_weight)s::float8 * (
                                       SELECT count(*) FILTER (WHERE STRPOS(up.u, c) > 0)
                                       FROM unnest(t.chars) c)::float8 / cardinality(t.chars)
                              END
                   * p.tf * (%(k1)s::float8 + 1)
                   / (p.tf + %(k1)s::float8 * (1 - %(b)s::float8 + %(b)s::float8 * dl.ratio)))
                 * (1 + CASE WHEN count(*) > 1
                             THEN %(near_bonus)s::float8 * 2 ^ -floor(
                                 ln(1 + (max(p.at) - min(p.at)) / %(near_chars)s::float8) / ln(2))
                             ELSE 0 END)
                 * count(*) / cardinality((SELECT array_agg(n) FROM terms))
                 * CASE WHEN %(asks_when)s AND up.u ~ %(date_or_time)s
                        THEN 1 + %(when_bonus)s::float8 ELSE 1 END AS relevance
        FROM terms t
        INNER JOIN weights wt ON wt.n = t.n
        CROSS JOIN LATERAL (SELECT STRPOS(up.u, t.bare) AS bare_at) b
        CROSS JOIN LATERAL (
            SELECT CASE WHEN b.bare_at > 0 THEN t.bare ELSE t.anchor END AS seen
        ) s
        CROSS JOIN LATERAL (
            SELECT b.bare_at,
                   CASE WHEN b.bare_at > 0 THEN b.bare_at
                        ELSE GREATEST(STRPOS(up.u, t.anchor), 1) END AS at,
                   GREATEST((LENGTH(up.u) - LENGTH(REPLACE(up.u, s.seen, '')))
                            / LENGTH(s.seen), 1)::float8 AS tf
        ) p
        WHERE p.bare_at > 0 OR {found_up}
    ) f
    WHERE f.found > 0
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
        found_x=_found_sql("x.u"),
        found_w=_found_sql("w.u"),
        found_m=_found_sql("UPPER(m.content)"),
        found_up=_found_sql("up.u"),
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

# For a query of more than QUERY_TERMS_MAX terms, which to keep: each term's matches (its form's
# pattern: itself or its stem) among the newest visible messages, and, for a term found in none
# of them that an index serves, whether any older visible message has it (one index probe). A
# term no index serves, or a CJK run of three or more characters (found by half its pieces,
# which no index probe can tell cheaply), not found among the newest, counts as found nowhere;
# so does an index-served one past the first QUERY_TERMS_MAX of them (each probe walks the
# index: eighty CJK pairs took 160 ms).
TERM_COUNTS_SQL = (
    _WINDOW_CTES
    + f""",
terms AS MATERIALIZED (
    SELECT t.n::int AS n, t.form, t.lookup, t.pairs
    FROM unnest(UPPER(%(forms)s::text)::text[], UPPER(%(lookups)s::text)::text[],
                %(pairs)s::text[])
         WITH ORDINALITY AS t (form, lookup, pairs, n)
),
counted AS MATERIALIZED (
    SELECT t.n, t.lookup, t.pairs, h.hits,
           row_number() OVER (PARTITION BY h.hits = 0 AND (t.lookup IS NOT NULL OR
                                                           t.pairs IS NOT NULL)
                              ORDER BY t.n) AS turn
    FROM terms t
    CROSS JOIN LATERAL (
        SELECT count(*) AS hits FROM (
            SELECT 1 FROM newest x WHERE x.u LIKE t.form LIMIT %(counted_hits)s
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
# arrive in PostgreSQL's array text form (see `_array_text`).
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


class HistoryNotFound(LookupError):
    """The thread or anchor is unknown or not visible to the user (indistinguishably)."""


class HistoryQueryError(ValueError):
    """An argument is out of the contract's range."""


def _fetch(cursor: CursorWrapper, sql: str, params: dict[str, Any]) -> list[tuple]:
    cursor.execute(sql, params)
    return cursor.fetchall()


# One encoder for every size check: `json.dumps` with options builds a new one per call.
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def to_json(response: dict[str, Any]) -> str:
    """The serialized form every byte budget is counted on."""
    return _ENCODER.encode(response)


def _json_bytes(value: Any) -> int:
    return len(to_json(value).encode("utf-8"))


def _escaped_bytes(text: str) -> int:
    """Bytes of `text` as a JSON string literal, quotes excluded. Printable ASCII without `"`
    or `\\` (ids, names, statuses) is itself; anything else is measured by serializing it."""
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return len(text)
    return _json_bytes(text) - 2


def _bounded_bytes(text: str | None) -> int:
    """An upper bound of `text`'s serialized size, found without serializing it: a character
    takes at most JSON_CHAR_MAX_BYTES, `null` 4."""
    return 4 if text is None else JSON_CHAR_MAX_BYTES * len(text) + 2


def _cut_serialized(text: str, max_bytes: int) -> tuple[str, bool]:
    """Longest prefix of `text` whose JSON-escaped form fits `max_bytes` (quotes excluded)."""
    if _bounded_bytes(text) - 2 <= max_bytes:
        return text, False
    head, cut = truncate_utf8(text, max_bytes)
    if _escaped_bytes(head) <= max_bytes:
        return head, cut
    low, high = 0, len(head)  # head[:low] fits, head[:high] does not
    while high - low > 1:
        middle = (low + high) // 2
        if _escaped_bytes(head[:middle]) <= max_bytes:
            low = middle
        else:
            high = middle
    return head[:low], True


def _take_within(items: list[dict[str, Any]], max_bytes: int) -> tuple[list[dict[str, Any]], bool]:
    """The leading `items` whose serialized list body fits `max_bytes`; whether any was left."""
    if _json_bytes(items) - 2 <= max_bytes:
        return items, False
    size = 0
    for count, item in enumerate(items):
        size += _json_bytes(item) + (1 if count else 0)
        if size > max_bytes:
            return items[:count], True
    return items, False


def _uid(value: object) -> int:
    uid = parse_uid(value)
    if uid is None:
        raise HistoryQueryError("the user id is malformed")
    return uid


def _limit(value: object, maximum: int) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= maximum:
        return value
    raise HistoryQueryError(f"limit must be an integer from 1 to {maximum}")


def _text(value: object, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise HistoryQueryError(f"{name} must be a non-empty string")
    if not is_storable_text(value):
        raise HistoryQueryError(f"{name} must be {STORABLE_TEXT_REQUIREMENT}")
    return value


def _quoted_array_text(values: list[str]) -> str | None:
    """Strings in PostgreSQL's array text form, every element quoted; None for none."""
    if not values:
        return None
    quoted = (value.replace("\\", "\\\\").replace('"', '\\"') for value in values)
    return "{" + ",".join(f'"{value}"' for value in quoted) + "}"


def _array_item(value: str | None) -> str:
    """One element of an array in PostgreSQL's text form: quoted, or NULL for None or ''."""
    if not value:
        return "NULL"
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _grams_text(found: Term) -> str:
    """A CJK run's bigrams as one space-separated array element (NULL for another term)."""
    return _array_item(" ".join(found.grams or []))


def _term_params(terms: list[str]) -> dict[str, Any]:
    """The search statement's term parameters (see the comment above the template): each distinct
    term as written, its form, anchor and bigrams, its trigram slot and whether an index serves
    it; for the step with every term, the forms the trigram index serves in their slots, the
    CJK pairs and each CJK run's bigrams the bigram index serves, and the forms only checked
    (every pattern's when one may be left to the filter, else those no index serves); for the
    rare terms' candidates, each term's own lookup. The unused conditions NULL."""
    found = [term(text) for text in terms]
    trigram = [t for t in found if t.lookup is not None]
    pairs = [t.bare for t in found if t.grams is None and t.lookup_pairs]
    unserved = [t for t in found if t.lookup is None and not t.lookup_pairs]
    # Only a trigram term with another index-served term beside it can be left to the filter.
    probed = bool(trigram) and len(found) - len(unserved) > 1
    params: dict[str, Any] = {}
    for n in range(1, QUERY_TERMS_MAX + 1):
        params[f"pattern_{n}"] = trigram[n - 1].lookup if n <= len(trigram) else None
        each = found[n - 1] if n <= len(found) else None
        params[f"like_{n}"] = each.lookup if each else None
        params[f"pairs_{n}"] = _quoted_array_text(each.lookup_pairs) if each else None
        params[f"grams_{n}"] = _quoted_array_text(each.grams or []) if each else None
    slots = [str(trigram.index(t) + 1) if t in trigram else "NULL" for t in found]
    grams = [_grams_text(t) for t in found]
    checked = [t.form for t in (found if probed else unserved) if t.grams is None]
    return {
        **params,
        "bares": _quoted_array_text([t.bare for t in found]),
        "forms": _quoted_array_text([t.form for t in found]),
        "anchors": _quoted_array_text([t.anchor for t in found]),
        "grams": "{" + ",".join(grams) + "}",
        "slots": "{" + ",".join(slots) + "}",
        "served": "{" + ",".join("f" if t in unserved else "t" for t in found) + "}",
        "pairs": _quoted_array_text(pairs),
        "checked": _quoted_array_text(checked),
        "overlap": any(t.grams for t in found),
        "indexed": len(unserved) < len(found),
        "several": len(found) > 1,
    }


def _most_informative(
    cursor: CursorWrapper, owner: int, terms: list[str], since: str | None, until: str | None
) -> list[str]:
    """QUERY_TERMS_MAX of `terms`, in query order: the terms found in none of the user's
    visible messages are left out first (the last first), then the most frequent among the
    newest of them (`TERM_COUNTS_SQL`; the later first on a tie)."""
    found = [term(text) for text in terms]
    rows = _fetch(
        cursor,
        TERM_COUNTS_SQL,
        {
            "owner": owner,
            "since": since,
            "until": until,
            "window": SEARCH_WINDOW,
            "probes": QUERY_TERMS_MAX,
            "counted_hits": COUNTED_HITS,
            "forms": _quoted_array_text([t.form for t in found]),
            "lookups": "{" + ",".join(_array_item(t.lookup) for t in found) + "}",
            # a CJK pair's own bigram (a run's pieces are not probed: see the statement)
            "pairs": "{"
            + ",".join(
                _array_item(t.bare if t.grams is None and t.lookup_pairs else None) for t in found
            )
            + "}",
        },
    )
    first_left_out = sorted(rows, key=lambda row: (row[2], -row[1], -row[0]))
    left_out = {n for n, _, _ in first_left_out[: len(terms) - QUERY_TERMS_MAX]}
    return [text for n, text in enumerate(terms, 1) if n not in left_out]


def _time_bound(value: object, name: str) -> str | None:
    """`since`/`until` as UTC ISO text: an ISO 8601 date (midnight UTC) or datetime (UTC when
    it names no offset, converted when it does), or a date or datetime object."""
    if value is None:
        return None
    bad = HistoryQueryError(f"{name} must be {TIME_BOUND_FORMAT}")
    if isinstance(value, str):
        if not value.isascii() or len(value) > 64:
            raise bad
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise bad from None
    if not isinstance(value, date):
        raise bad
    if not isinstance(value, datetime):
        value = datetime(value.year, value.month, value.day)
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC).isoformat()
    except OverflowError:
        raise bad from None


def _title(head: str) -> tuple[str, bool]:
    return escape_invisible_within(head, TITLE_MAX_BYTES)


def _snippet(window: str, match_offset: int) -> tuple[str, int]:
    """Up to SNIPPET_MAX_BYTES of `window` around the match; returns it and its start offset."""
    if window.isascii():  # one byte per character: plain slicing is the byte cut
        start = max(match_offset - SNIPPET_LEAD_BYTES, 0)
        return window[start : start + SNIPPET_MAX_BYTES], start
    lead, _ = truncate_utf8(window[:match_offset][::-1], SNIPPET_LEAD_BYTES)
    lead = lead[::-1]  # reversed code points: the cut keeps the end nearest the match
    body, _ = truncate_utf8(window[match_offset:], SNIPPET_MAX_BYTES - len(lead.encode("utf-8")))
    return lead + body, match_offset - len(lead)


_EMPTY_SEARCH_BYTES = _json_bytes({"results": [], "truncated": False})


def search_thread_messages(
    uid: int | str,
    query: str,
    *,
    limit: int = 5,
    since: str | date | None = None,
    until: str | date | None = None,
) -> dict[str, Any]:
    """The visible messages of `uid` that best match `query`, created from `since` (inclusive)
    until `until` (exclusive). The query may be keywords or a question as written
    (`query_terms`: punctuation around words and stop words dropped); any term matches
    (case-insensitive, literal, or another form of it); ranked by a BM25-like score (rarer
    terms in the user's messages weigh more, a long message's matches less), terms close
    together counting more, then newest.

    One SQL query (two when more than QUERY_TERMS_MAX terms are left: which to keep is
    counted first); it never touches ToolCall. Each hit names the terms it contains
    (`matched_terms`, in query order) and is cut to a snippet around the first of them; hits
    are kept in rank order while the serialized response stays within its cap.
    """
    owner = _uid(uid)
    query = _text(query, "query")
    if len(query) > QUERY_MAX_CHARS:
        raise HistoryQueryError(f"query must be at most {QUERY_MAX_CHARS} characters")
    terms = query_terms(query)
    if not terms:
        raise HistoryQueryError("query must contain a term (it is blank)")
    limit = _limit(limit, SEARCH_LIMIT_MAX)
    since_at, until_at = _time_bound(since, "since"), _time_bound(until, "until")
    if since_at is not None and until_at is not None and since_at >= until_at:
        raise HistoryQueryError("since must be earlier than until")

    with connection.cursor() as cursor:
        if len(terms) > QUERY_TERMS_MAX:
            terms = _most_informative(cursor, owner, terms, since_at, until_at)
        params = {
            "owner": owner,
            "limit": limit,
            "since": since_at,
            "until": until_at,
            "window": SEARCH_WINDOW,
            "frequent_hits": FREQUENT_TERM_HITS,
            "candidates": SEARCH_CANDIDATES,
            "term_candidates": TERM_CANDIDATES,
            "rare_lookups": RARE_LOOKUPS,
            "form_weight": FORM_WEIGHT,
            "k1": BM25_K1,
            "b": BM25_B,
            "length_step": LENGTH_STEP,
            "near_bonus": NEAR_BONUS,
            "near_chars": NEAR_CHARS,
            "asks_when": asks_when(query),
            "date_or_time": DATE_OR_TIME,
            "when_bonus": WHEN_BONUS,
            "title_chars": TITLE_MAX_BYTES + 1,
            "lead_chars": SNIPPET_LEAD_BYTES,
            "window_chars": SNIPPET_LEAD_BYTES + SNIPPET_MAX_BYTES,
            **_term_params(terms),
        }
        rows = _fetch(cursor, SEARCH_SQLS[len(terms) - 1], params)

    hits: list[dict[str, Any]] = []
    for row in rows:
        thread_id, title_head, message_id, role, created_at, window, match_at, chars, found = row
        window_at = max(match_at - SNIPPET_LEAD_BYTES, 1)
        snippet, offset = _snippet(window, match_at - window_at)
        first = window_at + offset  # 1-based position of the snippet in the content
        title, title_cut = _title(title_head)
        # Invisible characters reach the model escaped, within the snippet's budget.
        shown, shown_cut = escape_invisible_within(snippet, SNIPPET_MAX_BYTES)
        hits.append(
            {
                "thread_id": thread_id,
                "title": title,
                "message_id": message_id,
                "role": role,
                "created_at": created_at,
                "snippet": shown,
                "matched_terms": [terms[n - 1] for n in found],
                "truncated": (
                    title_cut or shown_cut or first > 1 or first + len(snippet) - 1 < chars
                ),
            }
        )
    results, dropped = _take_within(hits, SEARCH_RESPONSE_MAX_BYTES - _EMPTY_SEARCH_BYTES)
    return {"results": results, "truncated": dropped or any(h["truncated"] for h in results)}


def _message_id(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    raise HistoryQueryError("message_id must be a positive integer")


class _Thread(NamedTuple):
    pk: int
    title_head: str


class _Window(NamedTuple):
    """Message rows `(id, role, created_at, content head, ...)` in order, the index of the
    anchor (the latest message without one), and whether more lie beyond either end."""

    rows: list[tuple]
    anchor: int
    has_more_before: bool
    has_more_after: bool


def _load_thread(
    cursor: CursorWrapper, owner: int, thread_id: str, anchor_id: int | None
) -> tuple[_Thread, datetime | None]:
    """The visible thread and the anchor's plain UTC timestamp (None without an anchor);
    not-found alike for an unknown thread, an invisible one, and an anchor that is not a
    visible message of it."""
    if len(thread_id) > THREAD_ID_MAX_CHARS or (anchor_id or 0) > MESSAGE_ID_MAX:
        raise HistoryNotFound(NOT_FOUND_MESSAGE)
    found = _fetch(
        cursor,
        THREAD_SQL,
        {
            "owner": owner,
            "thread_id": thread_id,
            "anchor": anchor_id,
            "title_chars": TITLE_MAX_BYTES + 1,
        },
    )
    if not found or (anchor_id is not None and found[0][2] is None):
        raise HistoryNotFound(NOT_FOUND_MESSAGE)
    conversation_pk, title_head, anchor_at = found[0]
    return _Thread(conversation_pk, title_head), anchor_at


def _load_window(
    cursor: CursorWrapper,
    conversation_pk: int,
    anchor_id: int | None,
    anchor_at: datetime | None,
    limit: int,
) -> _Window:
    """Up to `limit` visible messages: the latest, or `ceil(limit/2)` up to and including the
    anchor and the rest after it, a short side filled from the other."""
    params = {
        "conversation": conversation_pk,
        "limit": limit + 1,
        "content_chars": CONTENT_MAX_BYTES + 1,
    }
    if anchor_id is None:
        rows = _fetch(cursor, LATEST_SQL, params)
        rows.reverse()
        return _Window(rows[-limit:], min(len(rows), limit) - 1, len(rows) > limit, False)
    rows = _fetch(cursor, AROUND_SQL, {**params, "anchor": anchor_id, "anchor_at": anchor_at})
    before = sum(1 for row in rows if row[4])  # rows[:before] end at the anchor
    after = len(rows) - before
    want_before = math.ceil(limit / 2)
    want_after = limit - want_before
    if after < want_after:
        want_before = min(before, limit - after)
        want_after = after
    elif before < want_before:
        want_after = min(after, limit - before)
        want_before = before
    return _Window(
        rows[before - want_before : before + want_after],
        want_before - 1,
        before > want_before,
        after > want_after,
    )


def _budget_contents(window: _Window) -> tuple[dict[int, dict[str, Any]], list[int], bool]:
    """Message items cut to their budgets, nearest the anchor first (at equal distance the
    earlier one) until the contents' budget is spent. Returns the items by window index, the
    kept indexes in that priority order, and whether anything was cut or left out."""
    anchor = window.anchor
    priority = sorted(range(len(window.rows)), key=lambda i: (abs(i - anchor), i))
    items: dict[int, dict[str, Any]] = {}
    remaining = CONTENTS_MAX_BYTES
    truncated = False
    for index in priority:
        if remaining == 0:
            truncated = True
            break
        row = window.rows[index]
        content = escape_invisible(row[3])  # invisible characters escaped, then budgeted
        size = len(content) if content.isascii() else len(content.encode("utf-8"))
        allowed = min(CONTENT_MAX_BYTES, remaining)
        cut = size > allowed
        if cut:  # the rare case: cut, and count what is left
            content, _ = truncate_utf8(content, allowed)
            size = len(content.encode("utf-8"))
            truncated = True
        remaining -= size
        items[index] = {
            "message_id": row[0],
            "role": row[1],
            "created_at": row[2],
            "content": content,
            "truncated": cut,
        }
    return items, priority[: len(items)], truncated


def _tool_call_frame(call_id: str, message_id: int, name: str, status: str) -> dict[str, Any]:
    """A tool-call item with its three free-form fields empty, to be filled in."""
    return {
        "id": call_id,
        "message_id": message_id,
        "name": name,
        "status": status,
        "input": "",
        "output": "",
        "error": "",
        "truncated": False,
    }


# The frame's serialized bytes with every label empty, `message_id` 0 (one digit) and the
# three free-form fields' empty strings (6 bytes) left out.
_TOOL_CALL_FRAME_BYTES = _json_bytes(_tool_call_frame("", 0, "", "")) - 1 - 6


def _tool_call_frame_bytes(call_id: str, message_id: int, name: str, status: str) -> int:
    """A tool-call item's serialized bytes without its three free-form fields' values."""
    return (
        _TOOL_CALL_FRAME_BYTES
        + _escaped_bytes(call_id)
        + len(str(message_id))
        + _escaped_bytes(name)
        + _escaped_bytes(status)
    )


def _tool_call_item(row: tuple) -> tuple[dict[str, Any], int]:
    """One allowlisted tool call, at most TOOL_CALL_MAX_BYTES serialized, and an upper bound
    of its serialized size found without serializing it whole."""
    call_id, message_id, name, status, input_head, output, error = row
    call_id, id_cut = _cut_serialized(call_id, TOOL_LABEL_MAX_BYTES)
    name, name_cut = _cut_serialized(name, TOOL_LABEL_MAX_BYTES)
    input_whole = len(input_head) <= TOOL_INPUT_LOAD_CHARS
    input_value: Any = json.loads(input_head) if input_whole else input_head
    item = _tool_call_frame(call_id, message_id, name, status)
    # What is left once the three free-form fields are empty strings ("" is 2 bytes each).
    available = TOOL_CALL_MAX_BYTES - _tool_call_frame_bytes(call_id, message_id, name, status)
    # An input that must be cut becomes cut JSON text.
    input_text = to_json(input_value) if input_whole else input_head
    needs = {
        "input": len(input_text.encode("utf-8")) if input_whole else _json_bytes(input_head),
        "output": _bounded_bytes(output),
        "error": _bounded_bytes(error),
    }
    values: dict[str, Any] = {"input": input_value, "output": output, "error": error}
    texts = {**values, "input": input_text}
    cut_any = id_cut or name_cut or not input_whole
    bound = TOOL_CALL_MAX_BYTES - available + sum(needs.values())
    if cut_any or bound > TOOL_CALL_MAX_BYTES:
        bound = TOOL_CALL_MAX_BYTES
        needs.update(output=_json_bytes(output), error=_json_bytes(error))
        # Water-filling: the smaller fields stay whole, the larger share what remains.
        left = len(needs)
        for field in sorted(needs, key=needs.__getitem__):
            share = available // left
            left -= 1
            whole = needs[field] <= share and not (field == "input" and not input_whole)
            if whole:
                available -= needs[field]
                continue
            values[field], _ = _cut_serialized(texts[field], share - 2)
            available -= _json_bytes(values[field])
            cut_any = True
    item.update(values, truncated=cut_any)
    return item, bound


def _array_text(values: Iterable[int | str]) -> str:
    """Integers or plain names (no quoting needed) in PostgreSQL's array text form. The driver
    quotes a list parameter in Python, several times slower than this for a page of ids."""
    return "{" + ",".join(map(str, values)) + "}"


_LOOKBACK_TOOLS_ARRAY = _array_text(LOOKBACK_TOOL_NAMES)


def _load_tool_calls(
    cursor: CursorWrapper, message_ids: list[int]
) -> tuple[list[dict[str, Any]], bool]:
    """The allowlisted tool calls of `message_ids`, within count and byte caps."""
    rows = _fetch(
        cursor,
        TOOL_CALLS_SQL,
        {
            "messages": _array_text(message_ids),
            "lookback_tools": _LOOKBACK_TOOLS_ARRAY,
            "input_chars": TOOL_INPUT_LOAD_CHARS + 1,
            "field_chars": TOOL_CALL_MAX_BYTES + 1,
            "count": TOOL_CALLS_MAX + 1,
        },
    )
    built = [_tool_call_item(row) for row in rows[:TOOL_CALLS_MAX]]
    items = [item for item, _ in built]
    dropped = False
    # Serialize the list only when the items' bounds do not already show that it fits.
    if sum(bound for _, bound in built) + len(built) - 1 > TOOL_CALLS_MAX_BYTES - 2:
        items, dropped = _take_within(items, TOOL_CALLS_MAX_BYTES - 2)
    cut = len(rows) > TOOL_CALLS_MAX or dropped or any(item["truncated"] for item in items)
    return items, cut


# A message item's serialized bytes, but for its role, timestamp (both plain ASCII) and content.
_MESSAGE_ITEM_BYTES = _json_bytes(
    {"message_id": MESSAGE_ID_MAX, "role": "", "created_at": "", "content": "", "truncated": False}
)


def _read_bound(response: dict[str, Any]) -> int:
    """An upper bound of the read response's serialized size that serializes neither the
    message contents nor the tool calls (most responses are far below their cap). Tool calls
    count as their whole budget: `_load_tool_calls` keeps their list within it."""
    messages = response["messages"]
    rest = {**response, "messages": []}
    tools_bound = 0
    if "tool_calls" in response:
        rest["tool_calls"] = []
        tools_bound = TOOL_CALLS_MAX_BYTES - 2
    return (
        _json_bytes(rest)
        + tools_bound
        + max(len(messages) - 1, 0)
        + sum(
            _MESSAGE_ITEM_BYTES
            + len(item["role"])
            + len(item["created_at"])
            + JSON_CHAR_MAX_BYTES * len(item["content"])
            for item in messages
        )
    )


def _fit(
    response: dict[str, Any],
    items: dict[int, dict[str, Any]],
    kept: list[int],
    window: _Window,
) -> dict[str, Any]:
    """Fill in `response`'s messages and flags; while it would pass its cap, drop tool calls
    first, then the kept messages farthest from the anchor (the end of `kept`)."""
    tool_calls = response.get("tool_calls", [])
    while True:
        response["messages"] = [items[i] for i in sorted(kept)]
        response["has_more_before"] = window.has_more_before or min(kept, default=0) > 0
        response["has_more_after"] = (
            window.has_more_after or max(kept, default=-1) < len(window.rows) - 1
        )
        if _read_bound(response) <= READ_RESPONSE_MAX_BYTES:
            return response
        if _json_bytes(response) <= READ_RESPONSE_MAX_BYTES:
            return response
        response["truncated"] = True
        if tool_calls:
            tool_calls.pop()
        else:
            kept.pop()


def read_thread_messages(
    uid: int | str,
    thread_id: str,
    *,
    message_id: int | None = None,
    limit: int = 20,
    include_tools: bool = False,
) -> dict[str, Any]:
    """Visible messages of one visible thread: the latest, or a window around `message_id`.

    Two SQL queries (thread with anchor, then messages), a third for tool calls only with
    `include_tools`. Contents are cut to their budgets; when the response would pass its cap,
    tool calls go first, then the messages farthest from the anchor.
    """
    owner = _uid(uid)
    thread_id = _text(thread_id, "thread_id")
    anchor_id = _message_id(message_id)
    limit = _limit(limit, READ_LIMIT_MAX)
    if not isinstance(include_tools, bool):
        raise HistoryQueryError("include_tools must be a boolean")

    with connection.cursor() as cursor:
        thread, anchor_at = _load_thread(cursor, owner, thread_id, anchor_id)
        window = _load_window(cursor, thread.pk, anchor_id, anchor_at, limit)
        items, kept, truncated = _budget_contents(window)
        tool_calls = None
        if include_tools:
            tool_calls = _load_tool_calls(cursor, [window.rows[i][0] for i in kept])
    title, title_cut = _title(thread.title_head)
    response: dict[str, Any] = {
        "thread_id": thread_id,
        "title": title,
        "messages": [],
        "has_more_before": False,
        "has_more_after": False,
        "truncated": truncated or title_cut,
    }
    if tool_calls is not None:
        response["tool_calls"], tools_cut = tool_calls
        response["truncated"] = response["truncated"] or tools_cut
    return _fit(response, items, kept, window)
