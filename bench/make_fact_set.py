"""Generate the labelled set of ordinary facts `bench/false_refusals.py` measures (deterministic).

    python bench/make_fact_set.py   (writes bench/fact_set/ordinary_facts.json)

Facts a user asks the agent to remember that hold long numbers, codes and hashes but no
credential, in English and Chinese, as `remember_memory` would receive them: dates, street
addresses, phone numbers, order numbers, parcel tracking numbers, version strings, hashes of
files, other reference numbers (flights, bookings, invoices, licence plates, postcodes),
amounts beside card and payment words, postal PIN codes, and numbers spelled in words.
Some name a credential word in passing ("the API version", "the key fob", "我改了密码") without
holding one. Each fact is labelled with its language and category; none is a credential.
Standard library only; the same seed always writes the same bytes.
"""

import hashlib
import json
import random
from pathlib import Path

SEED = 20261201
OUTPUT = Path(__file__).resolve().parent / "fact_set" / "ordinary_facts.json"
PER_TEMPLATE = 15  # facts drawn from each template

EN_STREETS = ["Baker Street", "Washington Ave", "Elm Road", "Rue de Rivoli", "Kingsway"]
EN_CITIES = ["London", "Houston, TX", "Toronto, ON", "Melbourne VIC", "Dublin"]
ZH_CITIES = ["上海市浦东新区", "北京市海淀区", "深圳市南山区", "杭州市西湖区", "成都市武侯区"]
ZH_ROADS = ["张江路", "中关村大街", "科技园南路", "文三路", "天府大道"]
MONTHS = ["January", "March", "May", "July", "September", "November", "December"]
FILES = ["thesis.pdf", "backup.tar.gz", "photos-2024.zip", "contract.docx", "ubuntu.iso"]
ZH_FILES = ["论文.pdf", "备份.tar.gz", "照片.zip", "合同.docx", "系统镜像.iso"]
PRODUCTS = ["Django", "PostgreSQL", "Node.js", "Kubernetes", "Python", "Redis", "nginx"]
CARRIERS = ["UPS", "FedEx", "DHL", "USPS", "Royal Mail"]
ZH_CARRIERS = ["顺丰", "中通", "圆通", "京东物流", "EMS"]
SHOPS = ["Amazon", "eBay", "IKEA", "Zalando", "Best Buy"]
ZH_SHOPS = ["淘宝", "京东", "拼多多", "天猫", "唯品会"]


def _digits(rng: random.Random, count: int) -> str:
    return str(rng.randint(1, 9)) + "".join(str(rng.randint(0, 9)) for _ in range(count - 1))


def _date(rng: random.Random, pattern: str) -> str:
    """A random date written by `pattern` (fields `y`, `m`, `d`)."""
    return pattern.format(y=rng.randint(1950, 2035), m=rng.randint(1, 12), d=rng.randint(1, 28))


def _hex(rng: random.Random, length: int) -> str:
    return hashlib.sha512(str(rng.random()).encode()).hexdigest()[:length]


def _tracking(rng: random.Random) -> str:
    shapes = [
        lambda: "1Z" + "".join(rng.choice("0123456789ABCDEFGHJKLMNPRSTUVWXYZ") for _ in range(16)),
        lambda: _digits(rng, 12),
        lambda: _digits(rng, 22),
        lambda: "JD" + _digits(rng, 13),
        lambda: "SF" + _digits(rng, 13),
        lambda: "YT" + _digits(rng, 13),
        lambda: "RR" + _digits(rng, 9) + "CN",
    ]
    return rng.choice(shapes)()


def _phone(rng: random.Random) -> str:
    shapes = [
        lambda: f"+1 ({_digits(rng, 3)}) {_digits(rng, 3)}-{rng.randint(0, 9999):04d}",
        lambda: f"+44 20 {_digits(rng, 4)} {rng.randint(0, 9999):04d}",
        lambda: (
            f"1{rng.choice('3578')}{rng.randint(0, 9)} {rng.randint(0, 9999):04d} "
            f"{rng.randint(0, 9999):04d}"
        ),
        lambda: f"+86 1{rng.choice('3578')}{rng.randint(0, 9)}{rng.randint(0, 99999999):08d}",
        lambda: f"0{rng.randint(10, 99)}-{_digits(rng, 8)}",
        lambda: (
            f"+33 6 {rng.randint(10, 99)} {rng.randint(10, 99)} {rng.randint(10, 99)} "
            f"{rng.randint(10, 99)}"
        ),
    ]
    return rng.choice(shapes)()


