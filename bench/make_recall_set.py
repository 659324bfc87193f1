"""Generate the labelled lookback set `bench/recall.py` measures (deterministic).

    python bench/make_recall_set.py   (writes bench/recall_set/lookback.json)

One heavy user's history, English and Chinese: facts about the user's life, each stated once,
among thousands of distractor messages that reuse the same words (the same relatives, events,
places and foods in other sentences, some naming two of a fact's keywords together), plus
hidden threads (archived, deleted, sub-agent) repeating some facts word for word, which no
search may return. Each fact has questions as a model would search for it, in three kinds:

- `reordered`: the fact's keywords in another order ("wedding sister" for "my sister's
  wedding");
- `contained`: a shorter form contained in the fact's word ("sister" in "sister's", "peanut"
  in "peanuts", "move" in "moved");
- `other form`: a form the fact does not contain ("allergy" for "allergic", "妹妹婚礼" for
  "妹妹的婚礼"), which no substring search can find: kept so the figures stay honest;
- `one word`: a single keyword as the fact states it (a pet's name, a company, "allergic"),
  which a literal substring search finds too, among whatever else says it.

The file lists threads (title, status, source), messages in time order (thread, role,
content, the fact they state if any) and questions (query, the fact, language, kind).
Standard library only; the same seed always writes the same bytes.
"""

import random
from pathlib import Path

from labelled_sets import both_languages, hide_decoys, questions_of, thread_list, write_set

SEED = 20261201
OUTPUT = Path(__file__).resolve().parent / "recall_set" / "lookback.json"
VISIBLE_THREADS = 160
DISTRACTOR_TURNS = 4_200  # each a user message and an assistant reply
DECOY_FACTS = 30

EN_RELATIVES = [
    "sister", "brother", "cousin", "aunt", "uncle", "grandmother", "grandfather", "nephew",
    "niece", "neighbour", "colleague", "boss", "roommate", "godmother",
]  # fmt: skip
EN_EVENTS = [
    "wedding", "birthday party", "graduation", "retirement dinner", "housewarming",
    "baby shower", "anniversary", "engagement party",
]  # fmt: skip
EN_CITIES = [
    "Kyoto", "Lisbon", "Denver", "Oslo", "Tucson", "Porto", "Hanoi", "Bergen", "Valencia",
    "Quebec", "Nairobi", "Tallinn", "Cusco", "Seville", "Adelaide", "Krakow",
]  # fmt: skip
EN_MONTHS = [
    "January", "February", "March", "April", "May", "June", "July", "August", "September",
    "October", "November", "December",
]  # fmt: skip
EN_FOODS = [
    ("peanuts", "peanut"), ("shellfish", "shellfish"), ("strawberries", "strawberry"),
    ("almonds", "almond"), ("sesame seeds", "sesame"), ("kiwis", "kiwi"),
]  # fmt: skip
EN_PETS = [
    ("dog", "beagle"), ("dog", "dachshund"), ("cat", "siamese"), ("cat", "ragdoll"),
    ("dog", "greyhound"), ("parrot", "cockatiel"),
]  # fmt: skip
EN_PET_NAMES = ["Biscuit", "Pepper", "Mochi", "Juniper", "Waffles", "Pickles"]
EN_COMPANIES = ["Norbridge", "Calloway Labs", "Tessera", "Mondrian Foods", "Halvorsen"]
EN_JOBS = ["data analyst", "nurse", "architect", "sous chef", "teacher"]
EN_CARS = [("red", "hatchback"), ("grey", "pickup"), ("blue", "minivan"), ("green", "sedan")]
EN_TOPICS = [
    "the weather", "a recipe for soup", "my commute", "a podcast", "the news", "a book",
    "running shoes", "a spreadsheet", "the garden", "a crossword", "taxes", "a playlist",
]  # fmt: skip

ZH_RELATIVES = [
    "姐姐", "妹妹", "哥哥", "弟弟", "表哥", "舅舅", "阿姨", "奶奶", "爷爷", "同事", "老板",
    "室友", "邻居", "表妹",
]  # fmt: skip
ZH_EVENTS = ["婚礼", "生日聚会", "毕业典礼", "退休晚宴", "乔迁宴", "订婚宴", "满月酒", "结婚纪念日"]
ZH_CITIES = [
    "京都", "里斯本", "成都", "大理", "青岛", "西安", "厦门", "昆明", "桂林", "苏州", "拉萨",
    "哈尔滨", "三亚", "洛阳", "敦煌", "丽江",
]  # fmt: skip
ZH_MONTHS = ["一月", "二月", "三月", "四月", "五月", "六月", "七月", "八月", "九月", "十月"]
ZH_FOODS = ["花生", "海鲜", "芒果", "杏仁", "芝麻", "菠萝"]
ZH_PETS = [("狗", "柯基"), ("猫", "布偶猫"), ("狗", "柴犬"), ("猫", "橘猫"), ("鹦鹉", "玄凤")]
ZH_PET_NAMES = ["豆豆", "年糕", "可乐", "球球", "馒头"]
ZH_COMPANIES = ["星河科技", "远山食品", "青禾设计", "北辰物流", "蓝鲸教育"]
ZH_JOBS = ["数据分析师", "护士", "建筑师", "厨师", "老师"]
ZH_TOPICS = [
    "天气", "做汤的方法", "通勤", "一个播客", "新闻", "一本书", "跑鞋", "表格", "花园", "填字游戏",
    "报税", "歌单",
]  # fmt: skip


