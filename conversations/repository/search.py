"""History search: which of a user's visible messages best match a query, and how each is shown.

The ranking's constants (how many messages a search walks, how many candidates it keeps, the
BM25 and proximity weights) and the Python around the one search statement: the query's terms
become its parameters, the rows it returns become hits cut to their snippets and kept within
the response's budget. The statement itself, and what each constant does in it, is in
`sql.py`; a query's terms in `terms.py`.
"""

from datetime import date
from typing import Any

from django.db import connection
from django.db.backends.utils import CursorWrapper

from conversations.repository.arguments import (
    QUERY_MAX_CHARS,
    HistoryQueryError,
    check_limit,
    check_text,
    check_time_bound,
    check_uid,
)
from conversations.repository.budgets import (
    SEARCH_LIMIT_MAX,
    SEARCH_RESPONSE_MAX_BYTES,
    SNIPPET_LEAD_BYTES,
    SNIPPET_MAX_BYTES,
    TITLE_MAX_BYTES,
    cut_title,
    json_bytes,
    take_within,
)
from conversations.repository.sql import SEARCH_SQLS, TERM_COUNTS_SQL, fetch
from conversations.repository.terms import (
    DATE_OR_TIME,
    QUERY_TERMS_MAX,
    Term,
    asks_when,
    query_terms,
    term,
)
from conversations.utils.invisible_text import escape_invisible_within
from conversations.utils.string_utils import truncate_utf8

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
# Of the window's messages with some of the terms, at most this many are candidates: those
# whose terms found weigh most together (their BM25 weights summed), then the newest. Scoring a
# candidate costs more than finding it (a long question's frequent words are in most of the
# window: 770 candidates took 28 ms to score at 1M messages).
WINDOW_CANDIDATES = 50
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


def _drivers(found: list[Term], hits: list[int]) -> list[Term]:
    """The trigram terms that drive the step with every term, given each term's matches among
    the newest messages: as the statement's own `filtered` step chooses (see `sql.py`), when
    some index-served term is rare there, only the trigram term found least (the first on a
    tie) and only if it is rare itself; else every trigram term. (A CJK run of three or more
    characters counts here as a whole, in the statement by half its pieces: with one, the two
    may choose differently. Which terms drive changes the cost, never the result.)"""
    counted = list(zip(found, hits, strict=True))
    if min((h for t, h in counted if t.served), default=FREQUENT_TERM_HITS) >= FREQUENT_TERM_HITS:
        return [t for t in found if t.lookup is not None]
    trigram = [(h, n) for n, (t, h) in enumerate(counted) if t.lookup is not None]
    least, n = min(trigram, default=(FREQUENT_TERM_HITS, -1))
    return [found[n]] if least < FREQUENT_TERM_HITS else []


def _lookups(found: list[Term], hits: list[int]) -> list[bool]:
    """Which terms' own candidates to look up, given each term's matches among the newest
    messages: the RARE_LOOKUPS index-served terms found least there (the first on a tie), if
    found in fewer than FREQUENT_TERM_HITS, as the statement would choose them. The
    statement's count of a CJK run is of half its pieces, which can be more than `hits` (of the
    run whole): a query with one keeps every term that may be among them, and the statement
    still chooses (`chosen` is false)."""
    counted = list(zip(found, hits, strict=True))
    rare = [t.served and h < FREQUENT_TERM_HITS for t, h in counted]
    if any(t.grams for t in found):
        return [r or bool(t.grams) for r, t in zip(rare, found, strict=True)]
    least = sorted((min(h, FREQUENT_TERM_HITS), n) for n, (t, h) in enumerate(counted) if t.served)
    chosen = {n for _, n in least[:RARE_LOOKUPS]}
    return [r and n in chosen for n, r in enumerate(rare)]


def _term_params(found: list[Term], hits: list[int] | None = None) -> dict[str, Any]:
    """The search statement's term parameters (see the comment above the template, in
    `sql.py`): each distinct term as written, its form, anchor and bigrams, its trigram slot
    and whether an index serves it; for the step with every term, the forms the trigram index
    serves in their slots, the CJK pairs and each CJK run's bigrams the bigram index serves,
    and the forms only checked (every pattern's when one may be left to the filter, else those
    no index serves); for the rare terms' candidates, each term's own lookup. The unused
    conditions NULL.

    Given each term's matches among the newest messages (`hits`, counted already to choose
    the terms), which trigram terms drive the step with every term is chosen here
    (`_drivers`), not in the statement: the others' slots stay NULL, so the statement is
    planned without them and each message the index finds is not cased once for each of
    them (eight slots, seven of them '%': 4 ms of a 12-word question at 1M messages); and the
    terms whose own candidates the statement would not look up (`_lookups`) get no lookup to
    plan."""
    trigram = [t for t in found if t.lookup is not None]
    pairs = [t.bare for t in found if t.grams is None and t.lookup_pairs]
    unserved = [t for t in found if not t.served]
    # Only a trigram term with another index-served term beside it can be left to the filter.
    probed = bool(trigram) and len(found) - len(unserved) > 1
    drivers = trigram if hits is None else _drivers(found, hits)
    looked_up = [True] * len(found) if hits is None else _lookups(found, hits)
    params: dict[str, Any] = {}
    for n in range(1, QUERY_TERMS_MAX + 1):
        params[f"pattern_{n}"] = drivers[n - 1].lookup if n <= len(drivers) else None
        each = found[n - 1] if n <= len(found) else None
        params[f"grams_{n}"] = _quoted_array_text(each.grams or []) if each else None
        # A word's own candidates through the word index, any other term's through its own.
        looked = each if each and looked_up[n - 1] else None
        params[f"like_{n}"] = looked.lookup if looked and not looked.word else None
        params[f"words_{n}"] = looked.word if looked else None
        params[f"pairs_{n}"] = _quoted_array_text(looked.lookup_pairs) if looked else None
    slots = [str(drivers.index(t) + 1) if t in drivers else "NULL" for t in found]
    grams = [_grams_text(t) for t in found]
    checked = [t.form for t in (found if probed else unserved) if t.grams is None]
    return {
        **params,
        "bares": _quoted_array_text([t.bare for t in found]),
        "literals": _quoted_array_text([t.literal for t in found]),
        "anchors": _quoted_array_text([t.anchor for t in found]),
        "grams": "{" + ",".join(grams) + "}",
        "slots": "{" + ",".join(slots) + "}",
        "served": "{" + ",".join("t" if t.served else "f" for t in found) + "}",
        "pairs": _quoted_array_text(pairs),
        "checked": _quoted_array_text(checked),
        "overlap": any(t.grams for t in found),
        "indexed": len(unserved) < len(found),
        "several": len(found) > 1,
        "driven": hits is not None,
        # The lookups above are exactly the statement's choice, made from the same counts the
        # eight terms were kept by (one moment for every choice of a long question).
        "chosen": hits is not None and not any(t.grams for t in found),
    }


