"""The credential detector: which lines of a text hold a credential, and of what kind.

Memory never keeps a credential: `remember_memory` refuses content in which this finds one,
and a user's own write is kept with a warning per finding. A finding names its kind and its
1-based line, never the matched text, so neither a refusal nor a warning repeats a secret.

Text is read normalised first (`folded_for_detection`: NFKC, invisible characters removed,
Cyrillic and Greek look-alikes folded), so "pass\u200bword", "ｐａｓｓｗｏｒｄ" and a Cyrillic
"pаssword" are "password". What counts: private keys, tokens and API keys of known formats
(`credential_formats`: detect-secrets' format plugins, called directly, since its `scan_line`
changes process-wide settings and is not thread-safe, and gitleaks' rules for the formats it
lacks), `password: ...` / `密码：...`-style assignments and passwords said in words ("my
password is sunshine", "密码是 woaibeijing"), a value on the line after its word, base64 that
decodes to any of these, payment card numbers (Luhn, on a card brand's prefix and length),
mainland China resident identity numbers (checksum), high-entropy strings next to a credential
word or as an assignment's value, and a bare 4 to 8 digit number near a password or PIN word
(`credential_numbers`: not a year, an amount, a reference or a postal PIN code). A hex string
of digest length right after a hash word (sha256, md5, checksum, commit, ...) is a file's
fingerprint, not a credential.

A model may restate a credential so that none of this sees it any more ("my bank PIN, 4821"
becomes "function 4821"). So the values a text states as credentials can be had too
(`credential_values`, for comparison only), and `stated_credential_in` says whether another
text repeats one of them. A write is judged on the lines it would produce
(`produced_credential`), so a replacement cannot complete a credential from pieces in a file.

A leaf: it imports nothing of the app but its two rule modules.
"""

import base64
import binascii
import math
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum

from detect_secrets.plugins.base import RegexBasedDetector
from django.utils.translation import gettext_noop

from conversations.repository.terms import ENGLISH_STOP_WORDS
from conversations.utils.invisible_text import folded_for_detection
from memory_app.credential_formats import (
    ACCESS_TOKEN_PLUGINS,
    API_KEY_PLUGINS,
    PASSWORD_PLUGINS,
    PRIVATE_KEY_PLUGINS,
)
from memory_app.credential_numbers import (
    PASSWORD_WORD,
    WORD_REACH,
    bare_pins,
    is_postal_pin,
    payment_cards,
    payment_codes,
    resident_ids,
)


class CredentialKind(StrEnum):
    """What a finding looks like; `label` says it in words for a refusal or a warning."""

    PRIVATE_KEY = "private_key"
    API_KEY = "api_key"
    ACCESS_TOKEN = "access_token"
    PASSWORD = "password"
    PAYMENT_CARD = "payment_card"
    RESIDENT_ID = "resident_id"
    SECRET = "secret"

    @property
    def label(self) -> str:
        return _LABELS[self]


# Marked for the catalogue: a refusal a person reads names the kind in their language.
_LABELS = {
    CredentialKind.PRIVATE_KEY: gettext_noop("a private key"),
    CredentialKind.API_KEY: gettext_noop("an API key"),
    CredentialKind.ACCESS_TOKEN: gettext_noop("an access token"),
    CredentialKind.PASSWORD: gettext_noop("a password or PIN"),
    CredentialKind.PAYMENT_CARD: gettext_noop("a payment card number"),
    CredentialKind.RESIDENT_ID: gettext_noop("a resident identity number"),
    CredentialKind.SECRET: gettext_noop("a secret key or token"),
}


@dataclass(frozen=True, order=True)
class CredentialFinding:
    """One credential: its 1-based line and its kind (never its text). A user write's warnings
    use it for a line of invisible characters too (`kind` "invisible characters")."""

    line: int
    kind: CredentialKind | str