FAMILY_FACTS = 40


def _family_events(
    rng: random.Random, relatives: list[str], events: list[str], cities: list[str], by: int
) -> list[tuple[str, str, str]]:
    """Distinct (relative, event) pairs with a city each, never the same city twice with the
    same relative (`by` 0) or event (`by` 1), so that a question naming the city finds one."""
    pairs = [(r, e) for r in relatives for e in events]
    rng.shuffle(pairs)
    places: set[tuple[str, str]] = set()
    chosen = []
    for pair in pairs[:FAMILY_FACTS]:
        city = rng.choice([c for c in cities if (c, pair[by]) not in places])
        places.add((city, pair[by]))
        chosen.append((*pair, city))
    return chosen


def _en_facts(rng: random.Random) -> list[dict]:
    facts = []
    for relative, event, city in _family_events(rng, EN_RELATIVES, EN_EVENTS, EN_CITIES, 1):
        month = rng.choice(EN_MONTHS)
        day = rng.randint(2, 28)
        facts.append(
            {
                "text": f"My {relative}'s {event} is on {month} {day} in {city}, "
                "so I need to book time off.",
                "questions": [
                    ("reordered", f"{event.split()[0]} {relative}"),
                    ("contained", f"{relative} {event.split()[0]} {city}"),
                    ("reordered", f"{city} {event.split()[0]}"),
                ],
            }
        )
    for full, short in EN_FOODS:
        facts.append(
            {
                "text": f"Please remember I'm allergic to {full}, even a little makes me sick.",
                "questions": [
                    ("contained", f"{short} allergic"),
                    ("other form", f"{short} allergy"),
                    ("one word", "allergic"),
                ],
            }
        )
    for (kind, breed), name in zip(EN_PETS, EN_PET_NAMES, strict=True):
        facts.append(
            {
                "text": f"We adopted a {breed} {kind} named {name} from the shelter last spring.",
                "questions": [
                    ("reordered", f"{kind} {breed} adopted"),
                    ("contained", f"{name} adopt"),
                    ("one word", name),
                ],
            }
        )
    for company, job in zip(EN_COMPANIES, EN_JOBS, strict=True):
        month = rng.choice(EN_MONTHS)
        facts.append(
            {
                "text": f"I moved to {company} in {month} and started as a {job} there.",
                "questions": [
                    ("reordered", f"{job} {company}"),
                    ("contained", f"move {company}"),
                    ("other form", f"{company} job start"),
                    ("one word", company),
                ],
            }
        )
    for color, car in EN_CARS:
        year = rng.randint(2015, 2024)
        facts.append(
            {
                "text": f"The {color} {car} we bought in {year} is the one I drive to work.",
                "questions": [("reordered", f"{car} {color}"), ("contained", f"bought {car}")],
            }
        )
    return facts


def _zh_facts(rng: random.Random) -> list[dict]:
    facts = []
    for relative, event, city in _family_events(rng, ZH_RELATIVES, ZH_EVENTS, ZH_CITIES, 0):
        month = rng.choice(ZH_MONTHS)
        day = rng.randint(2, 28)
        facts.append(
            {
                "text": f"我{relative}的{event}定在{month}{day}号，在{city}办，我得提前请假。",
                "questions": [
                    ("reordered", f"{event} {relative}"),
                    ("reordered", f"{city} {relative}"),
                    ("other form", f"{relative}{event}"),
                ],
            }
        )
    for food in ZH_FOODS:
        facts.append(
            {
                "text": f"请记住我对{food}过敏，吃一点就会难受。",
                "questions": [
                    ("reordered", f"过敏 {food}"),
                    ("contained", f"{food[0]} 过敏"),
                    ("one word", "过敏"),
                ],
            }
        )
    for (_, breed), name in zip(ZH_PETS, ZH_PET_NAMES, strict=True):
        facts.append(
            {
                "text": f"去年春天我们从救助站领养了一只{breed}，叫{name}。",
                "questions": [
                    ("reordered", f"{name} {breed}"),
                    ("reordered", f"领养 {breed}"),
                    ("one word", name),
                ],
            }
        )
    for company, job in zip(ZH_COMPANIES, ZH_JOBS, strict=True):
        facts.append(
            {
                "text": f"我今年跳槽去了{company}，现在做{job}。",
                "questions": [
                    ("reordered", f"{job} {company}"),
                    ("other form", f"{company}工作"),
                    ("one word", company),
                ],
            }
        )
    return facts


