"""Generate the labelled set of questions over long conversations `bench/recall.py` measures
(deterministic).

    python bench/make_dialogue_set.py   (writes bench/recall_set/dialogue.json)

Written apart from the two keyword sets: eight long conversations between two people (four in
English, four in Chinese), each the history of its own user (one person the user, the other
the assistant), in 16 sessions (threads) of 26 to 32 turns, about 460 turns a conversation.
Most turns are small talk that reuses the facts' words (relatives, places, events, weekdays,
"when", "time", "meeting") without stating them. Planted among them, each once:

- `single`: a fact stated in one turn ("My cousin finally got married last weekend in
  Porto"), asked as a person would ask ("Where did my cousin marry?"), in other word forms
  than the fact's or with words it lacks, often with the speaker's name;
- `date`: a date or time ("The parent-teacher meeting is on Thursday the 12th at 4:30"),
  asked "When is the parent-teacher meeting?" or "What time ...";
- `two sessions`: a fact spread over two turns of different sessions ("My brother Luca moved
  to Lyon" ... "Luca found a job as a pharmacist"), both needed; a question counts the share of
  its turns among the first k hits.

Every question is sent as written: a full sentence with its question words and punctuation.
One hidden (archived) session per conversation repeats some facts word for word; no search may
return it. Same layout as the other sets (`labelled_sets`), plus `owner` on threads and
questions (which conversation's user) and several turns per fact. Standard library only; the
same seed always writes the same bytes.
"""

import random
from pathlib import Path

from labelled_sets import write_set

SEED = 28_2026
OUTPUT = Path(__file__).resolve().parent / "recall_set" / "dialogue.json"
SESSIONS = 16
TURNS = (26, 32)

EN_PEOPLE = [("Caroline", "Melanie"), ("Jon", "Gina"), ("Priya", "Tom"), ("Evan", "Sam")]
ZH_PEOPLE = [("小雨", "阿杰"), ("王芳", "李明"), ("陈静", "周涛"), ("刘洋", "赵敏")]

EN = {
    "rel": ["sister", "brother", "cousin", "aunt", "uncle", "neighbour", "best friend", "boss"],
    "name": ["Luca", "Nadia", "Omar", "Hana", "Felix", "Rosa", "Dmitri", "Ines", "Kofi"],
    "city": ["Porto", "Lyon", "Krakow", "Valencia", "Bergen", "Tallinn", "Ghent", "Graz"],
    "pet": ["puppy", "kitten", "rabbit", "parrot", "hamster"],
    "petname": ["Biscuit", "Pepper", "Mochi", "Sunny", "Noodle", "Olive"],
    "org": ["animal shelter", "food bank", "community garden", "public library", "soup kitchen"],
    "instrument": ["violin", "saxophone", "drums", "piano", "mandolin", "flute"],
    "allergen": ["peanuts", "shellfish", "penicillin", "cat hair", "pollen", "sesame"],
    "job": ["pharmacist", "architect", "nurse", "translator", "electrician", "librarian"],
    "company": ["Northwind", "Brightline", "Copperleaf", "Tidewater", "Ironbark"],
    "course": ["photography", "first aid", "sign language", "woodworking", "pottery"],
    "event": ["parent-teacher meeting", "book club", "charity run", "job interview",
              "dentist appointment", "school play", "support group", "wine tasting"],
    "venue": ["town hall", "rooftop bar", "botanical garden", "old chapel", "boathouse"],
    "weekday": ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"],
    "month": ["March", "April", "May", "June", "July", "August", "September", "October"],
    "hobby": ["painting", "hiking", "baking", "chess", "gardening", "running", "knitting"],
    "race": ["half marathon", "10k race", "triathlon", "trail race", "fun run"],
}  # fmt: skip

