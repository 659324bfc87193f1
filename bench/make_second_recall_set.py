"""Generate the second labelled lookback set `bench/recall.py` measures (deterministic).

    python bench/make_second_recall_set.py   (writes bench/recall_set/second.json)

Written apart from `make_recall_set.py`, with other topics and other sentences: a user's
appointments, lessons, repairs, bookings, pets' vet visits, subscriptions and plans, English
and Chinese, among distractor messages that reuse the same names, places and words (some name
two of a fact's keywords together), plus hidden threads (archived, deleted, sub-agent) that
repeat some facts word for word, which no search may return. No distractor holds every keyword
of a question that its fact holds, so each question has one best answer. The questions are as
a model would write them:

- `lacks a word`: two of the fact's keywords and a word the fact does not contain ("dentist
  check-up appointment" for "Dr. Okafor moved my dentist check-up");
- `other form`: a form of a keyword the fact does not use ("vaccination" for "vaccinated",
  "cancellation" for "cancelled", "退订" for "取消订阅");
- `corrected`: a fact stated, then corrected later in other words; the question must find the
  correction (the newest statement) first;
- `as stated`: keywords as the fact states them, in another order.

Same file layout as the first set (threads; messages in time order with the fact they state;
questions with the fact, language and kind). Standard library only; the same seed always
writes the same bytes.
"""

import random
from pathlib import Path

from labelled_sets import both_languages, hide_decoys, questions_of, thread_list, write_set

SEED = 30_2026
OUTPUT = Path(__file__).resolve().parent / "recall_set" / "second.json"
VISIBLE_THREADS = 120
DISTRACTOR_TURNS = 3_600
DECOY_FACTS = 20

EN_SPECIALISTS = ["dentist", "dermatologist", "optician", "physiotherapist", "cardiologist"]
EN_DOCTORS = ["Okafor", "Lindqvist", "Ferreira", "Nakamura", "Haddad"]
EN_WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"]
EN_INSTRUMENTS = ["cello", "ukulele", "trumpet", "harp", "banjo", "clarinet"]
EN_TEACHERS = ["Ms. Arbour", "Mr. Villeneuve", "Ms. Castellano", "Mr. Brandt", "Ms. Oyelaran"]
EN_FIXTURES = ["boiler", "radiator", "dishwasher", "shower", "water heater", "garage door"]
EN_ROOMS = ["basement", "kitchen", "bathroom", "hallway", "attic", "driveway"]
EN_HOTELS = ["Hotel Miravel", "Casa Lunara", "Birchwood Inn", "Pension Aurelia", "Saltmarsh Lodge"]
EN_PLACES = ["Lisbon", "Reykjavik", "Dubrovnik", "Marrakesh", "Vancouver", "Tbilisi"]
EN_OCCASIONS = ["anniversary", "honeymoon", "spring break", "long weekend", "reunion"]
EN_PETS = ["Clementine", "Rufus", "Bramble", "Nugget", "Ziggy", "Marmalade"]
EN_CLINICS = ["Hillside", "Riverbend", "Oakwood", "Northgate", "Maple Street", "Harbour"]
EN_SERVICES = ["Streamly", "Cinebox", "Tunewave", "Readwell", "Gymflex"]
EN_MONTHS = ["March", "April", "May", "June", "July", "August", "September", "October"]
EN_CHORES = [
    "the grocery list", "a birthday card", "the lawn", "a cover letter", "the budget",
    "a bike tyre", "a lasagne", "the bookshelf", "an email to the school", "the photo album",
]  # fmt: skip

ZH_DEPARTMENTS = ["牙科", "皮肤科", "眼科", "骨科", "心内科"]
ZH_DOCTORS = ["王医生", "李医生", "陈医生", "赵医生", "周医生"]
ZH_WEEKDAYS = ["周一", "周二", "周三", "周四", "周五", "周六"]
ZH_INSTRUMENTS = ["大提琴", "古筝", "小号", "琵琶", "二胡", "长笛"]
ZH_FIXTURES = ["热水器", "暖气片", "洗碗机", "马桶", "油烟机"]
ZH_ROOMS = ["厨房", "卫生间", "阳台", "客厅", "书房"]
ZH_HOTELS = ["云栖酒店", "听涛客栈", "松间民宿", "望湖山庄", "竹影小院"]
ZH_PLACES = ["杭州", "黄山", "婺源", "泉州", "稻城", "景德镇"]
ZH_PETS = ["团子", "花卷", "芝麻", "布丁", "旺财", "雪球"]
ZH_SERVICES = ["云音乐会员", "追剧会员", "健身卡", "网盘会员", "外卖会员"]
ZH_CHORES = ["购物清单", "生日贺卡", "草坪", "求职信", "预算表", "自行车胎", "书架", "相册"]