@dataclass(frozen=True)
class CredentialValue:
    """One credential's kind and the secret itself, to compare texts with and nothing else:
    `value` is never shown, logged or stored (it is left out of the `repr`), only looked for."""

    kind: CredentialKind
    value: str = field(repr=False)


# The format plugins (`credential_formats`: detect-secrets' and the formats it lacks), by kind.
_FORMAT_PLUGINS: tuple[tuple[RegexBasedDetector, CredentialKind], ...] = (
    *((plugin(), CredentialKind.PRIVATE_KEY) for plugin in PRIVATE_KEY_PLUGINS),
    *((plugin(), CredentialKind.API_KEY) for plugin in API_KEY_PLUGINS),
    *((plugin(), CredentialKind.ACCESS_TOKEN) for plugin in ACCESS_TOKEN_PLUGINS),
    *((plugin(), CredentialKind.PASSWORD) for plugin in PASSWORD_PLUGINS),
)

# Words a secret stands next to. English ones are whole words (`_` and `-` separate them, so
# `api_key` holds two); Chinese ones are matched anywhere.
_CREDENTIAL_WORD = re.compile(
    r"(?<![a-z])(?:api|apikey|auth|bearer|key|keys|passwd|password|passwords|pwd|secret|"
    r"secrets|token|tokens|accesskey|secretkey)(?![a-z])|密钥|秘钥|令牌|密码|口令",
    re.IGNORECASE,
)
# Words a digest follows: a hex string of digest length right after one is a fingerprint.
_HASH_WORD = re.compile(
    r"(?<![a-z])(?:sha-?(?:1|224|256|384|512)|md5|hash|checksum|commit|digest)(?![a-z])|"
    r"哈希|校验和|校验码|摘要",
    re.IGNORECASE,
)
_DIGEST_HEX_LENGTHS = frozenset({32, 40, 56, 64, 96, 128})
# How far before a string its credential or hash word may stand, in characters.
_WORD_REACH = WORD_REACH

# A password-style assignment: the word, optionally "for <something>", a separator, a value.
# After a spoken separator ("is", "是") the value must look like a password (a digit or a
# symbol in it); after `:` or `=` any value of 4 or more characters is one.
_PASSWORD_WORD = PASSWORD_WORD
# What may stand between a password word and its separator: up to three words after "for",
# "of", "to", "on" or "in" ("passcode for my phone is").
_PASSWORD_OF = r"(?:\s+(?:for|of|to|on|in)(?:\s+[^\s:：=]{1,30}){1,3}?)?"
_PASSWORD_ASSIGNMENT = re.compile(
    f"(?P<word>{_PASSWORD_WORD})"
    + _PASSWORD_OF
    + r"\s*(?P<sep>[:=：]|\s(?:is|was)\s|是|为|為|,|，)\s*[:：]?\s*"
    + r"(?P<quote>[\"'“‘])?(?P<value>[\x21-\x7e]{3,})",
    re.IGNORECASE,
)
_SYMBOL_OR_DIGIT = re.compile(r"[0-9\W_]")
# A password said in words after "is" or "是": letters only count too ("my password is
# sunshine", "邮箱密码是 woaibeijing"), unless the English word says something about the
# password instead of being it ("is strong", "is expired", "is case sensitive"): it must end
# its clause, and be none of these words nor a participle or an adverb.
_SPOKEN_SEPARATORS = frozenset({"是", "为", "為"})
_CLAUSE_END = re.compile(r"\s*(?:$|[.,;!?)\"'”’]|\s(?:and|but|so)\s)", re.IGNORECASE)
_NOT_A_PASSWORD = re.compile(
    r"above|also|another|anything|attached|automatic|bad|below|better|blank|broken|changed|"
    r"changing|complex|complicated|correct|default|different|difficult|disabled|easy|empty|"
    r"enabled|encrypted|expired|fine|forgotten|generated|gone|good|great|hard|hashed|here|hers|"
    r"hidden|his|included|incorrect|insecure|invalid|known|locked|long|longer|lost|managed|"
    r"manual|mine|missing|necessary|needed|new|none|not|nothing|now|null|okay|old|optional|ours|"
    r"outdated|personal|private|random|ready|required|reset|right|safe|same|saved|secret|secure|"
    r"sensitive|set|shared|short|shorter|simple|something|stale|still|stored|strong|stronger|"
    r"temporary|that|the|theirs|there|this|unchanged|unique|unknown|unsafe|updated|valid|weak|"
    r"weaker|what|where|which|working|worse|written|wrong|yours",
    re.IGNORECASE,
)
_NOT_A_PASSWORD_ENDINGS = ("ed", "ing", "ly")
# A key = value or key: value whose value may be a secret even without a credential word.
_ASSIGNED_VALUE = re.compile(r"[A-Za-z_][\w.-]{0,40}\s*(?:=|:)\s*[\"']?(?P<value>[^\s\"',;]+)")
# A line that may hold a secret at all: a credential word, or an assignment.
_ASSIGNMENT_OR_WORD = re.compile(_CREDENTIAL_WORD.pattern + r"|[=:]", re.IGNORECASE)
# Strings that may be secrets: runs of the characters tokens are made of.
_TOKEN = re.compile(r"[A-Za-z0-9_\-+/=.~]{8,}")
_HEX = re.compile(r"[0-9a-fA-F]+")


