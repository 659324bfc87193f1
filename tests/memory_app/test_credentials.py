"""The credential detector: each kind found on its line, ordinary facts with long numbers
left alone, and findings that never carry the matched text."""

import dataclasses

import pytest

from memory_app.credentials import (
    CredentialFinding,
    CredentialKind,
    credential_kinds,
    find_credentials,
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