def _en_facts(rng: random.Random) -> list[dict]:
    facts = []
    for specialist, doctor in zip(EN_SPECIALISTS, EN_DOCTORS, strict=True):
        day = rng.choice(EN_WEEKDAYS)
        facts.append(
            {
                "text": f"Dr. {doctor} moved my {specialist} check-up to {day} at "
                f"{rng.randint(8, 11)} in the morning.",
                "questions": [
                    ("lacks a word", f"{specialist} check-up appointment"),
                    ("lacks a word", f"{doctor} {specialist} appointment"),
                    ("as stated", f"check-up {specialist}"),
                ],
            }
        )
    for instrument, teacher in zip(EN_INSTRUMENTS, EN_TEACHERS * 2, strict=False):
        facts.append(
            {
                "text": f"I signed up for {instrument} lessons with {teacher}, every "
                f"{rng.choice(EN_WEEKDAYS)} after work.",
                "questions": [
                    ("lacks a word", f"{instrument} lessons teacher"),
                    ("other form", f"{instrument} lesson signing"),
                    ("as stated", f"lessons {instrument}"),
                ],
            }
        )
    for fixture, room in zip(EN_FIXTURES, EN_ROOMS, strict=True):
        facts.append(
            {
                "text": f"The plumber finally repaired the leaking {fixture} in the {room}; "
                f"it cost {rng.randint(90, 400)} euros.",
                "questions": [
                    ("other form", f"{fixture} repairs"),
                    ("lacks a word", f"{fixture} {room} fixed price"),
                    ("as stated", f"{room} {fixture} leaking"),
                ],
            }
        )
    for hotel, place in zip(EN_HOTELS, EN_PLACES, strict=False):
        occasion = rng.choice(EN_OCCASIONS)
        facts.append(
            {
                "text": f"We booked {rng.randint(2, 6)} nights at {hotel} in {place} for our "
                f"{occasion}.",
                "questions": [
                    ("lacks a word", f"{hotel} {place} reservation"),
                    ("other form", f"booking {place} {occasion}"),
                    ("as stated", f"{place} {hotel.split()[-1]}"),
                ],
            }
        )
    for pet, clinic in zip(EN_PETS, EN_CLINICS, strict=True):
        facts.append(
            {
                "text": f"{pet} got vaccinated at the {clinic} vet on "
                f"{rng.choice(EN_MONTHS)} {rng.randint(2, 28)}, next dose in a year.",
                "questions": [
                    ("other form", f"{pet} vaccination"),
                    ("lacks a word", f"{pet} vet visit"),
                    ("as stated", f"vet {clinic}"),
                ],
            }
        )
    for service in EN_SERVICES:
        facts.append(
            {
                "text": f"I cancelled {service} because it went up to {rng.randint(11, 19)} "
                "dollars a month.",
                "questions": [
                    ("other form", f"{service} cancellation"),
                    ("lacks a word", f"{service} price dollars"),
                ],
            }
        )
    corrections = [
        (
            "My passport expires in {a} next year, so no rush on renewing it.",
            "I was wrong earlier: my passport expires in {b} this year, renewal is urgent.",
            ["passport expires", "passport renewal"],
            EN_MONTHS,
        ),
        (
            "The book club meets at the library on the first {a} of each month.",
            "Update: the book club now meets at the bakery on the first {b} instead.",
            ["book club meets", "book club day"],
            EN_WEEKDAYS,
        ),
        (
            "The cabin's wifi password is pinecone{a}.",
            "They changed the cabin wifi password, it is now lakeside{b}.",
            ["cabin wifi password"],
            [str(n) for n in range(10, 99)],
        ),
        (
            "Our parking spot at the new flat is number {a}.",
            "Correction, the parking spot at the flat is actually number {b}.",
            ["parking spot number", "flat parking"],
            [str(n) for n in range(100, 400)],
        ),
        (
            "The school play is on {a} evening at seven.",
            "The school play was moved, it is now on {b} evening at six.",
            ["school play evening", "when school play"],
            EN_WEEKDAYS,
        ),
    ]
    facts.extend(_corrected(rng, corrections))
    return facts