# A secret's shape: letters and digits both, and spread over its alphabet (Shannon entropy in
# bits per character). Next to a credential word a short token is enough; a bare assignment's
# value must be longer and mix cases too (order and tracking codes are upper case and digits).
_NEAR_WORD_MIN_ENTROPY = 2.5
_MIXED_RUN_MIN = 6
_ALNUM_RUN = re.compile(r"[A-Za-z0-9]+")
_ASSIGNED_MIN_LENGTH = 16
_ASSIGNED_MIN_ENTROPY = 3.5


def _entropy(text: str) -> float:
    counts = Counter(text)
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())


def _is_digest(line: str, start: int, token: str) -> bool:
    """A hex string of digest length with a hash word just before it: a fingerprint."""
    return (
        len(token) in _DIGEST_HEX_LENGTHS
        and _HEX.fullmatch(token) is not None
        and _HASH_WORD.search(line, max(0, start - _WORD_REACH), start) is not None
    )


def _looks_random(token: str, *, min_entropy: float) -> bool:
    """Letters and digits (two of each at least) mixed within one run of at least
    `_MIXED_RUN_MIN` characters (so a version, a domain, a brand or a dated reference is not
    one), and spread over its alphabet."""
    mixed = any(
        len(run) >= _MIXED_RUN_MIN
        and sum(c.isalpha() for c in run) >= 2
        and sum(c.isdigit() for c in run) >= 2
        for run in _ALNUM_RUN.findall(token)
    )
    return mixed and _entropy(token) >= min_entropy


def _mixed_case(token: str) -> bool:
    return any(c.islower() for c in token) and any(c.isupper() for c in token)


def _near_word_secrets(line: str) -> Iterator[str]:
    """Each high-entropy string next to a credential word (before or after it), and each strong
    one as an assignment's value; a digest after a hash word is neither."""
    for match in _TOKEN.finditer(line):
        token, start = match.group().strip(".-"), match.start()
        if len(token) < 8 or _is_digest(line, start, token):
            continue
        end = match.end()
        near = _CREDENTIAL_WORD.search(line, max(0, start - _WORD_REACH), start) or (
            _CREDENTIAL_WORD.search(line, end, end + _WORD_REACH)
        )
        if near is not None and _looks_random(token, min_entropy=_NEAR_WORD_MIN_ENTROPY):
            yield token
    for match in _ASSIGNED_VALUE.finditer(line):
        token, start = match.group("value"), match.start("value")
        if (
            len(token) >= _ASSIGNED_MIN_LENGTH
            and _mixed_case(token)
            and _looks_random(token, min_entropy=_ASSIGNED_MIN_ENTROPY)
            and not _is_digest(line, start, token)
        ):
            yield token


