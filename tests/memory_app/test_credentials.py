"""The credential detector: each kind found on its line, ordinary facts with long numbers
left alone, findings that never carry the matched text, and the values a text states as
credentials, found again in another text however it is worded."""

import dataclasses

import pytest

from memory_app.credentials import (
    CredentialFinding,
    CredentialKind,
    CredentialValue,
    credential_kinds,
    credential_values,
    find_credentials,
    repeat_needles,
    stated_credential_in,
)

# One example of each kind, as a user might paste it into a chat.
CREDENTIALS = {
    CredentialKind.PRIVATE_KEY: "my server key: -----BEGIN OPENSSH PRIVATE KEY-----",
    CredentialKind.API_KEY: "AWS access key AKIAIOSFODNN7EXAMPLE",
    CredentialKind.ACCESS_TOKEN: "GitHub: ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
    CredentialKind.PASSWORD: "My email password is hunter2",
    CredentialKind.PAYMENT_CARD: "Visa card 4111 1111 1111 1111, expires 09/29",
    CredentialKind.RESIDENT_ID: "身份证号 11010519491231002X",
    CredentialKind.SECRET: "remember my API key: sk-test-4f9a2b7c1d",
}

# The same kinds in other shapes users write them in.
MORE_CREDENTIALS = [
    ("请记住我的邮箱密码：Qw3rty!9", CredentialKind.PASSWORD),
    ("记住我的银行卡密码是 739164", CredentialKind.PASSWORD),
    ("Please store my bank PIN, 4821, so you can remind me later.", CredentialKind.PASSWORD),
    ("db password for staging: s3cr3t-pass", CredentialKind.PASSWORD),
    # What SmolLM2 stored for "记住我的银行卡密码是 739164": the code, without the word.
    (
        "The user remembers that they can use 739164 to pay for a gift card.",
        CredentialKind.PASSWORD,
    ),
    ("backup at https://admin:Tr0ub4dor@backup.example.com", CredentialKind.PASSWORD),
    ("帮我把 AWS 密钥 AKIAIOSFODNN7EXAMPLE 存进记忆里。", CredentialKind.API_KEY),
    ("Stripe: sk_live_4eC39HqLyjWDarjtT1zdp7dc", CredentialKind.API_KEY),
    ("Save this token for later: ghp_8Jk2LmN0pQrS", CredentialKind.SECRET),
    ("令牌 7Fq2Lm9Xz4Rt8Kp1", CredentialKind.SECRET),
    ("Authorization: Bearer 9f8e7d6c5b4a39281706AbCdEf", CredentialKind.SECRET),
    ("DEPLOY_CONFIG=Zk3LmQ9xR2pW7vT4sY8n", CredentialKind.SECRET),
    ("Amex 3782 822463 10005", CredentialKind.PAYMENT_CARD),
    ("银联卡 6212 2612 0200 7281 778", CredentialKind.PAYMENT_CARD),
    ("my ID is 44030419900307107x", CredentialKind.RESIDENT_ID),
]

# Ordinary facts with long numbers, hashes and credential words: none is a credential.
ORDINARY = [
    "Order number 2024112588231 arrives on Friday",
    "淘宝订单号 3587264019283746512，预计周五送达",
    "Tracking: 1Z999AA10123456784",
    "顺丰运单号 SF1402867352179",
    "Phone +86 138 0013 8000",
    "Lives at 221B Baker Street, London NW1 6XE",
    "生日是 1990-03-07，住在上海市浦东新区张江路 88 号",
    "sha256 of backup.tar: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "the key file's md5 is d41d8cd98f00b204e9800998ecf8427e",
    "commit 3f2a9c1d0b7e6f5a4c3b2a1908f7e6d5c4b3a291 fixed the token refresh",
    "API version v2.14.3-rc1",
    "API endpoint: https://api.example.com/v1/users",
    "My password manager is 1Password",
    "I changed my password yesterday.",
    "密码是我女儿的生日，别记下来",
    "key date: 2025-03-14",
    "Passport renewal due 2027-06-30",
    "Invoice 4111111111111111 was paid",  # a Luhn-valid number, but an invoice's
    "Prefers oolong tea; allergic to peanuts 🥜",
    "Visa ending 4821, I pay it off on the 15th",
    "邮编 200120，银行卡在招商银行，每月 15 日付款",
]


