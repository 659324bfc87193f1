"""The credential detector's rules about numbers: payment cards, resident identity numbers, and
a PIN or password said as a bare number near its word, told from the numbers ordinary facts
hold (years, quantities, amounts, references, phones, rooms, postal PIN codes).

Each rule yields the values it finds on one line (already normalised by the detector). A leaf:
it imports nothing of the app.
"""

import re
from collections.abc import Iterator

# How far before a number (or a string) its word may stand, in characters.
WORD_REACH = 32
# A password or PIN word, English (whole words) or Chinese.
PASSWORD_WORD = (
    r"(?:(?<![a-z])(?:password|passwd|pwd|passcode|passphrase|pin(?:\s*(?:code|number))?)"
    r"(?![a-z])|密码|口令|支付密码)"
)
# A postal "PIN code" (India's six-digit postcode), told from a card's PIN code by a line
# without any card, bank, phone or lock word.
_POSTAL_PIN_WORD = re.compile(r"(?<![a-z])pin\s*(?:code(?![a-z])|码)", re.IGNORECASE)
_POSTAL_PIN = re.compile(r"\d{6}")
_PIN_OF_A_THING = re.compile(
    r"(?<![a-z])(?:atm|bank|card|debit|credit|sim|phone|mobile|lock|door|safe|account|"
    r"wallet)s?(?![a-z])|银行|卡|手机|锁|账户",
    re.IGNORECASE,
)
# A card's PIN or payment password said without the word: a code of exactly six digits (the
# length of a mainland bank card's password, and a common PIN's) on a line about paying with a
# card ("use 739164 to pay with my card", "刷卡支付密码 739164" has the word anyway).
_SIX_DIGIT_CODE = re.compile(r"(?<![\d.:/-])\d{6}(?![\d.:/-])")
_CARD_WORD = re.compile(r"(?<![a-z])cards?(?![a-z])|卡", re.IGNORECASE)
_PAY_WORD = re.compile(r"(?<![a-z])(?:pay|pays|paying|paid|payment)(?![a-z])|支付|付款|刷卡", re.I)

# Payment cards: 13 to 19 digits, whole or in groups of 4 (Amex: 4-6-5), on a brand's prefix.
_CARD = re.compile(r"(?<![\d-])(?:\d[ -]?){12,18}\d(?![\d-])")
_CARD_BRANDS = re.compile(
    r"4\d{12}(?:\d{3}){0,2}"  # Visa: 13, 16 or 19
    r"|(?:5[1-5]\d{2}|222[1-9]|22[3-9]\d|2[3-6]\d{2}|27[01]\d|2720)\d{12}"  # Mastercard
    r"|3[47]\d{13}"  # American Express
    r"|(?:6011|65\d{2}|64[4-9]\d)\d{12,15}"  # Discover
    r"|62\d{14,17}"  # UnionPay
    r"|35(?:2[89]|[3-8]\d)\d{12,15}"  # JCB
    r"|3(?:0[0-5]|[689]\d)\d{11,13}"  # Diners Club
)
# Words that make a number an order, tracking or account reference or a postcode, not a card
# or its code.
_REFERENCE_WORD = re.compile(
    r"(?<![a-z])(?:order|orders|tracking|shipment|parcel|invoice|ticket|booking|"
    r"confirmation|reference|ref|waybill|case|member|membership|postcode|zip)(?![a-z])|"
    r"订单|单号|快递|运单|物流|发票|工单|会员|邮编|邮政编码",
    re.IGNORECASE,
)