ZH = {
    "rel": ["姐姐", "哥哥", "表妹", "舅舅", "邻居", "好朋友", "老板", "室友"],
    "name": ["小林", "阿明", "晓红", "大伟", "美玲", "志强", "海燕", "建国"],
    "city": ["杭州", "成都", "厦门", "青岛", "西安", "昆明", "大连", "苏州"],
    "pet": ["小狗", "小猫", "兔子", "鹦鹉", "仓鼠"],
    "petname": ["豆豆", "花卷", "芝麻", "布丁", "团子", "雪球"],
    "org": ["动物收容所", "食物银行", "社区菜园", "市图书馆", "养老院"],
    "instrument": ["小提琴", "萨克斯", "架子鼓", "钢琴", "古筝", "长笛"],
    "allergen": ["花生", "海鲜", "青霉素", "猫毛", "花粉", "芒果"],
    "job": ["药剂师", "建筑师", "护士", "翻译", "电工", "图书管理员"],
    "company": ["华信", "远航", "青禾", "星河", "鼎盛"],
    "course": ["摄影", "急救", "手语", "木工", "陶艺"],
    "event": ["家长会", "读书会", "慈善跑", "面试", "牙医预约", "话剧演出", "互助小组", "品酒会"],
    "venue": ["市政厅", "天台酒吧", "植物园", "老教堂", "船屋"],
    "weekday": ["周一", "周二", "周三", "周四", "周五", "周六", "周日"],
    "month": ["三月", "四月", "五月", "六月", "七月", "八月", "九月", "十月"],
    "hobby": ["画画", "爬山", "烘焙", "下棋", "种花", "跑步", "织毛衣"],
}  # fmt: skip

ZH_DAYS = ["一", "二", "三", "五", "八", "十", "十二", "十五", "十八", "二十", "二十五", "二十八"]


def _en_facts(rng: random.Random, me: str) -> list[dict]:
    """One conversation's English facts: (kind, turns, question), turns in session order."""
    v = {key: rng.sample(values, len(values)) for key, values in EN.items()}
    time = f"{rng.randint(1, 11)}:{rng.choice(['00', '15', '30', '45'])}"
    day = rng.randint(2, 28)
    month = v["month"][0]
    who = [me, "I"]
    whose = [rng.choice([f"{me}'s", "my"]) for _ in range(2)]
    article = "an" if v["race"][0][0] in "aeiou" else "a"
    facts = [
        ("single", [f"My {v['rel'][0]} finally got married last weekend in {v['city'][0]}, "
                    "the whole family flew in for it."],
         f"Where did {whose[0]} {v['rel'][0]} marry?"),
        ("single", [f"We adopted a {v['pet'][0]} from the shelter, we named her "
                    f"{v['petname'][0]}."],
         f"What is the name of the {v['pet'][0]} {rng.choice(who)} adopted?"),
        ("single", [f"I've started volunteering at the {v['org'][0]} on weekends, it keeps me "
                    "grounded."],
         f"Where does {me} volunteer?"),
        ("single", [f"Turns out I'm allergic to {v['allergen'][0]}, the doctor confirmed it."],
         f"What is {me} allergic to?"),
        ("single", [f"My {v['rel'][1]} is learning to play the {v['instrument'][0]}, the "
                    "neighbours are thrilled..."],
         f"Which instrument is {whose[1]} {v['rel'][1]} learning?"),
        ("single", [f"I switched jobs! I'm now a {v['job'][0]} at {v['company'][0]}."],
         f"What is {me}'s new job?"),
        ("single", [f"Honestly {v['hobby'][0]} is what keeps me sane these days, I do it "
                    "every morning."],
         f"What hobby helps {me} relax?"),
        ("single", [f"We're planning a trip to {v['city'][1]} with the kids for the "
                    "summer holidays."],
         f"Which city is {me} planning to visit with the children?"),
        ("date", [f"The {v['event'][0]} is on {v['weekday'][0]} the {day}th at {time}."],
         f"When is the {v['event'][0]}?"),
        ("date", [f"I went to the {v['event'][1]} on {v['weekday'][1]}, it was really "
                  "moving."],
         f"When did {me} go to the {v['event'][1]}?"),
        ("date", [f"My {v['rel'][2]}'s birthday party is on {day} {month}, save the date."],
         f"When is the birthday party of {me}'s {v['rel'][2]}?"),
        ("date", [f"I ran my first {v['race'][0]} on {v['weekday'][2]} morning, finished "
                  f"in {rng.randint(40, 70)} minutes."],
         f"When did {me} run {article} {v['race'][0]}?"),
        ("date", [f"The {v['course'][0]} class starts at {time} every {v['weekday'][3]}."],
         f"What time does the {v['course'][0]} class start?"),
        ("two sessions", [f"My {v['rel'][3]} {v['name'][0]} moved to {v['city'][2]} last "
                          "month.",
                          f"{v['name'][0]} found a job as a {v['job'][1]} there, finally!"],
         f"What job does {me}'s {v['rel'][3]} have in {v['city'][2]}?"),
        ("two sessions", [f"We booked the {v['venue'][0]} for the {v['event'][3]}.",
                          f"The {v['event'][3]} got moved to {v['weekday'][4]} because of the "
                          "weather."],
         f"When is the {v['event'][3]} at the {v['venue'][0]} happening now?"),
        ("two sessions", [f"I signed up for a {v['course'][1]} course at the community centre.",
                          f"Finished the {v['course'][1]} course today, got my certificate!"],
         f"Did {me} finish the {v['course'][1]} course from the community centre?"),
        ("two sessions", [f"{v['name'][1]} from work invited us to {v['city'][3]} in "
                          f"{v['month'][1]}.",
                          f"We're staying with {v['name'][1]} for a whole week, can't wait."],
         f"How long is {me} staying with {v['name'][1]} in {v['city'][3]}?"),
    ]  # fmt: skip
    return [{"kind": k, "turns": t, "question": q} for k, t, q in facts]