@pytest.mark.parametrize("kind", list(CREDENTIALS))
def test_each_kind_is_found_on_its_line(kind):
    text = f"first line\n{CREDENTIALS[kind]}\nlast line"
    assert CredentialFinding(line=2, kind=kind) in find_credentials(text)


@pytest.mark.parametrize(("text", "kind"), MORE_CREDENTIALS)
def test_credentials_in_other_shapes_are_found(text, kind):
    assert kind in credential_kinds(text)


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_facts_with_long_numbers_are_not_credentials(text):
    assert find_credentials(text) == []


def test_a_digest_after_a_hash_word_is_not_a_secret_but_the_same_hex_after_key_is():
    digest = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
    assert find_credentials(f"sha256: {digest}") == []
    assert credential_kinds(f"api key: {digest}") == [CredentialKind.SECRET]


def test_a_card_number_must_pass_luhn():
    assert credential_kinds("card 4111 1111 1111 1111") == [CredentialKind.PAYMENT_CARD]
    assert find_credentials("card 4111 1111 1111 1112") == []


def test_a_resident_id_must_pass_its_checksum():
    assert credential_kinds("ID 11010519491231002X") == [CredentialKind.RESIDENT_ID]
    assert find_credentials("ID 110105194912310021") == []


def test_findings_name_line_and_kind_only_never_the_text():
    findings = find_credentials("tea\n" + CREDENTIALS[CredentialKind.PASSWORD] + "\n\ncoffee")
    assert findings == [CredentialFinding(line=2, kind=CredentialKind.PASSWORD)]
    assert [field.name for field in dataclasses.fields(CredentialFinding)] == ["line", "kind"]
    assert "hunter2" not in repr(findings)


def test_every_kind_has_words_for_people():
    assert {kind.label for kind in CredentialKind} >= {"an API key", "a payment card number"}


# --- a bare number near a password or PIN word ----------------------------------------------

BARE_PINS = [
    # What SmolLM2 proposed for "记住我的银行卡密码是 739164".
    "The user has forgotten the password for a 739164 bank account.",
    "PIN 4821",
    "my bank PIN 4821.",
    "4821 is the PIN of my debit card",
    "The passcode for the front door is now 2580",
    "银行卡密码739164",
    "门禁密码 5823，别忘了",
    "手机锁屏口令 20480917",
    "my PIN 1987",  # a year-like number, but no word that takes a year
]

# Ordinary numbers next to a password or PIN word: none is one.
NUMBERS_NEAR_PASSWORD_WORDS = [
    "I changed my email password in 2023",
    "The password changed in March 2024",
    "since 2019 I use a passphrase instead of a password",
    "2023年改过一次邮箱密码",
    "从 2018 年起公司要求定期改密码",
    "Password expires 2025-06-30",
    "密码 2026.03.01 过期",
    "password reset ticket 48291377 is closed",
    "密码重置工单 482913 已关闭",
    "The Wi-Fi password must be at least 12 characters",
    "The bank makes me change the PIN every 1000 days",
    "密码至少 1024 位",
    "call 138 0013 8000 if I forget my password",
    "For a password reset, call IT at extension 4821",
    "忘了银行卡密码就打客服电话 95588",
    "A smart lock with a PIN pad cost $1299",
    "密码锁花了 1299 元",
    "The password is on the router sticker in room 1204",
    "密码写在 3 号楼 1204 室的抽屉里",
    "Pin Django at v4.2.1 for the project",
    "My password manager is 1Password",
    "The PIN letter for my card ending in 4821 arrived",
    "尾号 9480 的银行卡密码函寄到了",
]


