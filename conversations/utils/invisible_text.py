"""Text a person cannot see: finding it, showing it escaped, and normalising it away for checks.

Some characters are invisible on the page but read by a model: Unicode tag characters
(U+E0000-U+E007F) spell out whole instructions ("ASCII smuggling"), bidi embeddings, overrides
and isolates reorder what a person sees, and zero-width characters split a word so that a
pattern no longer matches it. `INVISIBLE_CHARACTERS` is the set memory never takes from an
agent and never shows a model raw: `invisible_characters` finds them (by their `U+XXXX` names,
for a refusal or a warning), `escape_invisible` writes each as a visible `\\u{XXXX}`.
ZWJ and ZWNJ (U+200D, U+200C) are not in it: emoji sequences and Persian need them.

`folded_for_detection` is the text a detector should look at: NFKC (full-width and other
compatibility forms become plain letters and digits), every default-ignorable code point
removed (Unicode's own list: zero-width characters and joiners, word joiner, soft hyphen, bidi
controls, variation selectors, tag characters, ...), and the Cyrillic and Greek letters that
look like Latin ones (Unicode's confusables for those scripts) folded to them. It keeps every
line break, so a finding's line number is the same in the original text.

A leaf: it imports nothing of either app.
"""

import re
import unicodedata

# What memory never takes from an agent and never shows a model raw.
INVISIBLE_CHARACTERS = re.compile(
    "[\U000e0000-\U000e007f\u202a-\u202e\u2066-\u2069\u200b\u2060\ufeff\u180e]"
)

# Unicode's Default_Ignorable_Code_Point (DerivedCoreProperties.txt): characters a renderer
# shows as nothing, removed before a text is checked for a credential. It holds ZWJ/ZWNJ too.
_DEFAULT_IGNORABLE = re.compile(
    "[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e"
    "\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8\U0001bca0-\U0001bca3"
    "\U0001d173-\U0001d17a\U000e0000-\U000e0fff]"
)

# Cyrillic and Greek letters drawn like Latin ones (the single-letter entries of Unicode's
# confusables.txt from those scripts to Latin), folded so that "pаssword" with a Cyrillic а is
# "password" to a detector.
_LOOK_ALIKES = str.maketrans(
    {
        # Cyrillic small and capital letters
        "а": "a",
        "е": "e",
        "һ": "h",
        "і": "i",
        "ј": "j",
        "о": "o",
        "р": "p",
        "с": "c",
        "ԛ": "q",
        "ѕ": "s",
        "у": "y",
        "ԝ": "w",
        "х": "x",
        "ԁ": "d",
        "ӏ": "l",
        "А": "A",
        "В": "B",
        "Е": "E",
        "Н": "H",
        "І": "I",
        "Ј": "J",
        "К": "K",
        "М": "M",
        "О": "O",
        "Р": "P",
        "С": "C",
        "Ѕ": "S",
        "Т": "T",
        "Х": "X",
        "Ү": "Y",
        "Ԝ": "W",
        "Ԛ": "Q",
        "Ӏ": "I",
        # Greek small and capital letters
        "α": "a",
        "ι": "i",
        "κ": "k",
        "ν": "v",
        "ο": "o",
        "ρ": "p",
        "τ": "t",
        "υ": "u",
        "χ": "x",
        "Α": "A",
        "Β": "B",
        "Ε": "E",
        "Ζ": "Z",
        "Η": "H",
        "Ι": "I",
        "Κ": "K",
        "Μ": "M",
        "Ν": "N",
        "Ο": "O",
        "Ρ": "P",
        "Τ": "T",
        "Υ": "Y",
        "Χ": "X",
    }
)


def _code_point(char: str) -> str:
    return f"U+{ord(char):04X}"


def invisible_characters(text: str) -> list[str]:
    """The distinct `INVISIBLE_CHARACTERS` in `text`, as `U+XXXX`, in the order they first
    appear (empty when there is none)."""
    return list(dict.fromkeys(_code_point(m.group()) for m in INVISIBLE_CHARACTERS.finditer(text)))


def escape_invisible(text: str) -> str:
    """`text` with each of `INVISIBLE_CHARACTERS` written as `\\u{XXXX}`: what a model is
    shown of a stored text, so a hidden instruction is visible text, never one it follows."""
    if not INVISIBLE_CHARACTERS.search(text):
        return text
    return INVISIBLE_CHARACTERS.sub(lambda m: f"\\u{{{ord(m.group()):X}}}", text)


# An escape a byte cut left unfinished at the end of a text.
_PARTIAL_ESCAPE = re.compile(r"\\u\{[0-9A-F]*$")


def escape_invisible_within(text: str, max_bytes: int) -> tuple[str, bool]:
    """`escape_invisible(text)` cut to at most `max_bytes` of UTF-8 (never inside a code point
    or an escape), and whether anything was cut: the escapes count against a byte budget
    like any other text, so escaping never makes a bounded result larger."""
    escaped = escape_invisible(text)
    encoded = escaped.encode("utf-8")
    if len(encoded) <= max_bytes:
        return escaped, False
    cut = encoded[:max_bytes].decode("utf-8", errors="ignore")
    if escaped is not text:
        cut = _PARTIAL_ESCAPE.sub("", cut)
    return cut, True


def folded_for_detection(text: str) -> str:
    """`text` as a detector should see it: NFKC, default-ignorable characters removed,
    Cyrillic and Greek look-alikes of Latin letters folded to them; line breaks kept."""
    if text.isascii():
        return text
    text = _DEFAULT_IGNORABLE.sub("", unicodedata.normalize("NFKC", text))
    return text.translate(_LOOK_ALIKES)