def _zh_facts(rng: random.Random, me: str) -> list[dict]:
    """One conversation's Chinese facts, as `_en_facts`."""
    v = {key: rng.sample(values, len(values)) for key, values in ZH.items()}
    hour = rng.choice(["两点", "三点半", "四点", "七点", "九点半"])
    day = rng.choice(ZH_DAYS)
    facts = [
        ("single", [f"我{v['rel'][0]}上周末在{v['city'][0]}结婚了，全家人都飞过去了。"],
         f"{me}的{v['rel'][0]}是在哪里结的婚？"),
        ("single", [f"我们从收容所领养了一只{v['pet'][0]}，给它起名叫{v['petname'][0]}。"],
         f"{me}领养的{v['pet'][0]}叫什么名字？"),
        ("single", [f"我最近周末都去{v['org'][0]}做志愿者，感觉很踏实。"],
         f"{me}周末在哪里做志愿者？"),
        ("single", [f"医生确认了，我对{v['allergen'][0]}过敏。"],
         f"{me}对什么过敏？"),
        ("single", [f"我{v['rel'][1]}在学{v['instrument'][0]}，邻居们都快疯了。"],
         f"{me}的{v['rel'][1]}在学什么乐器？"),
        ("single", [f"我换工作了！现在在{v['company'][0]}当{v['job'][0]}。"],
         f"{me}现在的新工作是什么？"),
        ("single", [f"说实话现在每天早上{v['hobby'][0]}是让我保持清醒的办法。"],
         f"{me}每天早上靠什么放松？"),
        ("single", [f"我们打算暑假带孩子去{v['city'][1]}玩。"],
         f"{me}暑假打算带孩子去哪个城市？"),
        ("date", [f"{v['event'][0]}定在{v['weekday'][0]}下午{hour}。"],
         f"{v['event'][0]}是什么时候？"),
        ("date", [f"我{v['weekday'][1]}去参加了{v['event'][1]}，挺感动的。"],
         f"{me}是哪天去的{v['event'][1]}？"),
        ("date", [f"我{v['rel'][2]}的生日聚会在{v['month'][0]}{day}号，记得空出来。"],
         f"{me}{v['rel'][2]}的生日聚会是哪天？"),
        ("date", [f"{v['course'][0]}课每{v['weekday'][3]}{hour}开始。"],
         f"{v['course'][0]}课几点开始？"),
        ("two sessions", [f"我{v['rel'][3]}{v['name'][0]}上个月搬到{v['city'][2]}去了。",
                          f"{v['name'][0]}终于在那边找到工作了，当{v['job'][1]}。"],
         f"{me}的{v['rel'][3]}在{v['city'][2]}做什么工作？"),
        ("two sessions", [f"我们订了{v['venue'][0]}办{v['event'][3]}。",
                          f"因为天气原因，{v['event'][3]}改到{v['weekday'][4]}了。"],
         f"{v['venue'][0]}的{v['event'][3]}现在改到什么时候了？"),
        ("two sessions", [f"我报了社区中心的{v['course'][1]}课程。",
                          f"今天{v['course'][1]}课程结业了，拿到证书了！"],
         f"{me}报的{v['course'][1]}课程结业了吗？"),
    ]  # fmt: skip
    return [{"kind": k, "turns": t, "question": q} for k, t, q in facts]