@pytest.mark.parametrize("text", BARE_PINS)
def test_a_bare_number_near_a_password_or_pin_word_is_a_password(text):
    assert credential_kinds(text) == [CredentialKind.PASSWORD]


@pytest.mark.parametrize("text", NUMBERS_NEAR_PASSWORD_WORDS)
def test_a_year_date_reference_quantity_phone_or_room_near_a_password_word_is_not(text):
    assert find_credentials(text) == []


def test_a_bare_number_is_a_pin_only_within_reach_of_the_word():
    assert credential_kinds("PIN: see the note. 4821") == [CredentialKind.PASSWORD]
    far = "I set a new PIN yesterday, and then took the number " + "very " * 8 + "4821 bus"
    assert find_credentials(far) == []


def test_a_password_word_after_a_number_names_it_only_if_it_has_no_number_of_its_own():
    assert [found.value for found in credential_values("4821 is the PIN of my card")] == ["4821"]
    text = "my locker number is 4821, and my PIN is 7350"
    assert {found.value for found in credential_values(text)} == {"7350"}


def test_a_long_line_of_numbers_near_password_words_is_judged_number_by_number():
    # 60 KB on one line, 5,000 numbers: each looks only within its reach (its time is in
    # bench/false_refusals.py).
    assert find_credentials("password x " + "order 12345 " * 5000) == []
    assert credential_kinds("PIN 4821 " * 6000) == [CredentialKind.PASSWORD]


def test_a_reference_word_decides_only_when_it_stands_nearer_than_the_password_word():
    assert find_credentials("order for the new password 4821") == [
        CredentialFinding(line=1, kind=CredentialKind.PASSWORD)
    ]
    assert find_credentials("password reset order 4821") == []


# --- the values a text states as credentials -------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kind", "value"),
    [
        ("Please store my bank PIN, 4821, so you can remind me later.", "password", "4821"),
        ("记住我的银行卡密码是 739164", "password", "739164"),
        ('wifi password: "Tr0ub4dor&3".', "password", "Tr0ub4dor&3"),
        ("use 739164 to pay with my card", "password", "739164"),
        ("backup at https://admin:Tr0ub4dor@backup.example.com", "password", "Tr0ub4dor"),
        ("remember my API key: sk-test-4f9a2b7c1d", "secret", "sk-test-4f9a2b7c1d"),
        (
            "GitHub: ghp_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
            "access_token",
            "ghp_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
        ),
        ("AWS access key AKIAIOSFODNN7EXAMPLE", "api_key", "AKIAIOSFODNN7EXAMPLE"),
        ("Visa card 4111 1111 1111 1111, expires 09/29", "payment_card", "4111111111111111"),
        ("身份证号 11010519491231002X", "resident_id", "11010519491231002X"),
    ],
)
def test_the_values_a_text_states_as_credentials(text, kind, value):
    assert CredentialValue(CredentialKind(kind), value) in credential_values(text)


def test_a_text_without_a_credential_states_no_value():
    assert credential_values("Order number 2024112588231 arrives; I changed my password.") == []


def test_a_value_is_never_in_its_repr():
    (found,) = set(credential_values("my PIN is 4821"))
    assert "4821" not in repr(found) and "4821" not in str(found)


STATED = [
    "Please store my bank PIN, 4821, so you can remind me later.",
    "记住我的银行卡密码是 739164",
    "Visa card 4111 1111 1111 1111",
]


@pytest.mark.parametrize(
    ("content", "kind"),
    [
        # What SmolLM2 proposed for the PIN: no credential word left.
        ("function 4821, no return type specified", CredentialKind.PASSWORD),
        ("The user's lucky number is 739164.", CredentialKind.PASSWORD),
        ("用户的幸运数字是739164", CredentialKind.PASSWORD),
        ("Invoice 4111-1111-1111-1111 was paid", CredentialKind.PAYMENT_CARD),
    ],
)
def test_content_repeating_a_stated_value_is_found_however_it_is_worded(content, kind):
    assert stated_credential_in(content, STATED) == kind
    # The detector alone does not see it (the card: a reference word stands before it).
    assert find_credentials(content) == []