# A password or PIN said as a bare number near its word ("the password for a 739164 bank
# account", "PIN 4821"): 4 to 8 digits standing alone, not one group of a longer number (a
# phone's "0013 8000", a date's "2023-05", a decimal, a time), nor a code's part (`#`, letters),
# nor an amount (a currency sign before it).
_PASSWORD_WORD_PATTERN = re.compile(PASSWORD_WORD, re.IGNORECASE)
_BARE_NUMBER = re.compile(
    r"(?<![0-9A-Za-z_.,:/#+$€£¥-])(?<!\d )\d{4,8}(?![0-9A-Za-z_]|[.,:/-]\d| \d)"
)
# Words that make a number near a password word something else: a reference (order, ticket,
# 工单 ...), a phone or extension to call, a room, a port, a model, a flight, a card's last
# digits ("ending in", 尾号), or a number's own label ("locker number"). The word nearest
# before the number decides.
_OTHER_NUMBER_WORD = re.compile(
    _REFERENCE_WORD.pattern
    + r"|(?<![a-z])(?:phone|tel|call|dial|hotline|helpline|extension|ext|room|port|model|"
    r"flight|line|number|num|no(?=\.)|ending|ends)(?![a-z])|电话|热线|客服|拨打|分机|手机|房间|"
    r"型号|航班|号码|编号|尾号|末四位|后四位",
    re.IGNORECASE,
)
# A year: 19xx or 20xx after a word that takes one (in, since, until, a month ...) or before 年.
_YEAR = re.compile(r"(?:19|20)\d{2}")
_YEAR_BEFORE = re.compile(
    r"(?:(?<![a-z])(?:in|since|from|until|till|to|by|before|after|during|of|year|"
    r"jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|"
    r"sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\.?|从|自|于|到|至)\s*$",
    re.IGNORECASE,
)
_YEAR_AFTER = re.compile(r"\s*年")
# A quantity or a place: a number followed by its unit (a length, a duration, a count, an
# amount, a house, room or floor number).
_UNIT_AFTER = re.compile(
    r"\s*(?:(?:characters?|chars?|digits?|letters?|symbols?|words?|bits?|bytes?|"
    r"days?|weeks?|months?|years?|hours?|hrs?|minutes?|mins?|seconds?|secs?|times?|"
    r"attempts?|tries|users?|people|accounts?|dollars?|euros?|pounds?|yuan|rmb|usd|eur|gbp)"
    r"(?![a-z])|%|位|个|天|周|月|年|小时|分钟|秒|次|元|块|美元|人|字|号|室|楼|栋|层|单元)",
    re.IGNORECASE,
)
# A currency or a paying verb right before a number makes it a sum ("paid 250000",
# "花了 158000"); how far back one may stand, in characters.
_AMOUNT_BEFORE = re.compile(
    r"(?:[$€£¥￥₹]|(?<![a-z])(?:(?:paid|pay|pays|paying)(?:\s+(?:off|back|down))?|"
    r"spent|spend|spends|cost|costs|costing|"
    r"rmb|usd|eur|gbp|cny|inr|rs\.?|yuan)|支付了?|付了?|花了|消费了?|刷了|共计|合计)\s*$",
    re.IGNORECASE,
)
_AMOUNT_REACH = 12
# How far back a year's word may stand, in characters.
_YEAR_WORD_REACH = 12
# At least as long as any password or label word above ("pin number", "confirmation").
_LONGEST_WORD = 16

# Mainland China resident identity numbers: region, birth date, sequence, check character.
_RESIDENT_ID = re.compile(
    r"(?<![0-9A-Za-z])[1-8]\d{5}(?:19|20)\d{2}(?:0[1-9]|1[0-2])(?:0[1-9]|[12]\d|3[01])"
    r"\d{3}[0-9Xx](?![0-9A-Za-z])"
)
_RESIDENT_ID_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
_RESIDENT_ID_CHECK = "10X98765432"


def _luhn_valid(digits: str) -> bool:
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = int(char)
        if index % 2:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


def _resident_id_valid(number: str) -> bool:
    total = sum(int(d) * w for d, w in zip(number[:17], _RESIDENT_ID_WEIGHTS, strict=True))
    return _RESIDENT_ID_CHECK[total % 11] == number[17].upper()