def _corrected(rng: random.Random, corrections: list[tuple]) -> list[dict]:
    """A fact each (older statement, its correction, queries, values): two different values,
    the older statement kept as `earlier`; the questions must find the correction."""
    facts = []
    for older, newer, queries, values in corrections:
        a, b = rng.sample(values, 2)
        facts.append(
            {
                "text": newer.format(b=b),
                "earlier": older.format(a=a),
                "questions": [("corrected", query) for query in queries],
            }
        )
    return facts


def _zh_facts(rng: random.Random) -> list[dict]:
    facts = []
    for department, doctor in zip(ZH_DEPARTMENTS, ZH_DOCTORS, strict=True):
        facts.append(
            {
                "text": f"{doctor}把我的{department}复查改到了{rng.choice(ZH_WEEKDAYS)}上午"
                f"{rng.randint(8, 11)}点。",
                "questions": [
                    ("lacks a word", f"{department} 复查 时间"),
                    ("lacks a word", f"{doctor} {department} 预约"),
                    ("as stated", f"复查 {department}"),
                ],
            }
        )
    for instrument in ZH_INSTRUMENTS:
        facts.append(
            {
                "text": f"我报了{instrument}课，每个{rng.choice(ZH_WEEKDAYS)}下班后去上。",
                "questions": [
                    ("lacks a word", f"{instrument}课 老师"),
                    ("other form", f"{instrument}课程"),
                    ("as stated", f"报了 {instrument}"),
                ],
            }
        )
    for fixture, room in zip(ZH_FIXTURES, ZH_ROOMS, strict=True):
        facts.append(
            {
                "text": f"师傅终于把{room}漏水的{fixture}修好了，花了{rng.randint(90, 400)}块。",
                "questions": [
                    ("other form", f"{fixture}维修"),
                    ("lacks a word", f"{room} {fixture} 价格"),
                    ("as stated", f"{fixture} 漏水"),
                ],
            }
        )
    for hotel, place in zip(ZH_HOTELS, ZH_PLACES, strict=False):
        facts.append(
            {
                "text": f"我们在{place}的{hotel}订了{rng.randint(2, 6)}晚，结婚纪念日去。",
                "questions": [
                    ("lacks a word", f"{place} {hotel} 预订"),
                    ("other form", f"{place}订酒店"),
                    ("as stated", f"{hotel} {place}"),
                ],
            }
        )
    for pet in ZH_PETS:
        facts.append(
            {
                "text": f"{pet}{rng.randint(3, 10)}月在宠物医院打了狂犬疫苗，明年再打。",
                "questions": [
                    ("other form", f"{pet}疫苗"),
                    ("lacks a word", f"{pet} 疫苗 日期"),
                    ("as stated", f"狂犬疫苗 {pet}"),
                ],
            }
        )
    for service in ZH_SERVICES:
        facts.append(
            {
                "text": f"我取消了{service}的订阅，涨到每月{rng.randint(11, 39)}块了。",
                "questions": [
                    ("other form", f"退订{service}"),
                    ("lacks a word", f"{service} 订阅 价格"),
                ],
            }
        )
    numbers = [str(n) for n in range(100, 400)]
    corrections = [
        ("我的护照明年{a}月到期，不着急续。", "之前说错了，护照今年{b}月就到期，得赶紧续。",
         ["护照 到期"], [str(n) for n in range(1, 13)]),
        ("读书会每月第一个{a}在图书馆聚。", "读书会改了，现在每月第一个{b}在面包店聚。",
         ["读书会 聚"], ZH_WEEKDAYS),
        ("小屋的无线密码是松果{a}。", "小屋的无线密码改了，现在是湖畔{b}。",
         ["小屋 无线密码"], numbers),
        ("新家的车位是{a}号。", "更正一下，新家的车位其实是{b}号。",
         ["车位 号", "新家 车位"], numbers),
    ]  # fmt: skip
    facts.extend(_corrected(rng, corrections))
    return facts


