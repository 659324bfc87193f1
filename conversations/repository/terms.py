"""Query terms: how the text a model sends (keywords, or the user's question as written) becomes
the terms a history search looks for, and how each term is found.

A model often sends the question itself ("When did Caroline go to the support group?"), so any
text is a query: punctuation around words is dropped, a `"quoted phrase"` stays one term, CJK
text is split at single-character function words, and stop words of both languages are dropped
unless nothing else is left. Choosing at most `QUERY_TERMS_MAX` of many needs the user's own
messages, so it is the search statement's caller that does it (`search.py`).
Standard library only: no segmenter or stemmer package, the rules are spelled out here.
"""

import unicodedata
from typing import NamedTuple

QUERY_TERMS_MAX = 8
# A run of this many letters or digits has a trigram, so the trigram index serves its term.
TRIGRAM_TERM_MIN_CHARS = 3
# Where the CJK-range characters begin (U+2E80, as the bigram index's SQL function has it).
CJK_RANGE_START = 0x2E80
# What a word is made of (Unicode categories: letters, decimal digits), for the word index.
WORD_CATEGORIES = frozenset({"Lu", "Ll", "Lt", "Lo", "Nd"})
# Word endings a term of letters is cut at to find its other forms (longest first), leaving
# at least STEM_MIN_CHARS: "allergy" and "allergic" both find "allerg", "married" and "marry"
# both find "marr".
STEM_SUFFIXES = (
    "ations", "ation", "ments", "ment", "ings", "ing", "ions", "ion", "ies", "ied", "ers", "er",
    "ed", "es", "ic", "ly", "s", "y", "e",
)  # fmt: skip
STEM_MIN_CHARS = 4
# A run of this many CJK characters or more is also found by half its two-character pieces
# ("妹妹婚礼" in "妹妹的婚礼": 妹妹 and 婚礼 of 妹妹, 妹婚, 婚礼; "仓鼠叫" by 仓鼠).
CJK_RUN_MIN_CHARS = 3
# A longer run is cut into pieces of at most this many characters, each a term: the pieces of
# a run are checked on every message walked, so a 256-character run would cost 255 of them.
CJK_RUN_MAX_CHARS = 6

# English words a question is made of rather than what it asks about (compared lowercased).
ENGLISH_STOP_WORDS = frozenset(
    """a about above after again against all am an and any are aren't as at be because been before
    being below between both but by can can't cannot could couldn't did didn't do does doesn't
    doing don't down during each ever few for from further had hadn't has hasn't have haven't
    having he he'd he'll he's her here here's hers herself him himself his how how's i i'd i'll
    i'm i've if in into is isn't it it's its itself just let's me might more most must mustn't
    my myself no nor not now of off on once only or other ought our ours ourselves out over own
    please recall remember remind same shall shan't she she'd she'll she's should shouldn't so
    some such tell than that that's the their theirs them themselves then there there's these
    they they'd they'll they're they've this those through to too under until up us very was
    wasn't we we'd we'll we're we've were weren't what what's when when's where where's which
    while who who's whom why why's will with won't would wouldn't you you'd you'll you're
    you've your yours yourself yourselves""".split()  # noqa: SIM905
)
# Single CJK characters that only hold a sentence together: a run of CJK text is cut at each
# (after CHINESE_STOP_WORDS are taken out), so "我妹妹的婚礼是哪天" asks about 妹妹 and 婚礼.
# Characters that often begin or end a word of their own (过 in 过敏, 地 in 地铁) are not here.
CHINESE_STOP_CHARS = frozenset("的了是在吗呢吧啊呀嘛我他她它们和也还把被给这那哪谁个着")
# Words of several CJK characters a question is made of, taken out of a run before it is cut
# (longest first, so 什么时候 goes before 什么 and 时候).
CHINESE_STOP_WORDS = tuple(
    sorted(
        [
            "什么时候",
            "为什么",
            "怎么样",
            "是不是",
            "有没有",
            "什么",
            "时候",
            "哪里",
            "哪儿",
            "哪天",
            "哪个",
            "哪些",
            "怎么",
            "怎样",
            "多少",
            "几点",
            "几号",
            "我们",
            "你们",
            "他们",
            "她们",
            "咱们",
            "自己",
            "一下",
            "还是",
            "但是",
            "是否",
            "就是",
            "不是",
            "可是",
            "于是",
            "可以",
            "知道",
            "记得",
            "告诉",
            "之前",
            "以前",
            "这个",
            "那个",
            "一个",
            "这里",
            "那里",
            "这些",
            "那些",
            "请问",
        ],
        key=len,
        reverse=True,
    )
)
# A question that asks for a date or a time: any of these words (English: whole words, in
# order; Chinese: anywhere). Its answer holds a date or a time (`DATE_OR_TIME`).
WHEN_WORDS = (
    ("when",), ("what", "time"), ("what", "date"), ("what", "day"), ("which", "day"),
    ("which", "date"), ("what", "year"), ("which", "year"), ("what", "month"),
)  # fmt: skip
WHEN_CHINESE = ("什么时候", "几点", "哪天", "几号", "哪一天", "什么时间", "几月", "哪年", "星期几")
# A date or a time in a message's cased text (a PostgreSQL regular expression): a digit, a
# weekday, month or part of a day, or their Chinese forms (三月, 十二号, 四点, 周五, 昨天, 下午).
DATE_OR_TIME = (
    r"[0-9]|\m(MONDAY|TUESDAY|WEDNESDAY|THURSDAY|FRIDAY|SATURDAY|SUNDAY|JANUARY|FEBRUARY"
    r"|MARCH|APRIL|MAY|JUNE|JULY|AUGUST|SEPTEMBER|OCTOBER|NOVEMBER|DECEMBER|TODAY|TOMORROW"
    r"|YESTERDAY|TONIGHT|WEEKEND|MORNING|AFTERNOON|EVENING|NOON|MIDNIGHT)\M"
    r"|[一二三四五六七八九十两]+[月号日点]|[周礼]拜|周[一二三四五六日末]|星期|[昨今明后前]天"
    r"|上午|下午|中午|晚上|早上|凌晨"
)
# Punctuation that belongs to the term it ends or begins (`100%`, `C#`, `@name`), never
# dropped as punctuation around a word.
TERM_MARKS = frozenset("%#@&*/\\_")
# What a possessive adds to an English word ("Caroline's" is about Caroline).
POSSESSIVES = ("'s", "\u2019s")


