import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from conversations.utils.string_utils import is_storable_text, truncate_utf8

# Text mixing 1- to 4-byte code points, combining marks and ZWJ emoji sequences.
SAMPLES = ["a", "é", "e\u0301", "中", "€", "😀", "👩\u200d👩\u200d👧", "🏳️\u200d🌈", "\n", '"', "\\"]
mixed_text = st.one_of(
    st.text(),
    st.lists(st.sampled_from(SAMPLES), max_size=40).map("".join),
)


@given(text=mixed_text, max_bytes=st.integers(min_value=0, max_value=200))
@example(text="😀", max_bytes=3)
@example(text="e\u0301", max_bytes=2)
def test_truncate_utf8_returns_the_longest_fitting_prefix(text, max_bytes):
    cut, truncated = truncate_utf8(text, max_bytes)
    assert text.startswith(cut)
    assert len(cut.encode("utf-8")) <= max_bytes
    assert truncated == (cut != text)
    if truncated:
        # One more code point would not fit: this is the longest prefix.
        assert len(text[: len(cut) + 1].encode("utf-8")) > max_bytes
    # The cut is between code points: re-encoding gives a byte prefix of the original.
    assert text.encode("utf-8").startswith(cut.encode("utf-8"))


@pytest.mark.parametrize(
    ("text", "max_bytes", "expected"),
    [
        ("abc", 3, ("abc", False)),
        ("abc", 2, ("ab", True)),
        ("中文", 5, ("中", True)),
        ("😀x", 3, ("", True)),
        ("😀x", 4, ("😀", True)),
        ("e\u0301", 2, ("e", True)),
        ("👩\u200d👧", 5, ("👩", True)),
        ("", 0, ("", False)),
    ],
)
def test_truncate_utf8_cuts_only_between_code_points(text, max_bytes, expected):
    assert truncate_utf8(text, max_bytes) == expected


def test_truncate_utf8_rejects_a_negative_budget():
    with pytest.raises(ValueError):
        truncate_utf8("abc", -1)


def test_truncate_utf8_handles_huge_text_by_its_prefix():
    text = "字" * 5_000_000
    cut, truncated = truncate_utf8(text, 10)
    assert (cut, truncated) == ("字" * 3, True)


@pytest.mark.parametrize(
    ("text", "storable"),
    [("plain", True), ("中文 😀", True), ("", True), ("a\x00b", False), ("\ud800", False)],
)
def test_is_storable_text_refuses_nul_and_lone_surrogates(text, storable):
    assert is_storable_text(text) is storable