def _version(rng: random.Random) -> str:
    major, minor, patch = rng.randint(0, 30), rng.randint(0, 40), rng.randint(0, 30)
    suffix = rng.choice(["", "", "-rc1", "-beta.2", ".post1", "+build.7"])
    return f"{major}.{minor}.{patch}{suffix}"


def _templates(rng: random.Random) -> dict[tuple[str, str], list]:
    """(language, category) -> templates, each a function of the random source."""
    return {
        ("en", "date"): [
            lambda: _date(rng, "My daughter's birthday is {y}-{m:02d}-{d:02d}."),
            lambda: (
                f"Passport expires on {rng.choice(MONTHS)} {rng.randint(1, 28)}, "
                f"{rng.randint(2026, 2036)}."
            ),
            lambda: _date(rng, "Wedding anniversary: {m:02d}/{d:02d}/{y}"),
            lambda: _date(rng, "Car insurance renews {y}.{m:02d}.{d:02d}"),
            lambda: (
                f"Started at the company on {rng.randint(1, 28)} {rng.choice(MONTHS)} "
                f"{rng.randint(1990, 2025)}"
            ),
            lambda: _date(rng, "Key date for the visa appointment: {y}-{m:02d}-{d:02d} at 9:30"),
        ],
        ("zh", "date"): [
            lambda: _date(rng, "我的生日是 {y} 年 {m} 月 {d} 日"),
            lambda: _date(rng, "护照 {y}-{m:02d}-{d:02d} 到期"),
            lambda: _date(rng, "结婚纪念日是 {y}/{m:02d}/{d:02d}"),
            lambda: _date(rng, "女儿 {y}年{m}月{d}日 入学"),
            lambda: _date(rng, "下次体检约在 {y}.{m:02d}.{d:02d} 上午"),
        ],
        ("en", "address"): [
            lambda: (
                f"Lives at {rng.randint(1, 9999)} {rng.choice(EN_STREETS)}, "
                f"Apt {rng.randint(1, 40)}{rng.choice('ABCD')}, {rng.choice(EN_CITIES)} "
                f"{_digits(rng, 5)}"
            ),
            lambda: (
                f"Office: {rng.randint(1, 300)} {rng.choice(EN_STREETS)}, floor "
                f"{rng.randint(1, 60)}, {rng.choice(EN_CITIES)}"
            ),
            lambda: f"Ship gifts to PO Box {_digits(rng, 5)}, {rng.choice(EN_CITIES)}",
            lambda: (
                f"Parents live at {rng.randint(1, 999)}B {rng.choice(EN_STREETS)}, "
                f"London NW{rng.randint(1, 11)} {rng.randint(1, 9)}XE"
            ),
            lambda: (
                f"The storage unit is #{rng.randint(100, 9999)} at "
                f"{rng.randint(1, 9999)} {rng.choice(EN_STREETS)}"
            ),
        ],
        ("zh", "address"): [
            lambda: (
                f"住在{rng.choice(ZH_CITIES)}{rng.choice(ZH_ROADS)} {rng.randint(1, 999)} 号 "
                f"{rng.randint(1, 30)} 栋 {rng.randint(101, 3205)} 室"
            ),
            lambda: (
                f"公司地址：{rng.choice(ZH_CITIES)}{rng.choice(ZH_ROADS)}"
                f"{rng.randint(1, 999)}号，邮编 {_digits(rng, 6)}"
            ),
            lambda: (
                f"父母家在{rng.choice(ZH_CITIES)}，门牌 {rng.randint(1, 99)}-"
                f"{rng.randint(1, 30)}-{rng.randint(101, 2800)}"
            ),
            lambda: (
                f"快递寄到{rng.choice(ZH_CITIES)}{rng.choice(ZH_ROADS)}"
                f"{rng.randint(1, 999)}号菜鸟驿站"
            ),
        ],
        ("en", "phone"): [
            lambda: f"Dentist's phone: {_phone(rng)}",
            lambda: f"My mom's number is {_phone(rng)}",
            lambda: f"Call the landlord at {_phone(rng)} after 6 pm",
            lambda: f"Work mobile {_phone(rng)}, extension {rng.randint(100, 9999)}",
        ],
        ("zh", "phone"): [
            lambda: f"妈妈的手机号是 {_phone(rng)}",
            lambda: f"物业电话：{_phone(rng)}",
            lambda: f"牙医诊所电话 {_phone(rng)}，周一休息",
            lambda: f"我的新号码 {_phone(rng)}",
        ],
        ("en", "order"): [
            lambda: (
                f"{rng.choice(SHOPS)} order number {_digits(rng, 3)}-{_digits(rng, 7)}-"
                f"{_digits(rng, 7)}"
            ),
            lambda: f"Order #{_digits(rng, rng.randint(8, 19))} arrives on Friday",
            lambda: f"The refund for order {_digits(rng, rng.randint(10, 19))} is pending",
            lambda: f"Invoice {_digits(rng, rng.randint(10, 18))} was paid in full",
            lambda: (
                f"Booking confirmation {rng.choice('ABCDEFGHJK')}{_digits(rng, rng.randint(6, 12))}"
            ),
        ],
        ("zh", "order"): [
            lambda: f"{rng.choice(ZH_SHOPS)}订单号 {_digits(rng, rng.randint(16, 19))}",
            lambda: f"退货的订单 {_digits(rng, rng.randint(12, 19))} 还没退款",
            lambda: f"发票号码 {_digits(rng, rng.randint(8, 20))}",
            lambda: f"上周买的显示器，订单编号：{_digits(rng, rng.randint(15, 19))}",
        ],
        ("en", "tracking"): [
            lambda: f"{rng.choice(CARRIERS)} tracking number {_tracking(rng)}",
            lambda: f"The parcel {_tracking(rng)} is held at the depot",
            lambda: f"Tracking: {_tracking(rng)}",
            lambda: f"Return label {_tracking(rng)}, drop off by Monday",
        ],
        ("zh", "tracking"): [
            lambda: f"{rng.choice(ZH_CARRIERS)}快递单号 {_tracking(rng)}",
            lambda: f"运单号：{_tracking(rng)}",
            lambda: f"包裹 {_tracking(rng)} 在驿站",
            lambda: f"物流单号 {_tracking(rng)}，下周到",
        ],
        ("en", "version"): [
            lambda: f"Our API runs on {rng.choice(PRODUCTS)} {_version(rng)}",
            lambda: f"Pin {rng.choice(PRODUCTS)} at v{_version(rng)} for the project",
            lambda: f"The API version is v{rng.randint(1, 9)}.{rng.randint(0, 40)}",
            lambda: f"Build {_version(rng)} fixed the auth bug",
            lambda: (
                f"Laptop firmware {rng.choice('ABFN')}{rng.randint(10, 99)}."
                f"{rng.randint(0, 99)}.{_digits(rng, 4)}"
            ),
        ],
        ("zh", "version"): [
            lambda: f"项目用的是 {rng.choice(PRODUCTS)} {_version(rng)}",
            lambda: f"手机系统版本 {_version(rng)}",
            lambda: f"接口版本 v{rng.randint(1, 9)}.{rng.randint(0, 40)}，别升级",
            lambda: f"我改了密码，客户端升级到 {_version(rng)} 了",
        ],
        ("en", "hash"): [
            lambda: f"sha256 of {rng.choice(FILES)}: {_hex(rng, 64)}",
            lambda: f"The MD5 checksum of {rng.choice(FILES)} is {_hex(rng, 32)}",
            lambda: f"Release commit {_hex(rng, 40)}",
            lambda: f"SHA-1 hash of the signing key file: {_hex(rng, 40)}",
            lambda: f"Deployed commit {_hex(rng, rng.choice([7, 8, 12]))} on Tuesday",
        ],
        ("zh", "hash"): [
            lambda: f"{rng.choice(ZH_FILES)} 的 SHA256 是 {_hex(rng, 64)}",
            lambda: f"{rng.choice(ZH_FILES)} 的 md5 校验和：{_hex(rng, 32)}",
            lambda: f"上线的 commit 是 {_hex(rng, 40)}",
            lambda: f"密钥文件的哈希 {_hex(rng, 64)}",
        ],
        ("en", "reference"): [
            lambda: (
                f"Flight {rng.choice(['BA', 'UA', 'LH', 'CA'])}{rng.randint(10, 9999)} "
                f"departs at {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}"
            ),
            lambda: (
                f"Licence plate {rng.choice('ABCDEFGH')}{rng.randint(10, 99)} "
                f"{rng.choice('ABCDEFGH')}{rng.choice('ABCDEFGH')}{rng.choice('ABCDEFGH')}"
            ),
            lambda: f"Library card {_digits(rng, rng.randint(10, 14))}",
            lambda: f"Frequent flyer number {_digits(rng, rng.randint(9, 12))}",
            lambda: f"The key fob for the garage is number {rng.randint(1, 999)}",
        ],
        ("zh", "reference"): [
            lambda: (
                f"航班 {rng.choice(['CA', 'MU', 'CZ', 'HU'])}{rng.randint(100, 9999)}，"
                f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d} 起飞"
            ),
            lambda: f"车牌号 沪{rng.choice('ABCDEF')}{rng.randint(10000, 99999)}",
            lambda: f"会员卡号 {_digits(rng, rng.randint(10, 16))}",
            lambda: f"社保电脑号 {_digits(rng, rng.randint(8, 12))}",
        ],
        # Amounts beside card and payment words: a sum, never a card's PIN.
        ("en", "amount_card"): [
            lambda: f"I paid {_digits(rng, rng.randint(4, 6))} yuan for my car with my credit card",
            lambda: f"Paid {_digits(rng, rng.randint(4, 6))} with my debit card for the deposit",
            lambda: f"My credit card limit is ${_digits(rng, rng.randint(4, 6))}",
            lambda: (
                f"The card payment of {_digits(rng, rng.randint(4, 6))} dollars for the "
                f"{rng.choice(['flat', 'wedding', 'course', 'laptop'])} went through"
            ),
            lambda: (
                f"Spent {_digits(rng, rng.randint(4, 6))} on my Visa card in {rng.choice(MONTHS)}"
            ),
            lambda: (
                f"Pay off {_digits(rng, rng.randint(4, 6))} on the credit card by the "
                f"{rng.randint(1, 28)}th"
            ),
        ],
        ("zh", "amount_card"): [
            lambda: f"我用信用卡支付了 {_digits(rng, rng.randint(4, 6))} 元的学费",
            lambda: f"信用卡额度是 {_digits(rng, rng.randint(4, 6))} 元",
            lambda: f"上个月刷卡消费了 {_digits(rng, rng.randint(4, 6))} 元",
            lambda: f"用银行卡付了 {_digits(rng, rng.randint(4, 6))} 块买电脑",
            lambda: f"房租 {_digits(rng, rng.randint(4, 5))} 元每月从工资卡里自动扣款",
            lambda: f"信用卡账单 ¥{_digits(rng, rng.randint(4, 6))}，{rng.randint(1, 28)} 号还款",
        ],
        # Postal codes called PIN codes (India's six digits), and postcodes beside them.
        ("en", "postal_pin"): [
            lambda: f"My PIN code is {rng.randint(110001, 855999)}",
            lambda: (
                f"Office in {rng.choice(['Bengaluru', 'Mumbai', 'Pune', 'Chennai'])}, "
                f"PIN code {rng.randint(110001, 855999)}"
            ),
            lambda: f"pincode {rng.randint(110001, 855999)}, New Delhi",
            lambda: (
                f"Ship the parcel to my parents, PIN code {rng.randint(110001, 855999)}, "
                f"{rng.choice(['Kerala', 'Punjab', 'Assam', 'Goa'])}"
            ),
            lambda: f"The postal PIN code for my hometown is {rng.randint(110001, 855999)}",
        ],
        ("zh", "postal_pin"): [
            lambda: f"印度办公室的 PIN code 是 {rng.randint(110001, 855999)}",
            lambda: f"老家的邮政编码是 {rng.randint(100000, 850000)}",
            lambda: f"寄到班加罗尔，PIN 码 {rng.randint(560001, 560110)}",
            lambda: f"邮编 {rng.randint(100000, 850000)}，{rng.choice(ZH_CITIES)}",
            lambda: f"孟买的 pincode {rng.randint(400001, 400110)}，记一下",
        ],
        # Numbers spelled in words.
        ("en", "spelled_number"): [
            lambda: (
                f"I have {rng.choice(['three', 'five', 'seven', 'nine'])} thousand "
                f"{rng.choice(['two', 'four', 'six', 'eight'])} hundred books"
            ),
            lambda: (
                f"My PIN reminder: it is {rng.choice(['not', 'never'])} my birthday, "
                f"and it has {rng.choice(['four', 'six'])} digits"
            ),
            lambda: (
                f"The flat is on the {rng.choice(['fourth', 'twelfth', 'twenty-first'])} floor, "
                f"door {rng.choice(['one', 'two', 'three'])}"
            ),
            lambda: (
                f"Running goal: {rng.choice(['twenty', 'thirty', 'forty'])} "
                f"{rng.choice(['one', 'five', 'eight'])} kilometres a week"
            ),
            lambda: (
                f"Grandma turns {rng.choice(['eighty', 'ninety'])}-"
                f"{rng.choice(['two', 'four', 'seven'])} this year"
            ),
        ],
        ("zh", "spelled_number"): [
            lambda: f"我家有{rng.choice(['一百二十', '九十八', '一百五十'])}平米",
            lambda: f"每天走{rng.choice(['八千', '一万', '一万二千'])}步",
            lambda: f"奶奶今年{rng.choice(['八十二', '九十', '七十六'])}岁",
            lambda: f"银行卡密码有{rng.choice(['六', '四'])}位，不是生日",
            lambda: f"住在{rng.choice(['三', '十二', '二十一'])}楼{rng.choice(['一', '二'])}号房",
        ],
        # Ordinary numbers next to a password or PIN word: a bare 4 to 8 digit number near
        # one is refused as a PIN, so these measure what that rule takes for one.
        ("en", "password_word"): [
            lambda: f"I changed my email password in {rng.randint(2005, 2026)}",
            lambda: f"Password reset ticket {_digits(rng, rng.randint(6, 8))} is closed",
            lambda: f"The Wi-Fi password must be at least {rng.randint(8, 16)} characters",
            lambda: f"My bank makes me change the PIN every {rng.choice([30, 60, 90, 180])} days",
            lambda: _date(
                rng,
                rng.choice(
                    [
                        "Password expires {y}-{m:02d}-{d:02d}",
                        "My work password expires on {m}/{d}/{y}",
                    ]
                ),
            ),
            lambda: f"If I forget my bank PIN, call {_phone(rng)}",
            lambda: (
                "For a password reset, call the IT helpdesk at extension "
                f"{_digits(rng, rng.randint(3, 5))}"
            ),
            lambda: (
                f"Since {rng.choice(MONTHS)} {rng.randint(2018, 2026)} the office uses passkeys "
                "instead of passwords"
            ),
            lambda: f"The PIN letter for my card ending in {_digits(rng, 4)} arrived",
            lambda: (
                f"The password manager family plan costs ${rng.randint(30, 99)}.99 a year, "
                f"renews {_date(rng, '{y}-{m:02d}-{d:02d}')}"
            ),
        ],
        ("zh", "password_word"): [
            lambda: f"{rng.randint(2005, 2026)}年改过一次邮箱密码",
            lambda: f"密码重置工单 {_digits(rng, rng.randint(6, 8))} 已关闭",
            lambda: f"公司要求密码至少 {rng.randint(8, 16)} 位",
            lambda: f"银行卡密码每 {rng.choice([30, 60, 90, 180])} 天要改一次",
            lambda: _date(
                rng,
                rng.choice(
                    ["邮箱密码 {y}-{m:02d}-{d:02d} 过期", "工作账号的密码 {y}年{m}月{d}日 到期"]
                ),
            ),
            lambda: f"忘了银行卡密码就打 {_phone(rng)}",
            lambda: (
                f"忘记网银密码可以打客服电话 {rng.choice(['95588', '95533', '95555', '95566'])}"
            ),
            lambda: f"从 {rng.randint(2015, 2026)} 年起公司不再用短信重置密码",
            lambda: f"尾号 {_digits(rng, 4)} 的银行卡密码函寄到了",
            lambda: f"家里的密码锁花了 {rng.randint(300, 3999)} 元",
        ],
    }


def build() -> list[dict[str, str]]:
    rng = random.Random(SEED)
    facts: list[dict[str, str]] = []
    for (language, category), templates in _templates(rng).items():
        for number, template in enumerate(templates):
            for draw in range(PER_TEMPLATE):
                facts.append(
                    {
                        "id": f"{language}-{category}-{number}-{draw}",
                        "language": language,
                        "category": category,
                        "text": template(),
                    }
                )
    return facts


def main() -> None:
    facts = build()
    OUTPUT.parent.mkdir(exist_ok=True)
    OUTPUT.write_text(json.dumps(facts, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
    print(f"wrote {len(facts)} facts to {OUTPUT}")


if __name__ == "__main__":
    main()