def _said_in_words(line: str, match: re.Match[str], value: str) -> bool:
    """Whether a letters-only `value` after "is"/"是" is the password itself: always after
    是 or in quotes; in English when it ends its clause and says nothing about the password."""
    sep = match.group("sep").strip().lower()
    if sep in _SPOKEN_SEPARATORS or match.group("quote"):
        return len(value) >= 4
    word = value.lower()
    return (
        sep in ("is", "was")
        and len(value) >= 4
        and _NOT_A_PASSWORD.fullmatch(word) is None
        and not word.endswith(_NOT_A_PASSWORD_ENDINGS)
        and _CLAUSE_END.match(line, match.start("value") + len(value)) is not None
    )


def _password_assignments(line: str) -> Iterator[str]:
    for match in _PASSWORD_ASSIGNMENT.finditer(line):
        spoken = match.group("sep") not in (":", "=", "：")
        value = match.group("value").rstrip(".,;!?\"')”’")
        if len(value) < 3 or is_postal_pin(line, value):
            continue
        if (
            _SYMBOL_OR_DIGIT.search(value)
            or (not spoken and len(value) >= 4)
            or _said_in_words(line, match, value)
        ):
            yield value


def _format_values(plugin: RegexBasedDetector, line: str) -> list[str]:
    """What a format plugin finds on `line` (nothing, or its captures and its whole matches:
    a capture alone may be a prefix such as `ghp`)."""
    found = list(plugin.analyze_string(line))
    if not any(found):
        return []
    return found + [match.group() for regex in plugin.denylist for match in regex.finditer(line)]


_Formats = tuple[tuple[RegexBasedDetector, CredentialKind], ...]

# Text that may be base64: 16 or more characters of its alphabets (standard or URL-safe).
_BASE64 = re.compile(r"(?<![A-Za-z0-9+/_=-])[A-Za-z0-9+/_-]{16,}={0,2}(?![A-Za-z0-9+/_=-])")