def test_a_stated_cards_digits_are_found_in_any_grouping():
    for content in ("4111111111111111", "4111-1111-1111-1111", "4111 1111 11111111"):
        assert stated_credential_in(content, STATED) == CredentialKind.PAYMENT_CARD


@pytest.mark.parametrize(
    "content",
    [
        "Locker 48213 at the gym",  # the value inside a longer number
        "Room A4821",  # inside a word
        "flat 1739164",
        "Visa ending 1111",  # a card's last group alone
        "The user likes tea",
    ],
)
def test_a_value_counts_only_as_a_whole_token(content):
    assert stated_credential_in(content, STATED) is None


def test_a_value_shorter_than_four_characters_is_not_compared():
    stated = ["my password is 1!a"]
    assert credential_kinds(stated[0]) == [CredentialKind.PASSWORD]
    assert stated_credential_in("the answer is 1!a", stated) is None


def test_a_number_the_user_did_not_state_as_a_credential_is_not_one():
    stated = ["Remember my locker number is 4821, and my PIN is 7350"]
    assert stated_credential_in("Locker number 4821", stated) is None
    assert stated_credential_in("7350", stated) == CredentialKind.PASSWORD


# --- against an attacker: hidden, disguised and new forms -------------------------------------

# Each found only once the text is normalised: zero-width and other format characters removed,
# full-width letters folded by NFKC, Cyrillic and Greek look-alikes folded to Latin.
DISGUISED = [
    ("my pass\u200bword is hunter2", CredentialKind.PASSWORD),
    ("AKIAZ3MS\u200bJV4WWZ2XJ5QN", CredentialKind.API_KEY),
    ("我的密\u200b码是 Abc12345!", CredentialKind.PASSWORD),
    ("my ｐａｓｓｗｏｒｄ is hunter2", CredentialKind.PASSWORD),
    ("my p\u0430ssword is hunter2", CredentialKind.PASSWORD),  # a Cyrillic а
    ("my p\u03b1ssw\u03bfrd is hunter2", CredentialKind.PASSWORD),  # Greek α and ο
    ("my pass\u00adword is hunter2", CredentialKind.PASSWORD),  # a soft hyphen
    ("my pass\u2060word\u202e is hunter2", CredentialKind.PASSWORD),  # word joiner, bidi
    ("my pass\U000e0041word is hunter2", CredentialKind.PASSWORD),  # a tag character
    ("card ４１１１ １１１１ １１１１ １１１１", CredentialKind.PAYMENT_CARD),
]