def _en_small_talk(rng: random.Random, me: str, other: str) -> str:
    v = {key: rng.choice(values) for key, values in EN.items()}
    name = rng.choice([me, other])
    return rng.choice(
        [
            f"How is your {v['rel']} doing these days?",
            f"I love {v['city']} in the spring, we should go back some time.",
            f"When do you want to meet this week? {v['weekday']} works for me.",
            "What time is it over there? I keep forgetting the time difference.",
            f"My {v['rel']} says hi, {name}!",
            f"The kids keep asking for a {v['pet']}, I'm not sure we're ready.",
            f"I have a meeting on {v['weekday']}, can we talk after?",
            f"{v['name']} was asking about you the other day.",
            f"Maybe I'll try a {v['course']} course someday, who knows.",
            f"Work has been crazy, the {v['event']} took all week to prepare.",
            f"Did you ever go to the {v['venue']}? People say it's lovely.",
            f"I read that {v['job']}s are in demand in {v['city']}.",
            f"Is {v['hobby']} still your thing, {name}?",
            f"Remember when we got lost in {v['city']}? Good times.",
            f"My {v['rel']} keeps talking about the {v['event']}.",
            f"I tried {v['hobby']} once, it was harder than it looks.",
            "Haha, that's so true.",
            "Ugh, Mondays. Coffee first, talk later.",
            f"Where did you get that {v['instrument']}? It sounds amazing.",
            f"Are you free in {v['month']}? We could plan something.",
            f"Did {v['name']} ever find a new place?",
            "I'll tell you everything when we meet, it's a long story!",
            f"The weather in {v['city']} was awful when I was there.",
            f"Congrats again, {name}! You deserve it.",
            f"We should do a {v['hobby']} weekend together, {name}.",
            f"My {v['rel']} works at {v['company']} now, small world.",
            f"What did the doctor say about the {v['allergen']} thing?",
            f"Are you going to the {v['event']} this year?",
        ]
    )