def _base64_text(token: str) -> str | None:
    """What `token` decodes to, if it is base64 of printable UTF-8 text (a digest, a word or
    random bytes is not)."""
    body = token.rstrip("=")
    if len(body) % 4 == 1:
        return None
    padded = body.replace("-", "+").replace("_", "/") + "=" * (-len(body) % 4)
    try:
        text = base64.b64decode(padded, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return text if text.isprintable() else None


def _base64_values(line: str) -> Iterator[CredentialValue]:
    """A credential in the line once a base64 text in it is read decoded ("note:
    bXkgcGFzc3dvcmQgaXMgaHVudGVyMg==" is "note: my password is hunter2"), with the base64 text
    itself as its value: what a later text would repeat. Decoded once, not again."""
    for match in _BASE64.finditer(line):
        decoded = _base64_text(match.group())
        if decoded is None:
            continue
        read = folded_for_detection(line[: match.start()] + decoded + line[match.end() :])
        for found in _line_values(read, _formats_in(read), decode=False):
            yield CredentialValue(found.kind, match.group())


def _line_values(line: str, formats: _Formats, *, decode: bool = True) -> list[CredentialValue]:
    """Every credential on `line` with its value; a near-word secret is looked for only where a
    credential word or an assignment is; base64 in the line is read decoded too (`decode`)."""
    rules: list[tuple[CredentialKind, Iterable[str]]] = [
        *((kind, _format_values(plugin, line)) for plugin, kind in formats),
        (CredentialKind.PASSWORD, _password_assignments(line)),
        (CredentialKind.PASSWORD, payment_codes(line)),
        (CredentialKind.PASSWORD, bare_pins(line)),
        (CredentialKind.PAYMENT_CARD, payment_cards(line)),
        (CredentialKind.RESIDENT_ID, resident_ids(line)),
    ]
    if _ASSIGNMENT_OR_WORD.search(line):
        rules.append((CredentialKind.SECRET, _near_word_secrets(line)))
    found = [CredentialValue(kind, value) for kind, values in rules for value in values]
    if decode:
        found.extend(_base64_values(line))
    return found


def _line_kinds(line: str, formats: _Formats) -> set[CredentialKind]:
    """The kinds on `line`; a near-word secret counts only where nothing else was found (it is
    the weakest rule, and the others name the kind better)."""
    kinds = {found.kind for found in _line_values(line, formats)}
    if len(kinds) > 1:
        kinds.discard(CredentialKind.SECRET)
    return kinds


def _formats_in(text: str) -> _Formats:
    """The format plugins that match somewhere in `text`: only they are tried line by line (their
    patterns take a line break for the space or the start they look for), so a long file costs
    one pass of each plugin, not one per line."""
    return tuple(
        (plugin, kind) for plugin, kind in _FORMAT_PLUGINS if any(plugin.analyze_string(text))
    )


# A line ending in a password word, or in a credential word and its separator: its value may
# stand on the next line ("wifi password is" / "Tr0ub4dor&3").
_DANGLING = re.compile(
    f"(?:{_PASSWORD_WORD}{_PASSWORD_OF}\\s*(?:[:=：]|\\s(?:is|was)|是|为|為)?"
    f"|(?:{_CREDENTIAL_WORD.pattern})\\s*(?:[:=：]|\\s(?:is|was)|是|为|為))\\s*[:：]?\\s*$",
    re.IGNORECASE,
)


def _pieces(text: str) -> Iterator[tuple[tuple[int, ...], str]]:
    """What the detector reads of `text`, normalised (`folded_for_detection`): each line with
    its 1-based number, and each line ending in a password word (`_DANGLING`) joined to the
    next non-empty line, with both numbers."""
    lines = folded_for_detection(text).split("\n")
    for index, line in enumerate(lines):
        yield (index + 1,), line
        if line.strip() and _DANGLING.search(line):
            after = next((n for n in range(index + 1, len(lines)) if lines[n].strip()), None)
            if after is not None:
                yield (index + 1, after + 1), f"{line.rstrip()} {lines[after].strip()}"


def find_credentials(text: str) -> list[CredentialFinding]:
    """Every credential in `text`, one finding per line and kind, in line order.

    Lines are split on `\\n` (a `\\r` before it is part of no credential). The text is
    read normalised (`folded_for_detection`: no invisible characters, no full-width or
    look-alike letters); a credential whose value stands on the line after its word is
    found on both lines.
    """
    formats = _formats_in(folded_for_detection(text))
    return sorted(
        {
            CredentialFinding(line=number, kind=kind)
            for numbers, piece in _pieces(text)
            for kind in _line_kinds(piece, formats)
            for number in numbers
        }
    )


def credential_kinds(text: str) -> list[CredentialKind]:
    """The distinct kinds of credential in `text`, in the order they first appear."""
    return list(dict.fromkeys(finding.kind for finding in find_credentials(text)))


def credential_values(text: str) -> list[CredentialValue]:
    """Every credential `text` states, with its value: a password or PIN, a format plugin's
    match, a near-word secret, a card's digits (without spaces or dashes), a resident identity
    number. For comparison only (`stated_credential_in`): a value must never be shown, logged
    or stored. Read normalised, lines joined to a value on the next, as `find_credentials`."""
    formats = _formats_in(folded_for_detection(text))
    return [found for _, piece in _pieces(text) for found in _line_values(piece, formats)]


# Shorter values are too common to be told from any other word or number.
_STATED_VALUE_MIN_CHARS = 4
# Kinds whose digits are compared with spaces and dashes ignored (written in groups, or not).
_GROUPED_DIGITS = frozenset({CredentialKind.PAYMENT_CARD, CredentialKind.RESIDENT_ID})


def _value_pattern(found: CredentialValue) -> re.Pattern[str]:
    """`found.value` as a whole token (no letter or digit right before or after it), any case;
    a card's or an identity number's digits also in groups."""
    if found.kind in _GROUPED_DIGITS:
        body = "[ -]?".join(map(re.escape, found.value))
    else:
        body = re.escape(found.value)
    return re.compile(rf"(?<![0-9A-Za-z]){body}(?![0-9A-Za-z])", re.IGNORECASE)


def stated_credential_in(content: str, stated_texts: Iterable[str]) -> CredentialKind | None:
    """The kind of a credential that one of `stated_texts` states (`credential_values`) and
    `content` repeats, as a whole token, however the rest is worded ("my bank PIN, 4821"
    stated, "function 4821" repeated); None if it repeats none. Values shorter than four
    characters are not compared; `content` is read normalised."""
    stated = dict.fromkeys(found for text in stated_texts for found in credential_values(text))
    content = folded_for_detection(content)
    for found in stated:
        if len(found.value) >= _STATED_VALUE_MIN_CHARS and _value_pattern(found).search(content):
            return found.kind
    return None


# A stated value's characters (values are printable ASCII once normalised), and a run of its
# letters or digits long enough to look for.
_ASCII_TOKEN = re.compile(r"[\x21-\x7e]+")
_NEEDLE = re.compile(rf"[A-Za-z0-9]{{{_STATED_VALUE_MIN_CHARS},}}")
_EDGE_PUNCTUATION = ".,;:!?\"'()[]{}<>"
# A digit run this long may be a card or an identity number, stated in groups of four.
_GROUPED_RUN_MIN = 8


def repeat_needles(content: str) -> list[str]:
    """Pieces of `content` (normalised, lower case) that a stated value it repeats must share
    with the text stating it: each run of four or more ASCII letters or digits, the first four
    digits of a long digit run (a card stated as "4111 1111 ..."), and a token of four or more
    characters with no such run ("a1!b2@c3"). For finding, cheaply, the few texts
    `stated_credential_in` needs read; never a value itself. English stop words ("remember",
    "that", "please") are no needles: nearly every message of a user holds one, so each would
    have every recent message read and looked through, and no credential is such a word."""
    needles = []
    for token in _ASCII_TOKEN.findall(folded_for_detection(content).lower()):
        if token.strip(_EDGE_PUNCTUATION) in ENGLISH_STOP_WORDS:
            continue
        runs = _NEEDLE.findall(token)
        token = token.strip(_EDGE_PUNCTUATION)
        if not runs and len(token) >= _STATED_VALUE_MIN_CHARS:
            needles.append(token)
        for run in runs:
            needles.append(run)
            if run.isdigit() and len(run) >= _GROUPED_RUN_MIN:
                needles.append(run[:_STATED_VALUE_MIN_CHARS])
    return list(dict.fromkeys(needles))


# Lines of a produced text read around the ones a write changed: a credential's word may
# stand up to this many lines before its value, with blank lines between.
_CONTEXT_LINES = 2


def produced_credential(text: str, start: int, end: int) -> CredentialKind | None:
    """The kind of a credential on a line of `text` that characters `start` to `end` (what a
    write put there) are on, read with the lines around them (a value under its word counts);
    None if there is none. A credential wholly on other lines is not this write's."""
    first = text.count("\n", 0, start)
    last = text.count("\n", 0, max(start, end - 1))
    lines = text.split("\n")
    low = max(0, first - _CONTEXT_LINES)
    window = "\n".join(lines[low : last + _CONTEXT_LINES + 1])
    for finding in find_credentials(window):
        if first <= finding.line - 1 + low <= last:
            return finding.kind
    return None