def _en_distractor(rng: random.Random) -> str:
    specialist, doctor = rng.choice(EN_SPECIALISTS), rng.choice(EN_DOCTORS)
    instrument, fixture = rng.choice(EN_INSTRUMENTS), rng.choice(EN_FIXTURES)
    place, hotel, pet = rng.choice(EN_PLACES), rng.choice(EN_HOTELS), rng.choice(EN_PETS)
    chore, room, service = rng.choice(EN_CHORES), rng.choice(EN_ROOMS), rng.choice(EN_SERVICES)
    return rng.choice(
        [
            f"Is a {specialist} usually covered by insurance?",
            f"What questions should I ask a {specialist}?",
            "How often should adults get a check-up?",
            f"Help me with {chore}, I have ten minutes.",
            f"My neighbour's {fixture} is making a noise, how do I tell them politely?",
            f"Is the {instrument} hard to learn as an adult? Be honest.",
            f"Find me a song with a {instrument} solo for the {room} speaker.",
            f"Is {hotel} part of a chain? A friend mentioned it.",
            f"What is the best month to visit {place}?",
            f"{pet} chewed a cable in the {room}, is that dangerous for a dog?",
            f"Write a short note about {pet}'s diet for the pet sitter.",
            f"Is {service} worth it for a family of four?",
            f"Dr. {doctor} wrote an article about sleep, summarize it.",
            "The school newsletter mentions the book club and the parking spot rules.",
            "Remind me how to reset a wifi password on an old router.",
        ]
    )


def _zh_distractor(rng: random.Random) -> str:
    department, doctor = rng.choice(ZH_DEPARTMENTS), rng.choice(ZH_DOCTORS)
    instrument, fixture = rng.choice(ZH_INSTRUMENTS), rng.choice(ZH_FIXTURES)
    place, hotel, pet = rng.choice(ZH_PLACES), rng.choice(ZH_HOTELS), rng.choice(ZH_PETS)
    chore, room, service = rng.choice(ZH_CHORES), rng.choice(ZH_ROOMS), rng.choice(ZH_SERVICES)
    return rng.choice(
        [
            f"{department}一般要排队多久？",
            f"帮我弄一下{chore}，我只有十分钟。",
            f"邻居家的{fixture}声音很大，怎么跟他说比较客气？",
            f"成年人学{instrument}难吗？说实话。",
            f"{place}几月份去最好？",
            f"{hotel}是连锁的吗？朋友提过。",
            f"{pet}在{room}咬了电线，危险吗？",
            f"{service}对一家四口划算吗？",
            f"{doctor}写了一篇关于睡眠的文章，帮我总结。",
            "宠物打疫苗前要注意什么？",
            "小区通知里提到了车位和读书会的事。",
        ]
    )


EN_REPLIES = [
    "Here is a short answer you can use.",
    "It depends, but usually it is fine.",
    "A few options, from cheapest to nicest.",
    "Happy to help. Want a checklist as well?",
]
ZH_REPLIES = [
    "给你一个简短的回答。",
    "看情况，不过一般没问题。",
    "给你几个选择，从便宜到好。",
    "乐意帮忙，要不要再列个清单？",
]


def build() -> dict:
    rng = random.Random(SEED)
    facts = both_languages(rng, _en_facts, _zh_facts)
    threads = thread_list(VISIBLE_THREADS, "talk", "gone")

    # Each fact (and the earlier statement a correction replaces) lands at a random turn; an
    # earlier statement always comes before its correction.
    turns = DISTRACTOR_TURNS + len(facts) + sum(1 for f in facts if "earlier" in f)
    slots = rng.sample(range(turns), turns - DISTRACTOR_TURNS)
    placed: dict[int, tuple[int, str]] = {}
    slot_iter = iter(slots)
    for index, fact in enumerate(facts):
        if "earlier" in fact:
            first, second = sorted([next(slot_iter), next(slot_iter)])
            placed[first] = (index, "earlier")
            placed[second] = (index, "text")
        else:
            placed[next(slot_iter)] = (index, "text")
    messages = []
    for turn in range(turns):
        thread = rng.randrange(VISIBLE_THREADS)
        fact_at = placed.get(turn)
        if fact_at is not None:
            index, field = fact_at
            lang = facts[index]["lang"]
            content = facts[index][field]
            fact = index if field == "text" else None
        else:
            lang = rng.choice(["en", "en", "zh"])
            content = (_en_distractor if lang == "en" else _zh_distractor)(rng)
            fact = None
        messages.append({"thread": thread, "role": "user", "content": content, "fact": fact})
        reply = rng.choice(EN_REPLIES if lang == "en" else ZH_REPLIES)
        messages.append({"thread": thread, "role": "assistant", "content": reply, "fact": None})
    hide_decoys(rng, messages, facts, count=DECOY_FACTS, first=VISIBLE_THREADS)
    return {"threads": threads, "messages": messages, "questions": questions_of(facts)}


def main() -> None:
    write_set(OUTPUT, build())


if __name__ == "__main__":
    main()