def is_cjk(text: str) -> bool:
    """Whether every character of `text` is a caseless CJK-range one."""
    return (
        all(ord(char) >= CJK_RANGE_START for char in text) and text.upper() == text == text.lower()
    )


def is_cjk_pair(text: str) -> bool:
    """Whether `text` is two caseless CJK-range characters, one element of `CjkBigrams`."""
    return len(text) == 2 and is_cjk(text)


def like_pattern(text: str) -> str:
    """`text` as a LIKE pattern matching it literally anywhere (backslash is LIKE's escape)."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _is_punctuation(char: str) -> bool:
    """Punctuation a word is wrapped in (`?`, `,`, `(`, `“`...): Unicode's, but for the marks
    that are part of a term (`100%`, `C#`, `@name`, `R&D`, `snake_`, `c:\\`)."""
    return unicodedata.category(char).startswith("P") and char not in TERM_MARKS


def _is_cjk_word_char(char: str) -> bool:
    """A character of a CJK run: caseless CJK-range and not punctuation (not `，` or `？`)."""
    return is_cjk(char) and not _is_punctuation(char)


def _strip_punctuation(text: str) -> str:
    start, end = 0, len(text)
    while start < end and _is_punctuation(text[start]):
        start += 1
    while end > start and _is_punctuation(text[end - 1]):
        end -= 1
    return text[start:end]


def _cjk_pieces(run: str) -> list[str]:
    """A run of CJK characters without its stop words: CHINESE_STOP_WORDS taken out, then cut
    at each of CHINESE_STOP_CHARS, and into pieces of at most CJK_RUN_MAX_CHARS."""
    for word in CHINESE_STOP_WORDS:
        run = run.replace(word, " ")
    for char in CHINESE_STOP_CHARS:
        run = run.replace(char, " ")
    return [
        piece[start : start + CJK_RUN_MAX_CHARS]
        for piece in run.split()
        for start in range(0, len(piece), CJK_RUN_MAX_CHARS)
    ]


class _Piece(NamedTuple):
    text: str
    stop: bool  # a stop word, dropped unless the query has nothing else


def _word_pieces(token: str) -> list[_Piece]:
    """One whitespace-separated token as terms: its CJK runs (cut at stop characters) and its
    other runs, each without the punctuation around it and a possessive `'s`; a token that is
    only punctuation (`...`, `%%%`) is one term as written."""
    runs: list[tuple[bool, str]] = []  # (is a CJK run, text)
    for char in token:
        cjk = _is_cjk_word_char(char)
        if runs and runs[-1][0] == cjk:
            runs[-1] = (cjk, runs[-1][1] + char)
        else:
            runs.append((cjk, char))
    pieces: list[_Piece] = []
    for cjk, text in runs:
        if cjk:
            kept = _cjk_pieces(text)
            pieces += [_Piece(piece, False) for piece in kept]
            if not kept:  # only stop words: kept in case nothing else is left
                pieces.append(_Piece(text, True))
            continue
        word = _strip_punctuation(text)
        for possessive in POSSESSIVES:
            if word.lower().endswith(possessive) and len(word) > len(possessive):
                word = _strip_punctuation(word[: -len(possessive)])
        if word:
            pieces.append(_Piece(word, word.lower() in ENGLISH_STOP_WORDS))
    if not pieces and token:
        pieces.append(_Piece(token, False))  # only punctuation: searched as written
    return pieces


def query_terms(query: str) -> list[str]:
    """The query's distinct terms in order (the first spelling of a term given twice in other
    cases): a pair of double quotes keeps what it encloses as one term (its ends stripped), a
    last `"` without a partner is dropped, everything else is split on whitespace into words
    (`_word_pieces`). Stop words are dropped unless nothing else is left. Empty when the query
    holds no term at all (blank, or empty quotes only)."""
    parts = query.split('"')
    if len(parts) % 2 == 0:  # an odd number of quotes: the last one is dropped
        parts[-2:] = [parts[-2] + " " + parts[-1]]
    pieces: list[_Piece] = []
    for index, part in enumerate(parts):
        if index % 2:  # between a pair of quotes: one term as written
            pieces += [_Piece(part.strip(), False)] if part.strip() else []
        else:
            for token in part.split():
                pieces += _word_pieces(token)
    kept = [piece.text for piece in pieces if not piece.stop] or [p.text for p in pieces]
    distinct: dict[str, str] = {}
    for text in kept:
        distinct.setdefault(text.upper(), text)
    return list(distinct.values())


def asks_when(query: str) -> bool:
    """Whether the query asks for a date or a time ("When is the book club?", "几点开始？")."""
    words = [_strip_punctuation(word).lower() for word in query.split()]
    for when in WHEN_WORDS:
        if any(tuple(words[i : i + len(when)]) == when for i in range(len(words))):
            return True
    return any(phrase in query for phrase in WHEN_CHINESE)


def has_trigram(text: str) -> bool:
    """Whether `text` holds a run of TRIGRAM_TERM_MIN_CHARS letters or digits: pg_trgm takes
    trigrams of a LIKE pattern only from such runs, so only then can its index narrow it."""
    run = 0
    for char in text:
        run = run + 1 if char.isalnum() else 0
        if run >= TRIGRAM_TERM_MIN_CHARS:
            return True
    return False


def stem(term: str) -> str | None:
    """A term of ASCII letters cut at its first STEM_SUFFIXES ending that leaves at least
    STEM_MIN_CHARS, so that other forms of the word are found; None when none applies."""
    if not (term.isascii() and term.isalpha()) or len(term) <= STEM_MIN_CHARS:
        return None
    word = term.lower()
    for suffix in STEM_SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= STEM_MIN_CHARS:
            return term[: len(word) - len(suffix)]
    return None


def cjk_bigrams(term: str) -> list[str] | None:
    """The distinct two-character pieces of a run of CJK_RUN_MIN_CHARS or more CJK characters,
    overlapping (`妹妹婚礼`: 妹妹, 妹婚, 婚礼); None for any other term."""
    if len(term) < CJK_RUN_MIN_CHARS or not is_cjk(term):
        return None
    return list(dict.fromkeys(term[i : i + 2] for i in range(len(term) - 1)))


class Term(NamedTuple):
    """A distinct term of a query and how the search statement finds it."""

    bare: str  # as written
    literal: str  # what its other forms (and itself) hold: its stem, or itself
    anchor: str  # what a match of another form is placed by
    grams: list[str] | None  # a CJK run's bigrams, half of which are another form of it
    lookup: str | None  # LIKE pattern the trigram index serves for its candidates
    lookup_pairs: list[str]  # CJK pairs the bigram index serves (any of them) for them
    word: str | None  # prefix query the word index serves for its own candidates instead

    @property
    def form(self) -> str:
        """`literal` as a LIKE pattern: the term in any of its forms."""
        return like_pattern(self.literal)

    @property
    def served(self) -> bool:
        """Whether an index (trigrams or CJK bigrams) finds the messages with it."""
        return self.lookup is not None or bool(self.lookup_pairs)


def is_word(text: str) -> bool:
    """Whether `text` is one word to PostgreSQL's text search parser: letters and digits only
    (Unicode's), none from the CJK ranges (the parser keeps a CJK run whole, so its pieces are
    no words of it)."""
    return bool(text) and all(
        unicodedata.category(char) in WORD_CATEGORIES and ord(char) < CJK_RANGE_START
        for char in text
    )


def word_prefix(text: str) -> str | None:
    """The `to_tsquery` text of the words that begin with `text` (`marr:*`, for "married" and
    "marry"), for a term of TRIGRAM_TERM_MIN_CHARS or more that `is_word`; None otherwise."""
    if len(text) < TRIGRAM_TERM_MIN_CHARS or not is_word(text):
        return None
    return f"{text}:*"


def term(text: str) -> Term:
    """How a term is found: as written; also by its `stem` (a word of letters) or by half of
    its `cjk_bigrams` (a CJK run), its other forms; through which index, if any."""
    stemmed, grams = stem(text), cjk_bigrams(text)
    if stemmed is not None:  # a stem has a trigram whenever its word has one
        return Term(text, stemmed, stemmed, None, like_pattern(stemmed), [], word_prefix(stemmed))
    if grams is not None:
        return Term(text, text, grams[0], grams, None, grams, None)
    if is_cjk_pair(text):
        return Term(text, text, text, None, None, [text], None)
    lookup = like_pattern(text) if has_trigram(text) else None
    return Term(text, text, text, None, lookup, [], word_prefix(text))