def _en_distractor(rng: random.Random) -> str:
    relative, event = rng.choice(EN_RELATIVES), rng.choice(EN_EVENTS)
    city, topic = rng.choice(EN_CITIES), rng.choice(EN_TOPICS)
    food, _ = rng.choice(EN_FOODS)
    kind, breed = rng.choice(EN_PETS)
    return rng.choice(
        [
            f"Can you help me write a note about {topic} for my {relative}?",
            f"What should I wear to a {event}? Something simple, please.",
            f"I read that {city} is lovely in {rng.choice(EN_MONTHS)}. Is that true?",
            f"Give me three ideas for a gift, my budget is {rng.randint(20, 90)} dollars.",
            f"Is it safe to give {food} to a {kind}?",
            f"Watched a film about a {event} where the {relative} steals the show.",
            f"My {relative} keeps asking me about {topic}, what do I say?",
            f"Summarize this article about {topic} in two lines.",
            f"How long is the flight from {city} to {rng.choice(EN_CITIES)}?",
            f"A {breed} at the park today reminded me of a {event} photo.",
            f"Plan a weekend in {city} with a {relative} who likes {topic}.",
            f"Translate 'see you at the {event}' into French.",
            f"Any tips for {topic}? I keep forgetting things.",
        ]
    )


def _zh_distractor(rng: random.Random) -> str:
    relative, event = rng.choice(ZH_RELATIVES), rng.choice(ZH_EVENTS)
    city, topic = rng.choice(ZH_CITIES), rng.choice(ZH_TOPICS)
    food = rng.choice(ZH_FOODS)
    kind, breed = rng.choice(ZH_PETS)
    return rng.choice(
        [
            f"帮我给{relative}写一段关于{topic}的话。",
            f"参加{event}穿什么合适？简单一点就好。",
            f"听说{city}{rng.choice(ZH_MONTHS)}很美，是真的吗？",
            f"给我三个送礼的主意，预算{rng.randint(100, 900)}块。",
            f"{kind}可以吃{food}吗？",
            f"看了一部电影，讲{event}上{relative}抢了风头。",
            f"我{relative}老问我{topic}的事，我该怎么说？",
            f"用两句话总结这篇关于{topic}的文章。",
            f"从{city}飞{rng.choice(ZH_CITIES)}要多久？",
            f"今天公园里有只{breed}，让我想起一张{event}的照片。",
            f"帮我安排一个{city}的周末，和喜欢{topic}的{relative}一起。",
            f"关于{topic}有什么建议吗？我总是忘事。",
        ]
    )


EN_REPLIES = [
    "Sure, here is a short version you can adapt.",
    "Good question. It depends a little on the season, but generally yes.",
    "Here are a few ideas to get you started.",
    "I would keep it simple and friendly.",
    "That sounds like a plan. Want me to make a checklist?",
]
ZH_REPLIES = [
    "好的，这里有一个简短的版本，你可以改改。",
    "好问题，这要看季节，不过一般来说可以。",
    "给你几个思路参考一下。",
    "我建议简单、亲切一点。",
    "听起来不错，要不要我列个清单？",
]


def build() -> dict:
    rng = random.Random(SEED)
    facts = both_languages(rng, _en_facts, _zh_facts)
    threads = thread_list(VISIBLE_THREADS, "chat", "hidden")

    # Facts land at random points of the history: some old, some recent.
    turns = DISTRACTOR_TURNS + len(facts)
    fact_turn = dict(zip(rng.sample(range(turns), len(facts)), range(len(facts)), strict=True))
    messages = []
    for turn in range(turns):
        thread = rng.randrange(VISIBLE_THREADS)
        fact = fact_turn.get(turn)
        lang = facts[fact]["lang"] if fact is not None else rng.choice(["en", "en", "zh"])
        if fact is not None:
            content = facts[fact]["text"]
        else:
            content = (_en_distractor if lang == "en" else _zh_distractor)(rng)
        messages.append({"thread": thread, "role": "user", "content": content, "fact": fact})
        reply = rng.choice(EN_REPLIES if lang == "en" else ZH_REPLIES)
        messages.append({"thread": thread, "role": "assistant", "content": reply, "fact": None})
    hide_decoys(rng, messages, facts, count=DECOY_FACTS, first=VISIBLE_THREADS)
    return {"threads": threads, "messages": messages, "questions": questions_of(facts)}


def main() -> None:
    write_set(OUTPUT, build())


if __name__ == "__main__":
    main()