# Forms the detector missed: new token formats, letters-only passwords, base64, the value on
# the next line.
NEW_FORMS = [
    (
        "github_pat_11ABCDEFG0aB3dE5fG7h1B_" + "aB3dE5fG7h" * 5 + "aB3dE5fG7",
        CredentialKind.ACCESS_TOKEN,
    ),
    (
        "slack app token xapp-1-A0123BCDE45-1234567890123-" + "ab12" * 16,
        CredentialKind.ACCESS_TOKEN,
    ),
    ("xoxb-1234567890-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx", CredentialKind.ACCESS_TOKEN),
    ("stripe test key sk_test_" + "4eC39HqLyjWDarjtT1zdp7dc", CredentialKind.API_KEY),
    ("maps: AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q", CredentialKind.API_KEY),
    ("openai sk-proj-" + "Ab3De5Gh7Jk9Mn2Pq4St6Vw8Yz" * 3, CredentialKind.API_KEY),
    ("claude sk-ant-api03-" + "Ab3De5Gh7Jk9Mn2Pq4St6Vw8Yz" * 4 + "AA", CredentialKind.API_KEY),
    (
        "session eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
        "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        CredentialKind.ACCESS_TOKEN,
    ),
    ("my password is sunshine", CredentialKind.PASSWORD),
    ("My email password is correcthorsebatterystaple.", CredentialKind.PASSWORD),
    ("我的邮箱密码是 woaibeijing", CredentialKind.PASSWORD),
    ("我的邮箱密码是woaibeijing", CredentialKind.PASSWORD),
    ("wifi password is\nTr0ub4dor&3", CredentialKind.PASSWORD),
    ("密码是：\nwoaibeijing", CredentialKind.PASSWORD),
    # base64 of "my password is hunter2" and of an AWS key id
    ("note: bXkgcGFzc3dvcmQgaXMgaHVudGVyMg==", CredentialKind.PASSWORD),
    ("blob QUtJQVozTVNKVjRXV1oyWEo1UU4=", CredentialKind.API_KEY),
    ("my bank card passcode 482913", CredentialKind.PASSWORD),
    ("ATM PIN code is 4821", CredentialKind.PASSWORD),
]


@pytest.mark.parametrize(("text", "kind"), DISGUISED)
def test_a_credential_disguised_by_invisible_full_width_or_look_alike_letters_is_found(text, kind):
    assert kind in credential_kinds(text)


@pytest.mark.parametrize(("text", "kind"), NEW_FORMS)
def test_new_token_formats_letters_only_base64_and_next_line_credentials_are_found(text, kind):
    assert kind in credential_kinds(text)


def test_a_value_on_the_next_line_is_found_on_both_lines_of_it():
    findings = find_credentials("tea\nwifi password is\n\nTr0ub4dor&3\ncoffee")
    assert findings == [
        CredentialFinding(line=2, kind=CredentialKind.PASSWORD),
        CredentialFinding(line=4, kind=CredentialKind.PASSWORD),
    ]


# Ordinary facts an attacker's forms must not take with them.
NOT_CREDENTIALS = [
    "I paid 135000 yuan for my car with my credit card",
    "我用信用卡支付了 158000 元的学费",
    "Paid 250000 with my debit card for the flat deposit",
    "My PIN code is 560001",  # an Indian postal PIN code
    "Office in Bengaluru, PIN code 560001",
    "pincode 110001, New Delhi",
    "My password is strong",
    "The wifi password is written on the router",
    "my password is expired",
    "The password is case sensitive.",
    "密码是对的",
    "I have three thousand two hundred books",
    "我的邮箱密码是我女儿的生日",
    "The word aGVsbG8gd29ybGQ is hello world in base64",
    "My password\nmanager is 1Password",
]


@pytest.mark.parametrize("text", NOT_CREDENTIALS)
def test_amounts_postal_pin_codes_and_words_after_password_is_are_not_credentials(text):
    assert find_credentials(text) == []


def test_a_password_for_a_thing_of_up_to_three_words_is_found():
    assert credential_kinds("the passcode for my phone is 482913") == [CredentialKind.PASSWORD]
    assert credential_kinds("password for the work laptop: sunshine") == [CredentialKind.PASSWORD]


def test_repeat_needles_are_the_pieces_a_repeated_value_shares_with_its_statement():
    assert repeat_needles("用户的幸运数字是739164。") == ["739164"]
    assert repeat_needles("Card 4111111111111111, PIN: a1!b2") == [
        "card",
        "4111111111111111",
        "4111",
        "a1!b2",
    ]
    assert repeat_needles("ＡＢＣＤ tea") == ["abcd"]


def test_stop_words_are_no_needles_so_a_write_does_not_read_every_recent_message():
    # "remember" and "that" are in nearly every message a user sends: as needles they would
    # have the check read and look through all of them.
    assert repeat_needles("Please remember that my gym locker is 7350") == ["locker", "7350"]
    assert repeat_needles("Remember, THAT!") == []