def _zh_small_talk(rng: random.Random, me: str, other: str) -> str:
    v = {key: rng.choice(values) for key, values in ZH.items()}
    name = rng.choice([me, other])
    return rng.choice(
        [
            f"你{v['rel']}最近怎么样？",
            f"我很喜欢春天的{v['city']}，什么时候再去一次吧。",
            f"这周什么时候见面？{v['weekday']}我有空。",
            "你那边现在几点了？我老是记不住时差。",
            f"我{v['rel']}让我跟你问好，{name}！",
            f"孩子们一直想养{v['pet']}，我还没准备好。",
            f"我{v['weekday']}有个会，之后再聊吧。",
            f"{v['name']}前几天还问起你呢。",
            f"说不定哪天我也去上个{v['course']}课。",
            f"工作太忙了，为了{v['event']}准备了一整周。",
            f"你去过{v['venue']}吗？听说很漂亮。",
            f"听说{v['city']}现在很缺{v['job']}。",
            f"{name}，你还在{v['hobby']}吗？",
            f"还记得我们在{v['city']}迷路那次吗？",
            f"我{v['rel']}一直在说{v['event']}的事。",
            f"我试过一次{v['hobby']}，比看起来难多了。",
            "哈哈，太对了。",
            "周一好难熬，先喝杯咖啡。",
            f"你那把{v['instrument']}在哪买的？声音真好听。",
            f"{v['month']}你有空吗？我们可以计划一下。",
            f"{v['name']}找到新房子了吗？",
            "见面再跟你细说，说来话长！",
            f"我去{v['city']}那几天天气特别差。",
            f"再次恭喜你，{name}！",
            f"我{v['rel']}现在在{v['company']}上班，世界真小。",
            f"医生怎么说{v['allergen']}的事？",
            f"你今年去{v['event']}吗？",
        ]
    )


def _conversation(rng: random.Random, lang: str, me: str, other: str) -> dict:
    """One conversation: its sessions' turns with the facts planted, and its questions."""
    facts = (_en_facts if lang == "en" else _zh_facts)(rng, me)
    small_talk = _en_small_talk if lang == "en" else _zh_small_talk
    sessions = [
        [small_talk(rng, me, other) for _ in range(rng.randint(*TURNS))] for _ in range(SESSIONS)
    ]
    for index, fact in enumerate(facts):
        chosen = sorted(rng.sample(range(SESSIONS), len(fact["turns"])))
        for session, text in zip(chosen, fact["turns"], strict=True):
            at = rng.randrange(len(sessions[session]) + 1)
            sessions[session].insert(at, (index, text))
    return {"facts": facts, "sessions": sessions}


def build() -> dict:
    rng = random.Random(SEED)
    threads: list[dict] = []
    messages: list[dict] = []
    questions: list[dict] = []
    fact_base = 0
    people = [("en", pair) for pair in EN_PEOPLE] + [("zh", pair) for pair in ZH_PEOPLE]
    for owner, (lang, (me, other)) in enumerate(people):
        made = _conversation(rng, lang, me, other)
        for session, turns in enumerate(made["sessions"]):
            threads.append(
                {
                    "title": f"{me} & {other} {session + 1}",
                    "status": "active",
                    "source": "chat",
                    "owner": owner,
                }
            )
            thread = len(threads) - 1
            for number, turn in enumerate(turns):
                fact, text = turn if isinstance(turn, tuple) else (None, turn)
                messages.append(
                    {
                        "thread": thread,
                        "role": "user" if number % 2 == 0 else "assistant",
                        "content": text,
                        "fact": None if fact is None else fact_base + fact,
                    }
                )
        # One archived session repeating some facts word for word: never to be returned.
        threads.append(
            {"title": f"{me} & {other} (old)", "status": "archived", "source": "chat",
             "owner": owner}
        )  # fmt: skip
        for fact in rng.sample(made["facts"], 5):
            for text in fact["turns"]:
                messages.append(
                    {"thread": len(threads) - 1, "role": "user", "content": text, "fact": None}
                )
        questions += [
            {
                "query": fact["question"],
                "fact": fact_base + index,
                "lang": lang,
                "kind": fact["kind"],
                "owner": owner,
            }
            for index, fact in enumerate(made["facts"])
        ]
        fact_base += len(made["facts"])
    return {"threads": threads, "messages": messages, "questions": questions}


def main() -> None:
    write_set(OUTPUT, build())


if __name__ == "__main__":
    main()
