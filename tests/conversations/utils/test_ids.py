import pytest

from conversations.utils.ids import parse_uid


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (7, 7),
        ("7", 7),
        ("07", None),
        (" 7", None),
        ("+7", None),
        ("\u0667", None),
        ("7_0", None),
        ("-7", None),
        (0, None),
        (True, None),
        (None, None),
        (7.0, None),
    ],
)
def test_parse_uid_accepts_only_a_key_or_its_canonical_digits(value, expected):
    assert parse_uid(value) == expected