def _most_informative(
    cursor: CursorWrapper, owner: int, found: list[Term], since: str | None, until: str | None
) -> tuple[list[int], list[int]]:
    """Which QUERY_TERMS_MAX of the terms `found` to keep (their indexes, in query order) and
    the matches of each among the newest messages (up to COUNTED_HITS): the terms found in none
    of the user's visible messages are left out first (the last first), then the most frequent
    among the newest of them (`TERM_COUNTS_SQL`; the later first on a tie)."""
    rows = fetch(
        cursor,
        TERM_COUNTS_SQL,
        {
            "owner": owner,
            "since": since,
            "until": until,
            "window": SEARCH_WINDOW,
            "probes": QUERY_TERMS_MAX,
            "counted_hits": COUNTED_HITS,
            "literals": _quoted_array_text([t.literal for t in found]),
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
    left_out = {n for n, _, _ in first_left_out[: len(found) - QUERY_TERMS_MAX]}
    kept = [row for row in rows if row[0] not in left_out]
    return [n - 1 for n, _, _ in kept], [hits for _, hits, _ in kept]


def _snippet(window: str, match_offset: int) -> tuple[str, int]:
    """Up to SNIPPET_MAX_BYTES of `window` around the match; returns it and its start offset."""
    if window.isascii():  # one byte per character: plain slicing is the byte cut
        start = max(match_offset - SNIPPET_LEAD_BYTES, 0)
        return window[start : start + SNIPPET_MAX_BYTES], start
    lead, _ = truncate_utf8(window[:match_offset][::-1], SNIPPET_LEAD_BYTES)
    lead = lead[::-1]  # reversed code points: the cut keeps the end nearest the match
    body, _ = truncate_utf8(window[match_offset:], SNIPPET_MAX_BYTES - len(lead.encode("utf-8")))
    return lead + body, match_offset - len(lead)


_EMPTY_SEARCH_BYTES = json_bytes({"results": [], "truncated": False})


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
    owner = check_uid(uid)
    query = check_text(query, "query")
    if len(query) > QUERY_MAX_CHARS:
        raise HistoryQueryError(f"query must be at most {QUERY_MAX_CHARS} characters")
    terms = query_terms(query)
    if not terms:
        raise HistoryQueryError("query must contain a term (it is blank)")
    limit = check_limit(limit, SEARCH_LIMIT_MAX)
    since_at, until_at = check_time_bound(since, "since"), check_time_bound(until, "until")
    if since_at is not None and until_at is not None and since_at >= until_at:
        raise HistoryQueryError("since must be earlier than until")

    found = [term(text) for text in terms]
    with connection.cursor() as cursor:
        hits = None
        if len(found) > QUERY_TERMS_MAX:
            kept, hits = _most_informative(cursor, owner, found, since_at, until_at)
            terms, found = [terms[n] for n in kept], [found[n] for n in kept]
        params = {
            "owner": owner,
            "limit": limit,
            "since": since_at,
            "until": until_at,
            "window": SEARCH_WINDOW,
            "frequent_hits": FREQUENT_TERM_HITS,
            "candidates": SEARCH_CANDIDATES,
            "window_candidates": WINDOW_CANDIDATES,
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
            **_term_params(found, hits),
        }
        rows = fetch(cursor, SEARCH_SQLS[len(terms) - 1], params)

    hits: list[dict[str, Any]] = []
    for row in rows:
        thread_id, title_head, message_id, role, created_at, window, match_at, chars, found = row
        window_at = max(match_at - SNIPPET_LEAD_BYTES, 1)
        snippet, offset = _snippet(window, match_at - window_at)
        first = window_at + offset  # 1-based position of the snippet in the content
        title, title_cut = cut_title(title_head)
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
    results, dropped = take_within(hits, SEARCH_RESPONSE_MAX_BYTES - _EMPTY_SEARCH_BYTES)
    return {"results": results, "truncated": dropped or any(h["truncated"] for h in results)}