def _is_amount(line: str, start: int, end: int) -> bool:
    """A number with a currency or a unit after it, or a currency or a paying verb right
    before it ("paid 135000 yuan", "支付了 158000 元", "$250000"): a sum, not a code."""
    before = line[max(0, start - _AMOUNT_REACH) : start]
    return _UNIT_AFTER.match(line, end) is not None or _AMOUNT_BEFORE.search(before) is not None


def payment_codes(line: str) -> Iterator[str]:
    if not (_CARD_WORD.search(line) and _PAY_WORD.search(line)):
        return
    for code in _SIX_DIGIT_CODE.finditer(line):
        start, end = code.span()
        if _REFERENCE_WORD.search(line, max(0, start - WORD_REACH), start):
            continue
        if not _is_amount(line, start, end):
            yield code.group()


def is_postal_pin(line: str, value: str) -> bool:
    """A six-digit number on a line that speaks of a PIN code and of no card, bank, phone or
    lock: a postal code ("PIN code 560001"), not a PIN."""
    return (
        _POSTAL_PIN.fullmatch(value) is not None
        and _POSTAL_PIN_WORD.search(line) is not None
        and _PIN_OF_A_THING.search(line) is None
    )


def _end_before(pattern: re.Pattern[str], line: str, start: int) -> int | None:
    """Where the last match of `pattern` before `start` ends, if it ends within reach. Only the
    reach and a word's length before it are searched, so a long line costs no more per number."""
    window = max(0, start - WORD_REACH - _LONGEST_WORD)
    ends = [match.end() for match in pattern.finditer(line, window, start)]
    return ends[-1] if ends and ends[-1] >= start - WORD_REACH else None


def _claimed_by_word_after(line: str, end: int) -> bool:
    """Whether a password word within reach after a number names it ("4821 is my PIN"): not
    when the word has a number of its own after it ("locker 4821, and my PIN is 7350")."""
    word = _PASSWORD_WORD_PATTERN.search(line, end, end + WORD_REACH + _LONGEST_WORD)
    return (
        word is not None
        and word.start() <= end + WORD_REACH
        and _BARE_NUMBER.search(line, word.end(), word.end() + WORD_REACH) is None
    )


def _is_year(line: str, number: re.Match[str]) -> bool:
    """A 19xx or 20xx after a word that takes a year ("in 2023", "since March 2019") or before
    年: when the password was changed, not what it is."""
    if _YEAR.fullmatch(number.group()) is None:
        return False
    before = line[max(0, number.start() - _YEAR_WORD_REACH) : number.start()]
    return (
        _YEAR_BEFORE.search(before) is not None or _YEAR_AFTER.match(line, number.end()) is not None
    )


def bare_pins(line: str) -> Iterator[str]:
    """Each 4 to 8 digit number within reach of a password or PIN word (before it, or after
    it and naming it) that is no year after its word, no quantity before its unit, and has no
    reference, phone, room or other label standing nearer before it than the password word."""
    if not _PASSWORD_WORD_PATTERN.search(line):
        return
    for number in _BARE_NUMBER.finditer(line):
        start, end = number.span()
        word_before = _end_before(_PASSWORD_WORD_PATTERN, line, start)
        if word_before is None and not _claimed_by_word_after(line, end):
            continue
        # (A tie is a password word holding the other: "PIN number 4821".)
        other_before = _end_before(_OTHER_NUMBER_WORD, line, start)
        if other_before is not None and (word_before is None or other_before > word_before):
            continue
        if _is_year(line, number) or _UNIT_AFTER.match(line, end):
            continue
        if is_postal_pin(line, number.group()):
            continue
        yield number.group()


def payment_cards(line: str) -> Iterator[str]:
    for match in _CARD.finditer(line):
        digits = re.sub(r"[ -]", "", match.group())
        if not (_CARD_BRANDS.fullmatch(digits) and _luhn_valid(digits)):
            continue
        if _REFERENCE_WORD.search(line, max(0, match.start() - WORD_REACH), match.start()):
            continue
        yield digits


def resident_ids(line: str) -> Iterator[str]:
    return (m.group() for m in _RESIDENT_ID.finditer(line) if _resident_id_valid(m.group()))
