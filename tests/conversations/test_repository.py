import itertools
import json
from datetime import UTC, datetime, timedelta, timezone

import pytest
from django.db import connection
from django.db.models import Q
from django.test.utils import CaptureQueriesContext
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from conversations.models import VISIBLE_MESSAGE, VISIBLE_THREAD, Conversation, Message
from conversations.repository import read_thread_messages, search, search_thread_messages, terms
from conversations.repository.arguments import HistoryNotFound, HistoryQueryError
from conversations.repository.budgets import (
    CONTENT_MAX_BYTES,
    CONTENTS_MAX_BYTES,
    READ_RESPONSE_MAX_BYTES,
    SEARCH_RESPONSE_MAX_BYTES,
    SNIPPET_MAX_BYTES,
    TITLE_MAX_BYTES,
    TOOL_CALL_MAX_BYTES,
    TOOL_CALLS_MAX,
    TOOL_CALLS_MAX_BYTES,
    escaped_bytes,
    take_within,
    to_json,
)
from conversations.repository.read import (
    LOOKBACK_TOOL_NAMES,
    _read_bound,
    _tool_call_frame_bytes,
    _tool_call_item,
)
from conversations.utils.string_utils import STORABLE_TEXT_REQUIREMENT
from tests.contract.helpers import HIT_KEYS, MESSAGE_KEYS, TOOL_CALL_KEYS
from tests.factories import ConversationFactory, MessageFactory, ToolCallFactory, UserFactory

pytestmark = pytest.mark.django_db

MARKER = "ZQXV-LEAK-7f3a"
T0 = datetime(2026, 1, 1, tzinfo=UTC)
# Text whose JSON form is as large as it gets: escapes, 4-byte emoji, control characters.
HOSTILE = '"\\\n\x01😀'


def _size(response: dict) -> int:
    return len(to_json(response).encode("utf-8"))


def _thread(user, **kwargs) -> Conversation:
    return ConversationFactory(user=user, **kwargs)


def _messages(thread: Conversation, contents: list[str], **kwargs) -> list[Message]:
    return [
        MessageFactory(
            conversation=thread,
            content=content,
            role=Message.Role.USER if i % 2 == 0 else Message.Role.ASSISTANT,
            created_at=T0 + timedelta(minutes=i),
            **kwargs,
        )
        for i, content in enumerate(contents)
    ]


def _ids(response: dict, key: str = "messages") -> list[int]:
    return [item["message_id"] for item in response[key]]


@pytest.fixture(params=["newest first", "indexed"])
def search_step(request, monkeypatch):
    """Each step of a search in turn: the scan of the newest messages (which answers whenever
    they hold a full page of hits), and the indexed one, forced by an empty window."""
    if request.param == "indexed":
        monkeypatch.setattr(search, "SEARCH_WINDOW", 0)
    return request.param


def _contains_or_form(content: str, term: str) -> bool:
    """Whether `content` contains `term` case-insensitively, or a form of it: its stem (a word
    of letters), or half its two-character pieces (a run of CJK characters)."""
    upper = content.upper()
    stem, grams = terms.stem(term), terms.cjk_bigrams(term)
    if term.upper() in upper or (stem is not None and stem.upper() in upper):
        return True
    return grams is not None and 2 * sum(gram in content for gram in grams) >= len(grams)


def _served(query: str, search_step: str) -> bool:
    """Whether the step `search_step` finds `query`'s messages at all: the indexed step (an
    empty window) finds nothing for a query with no term an index serves."""
    return search_step != "indexed" or any(
        terms.has_trigram(term) or terms.is_cjk_pair(term) or terms.cjk_bigrams(term)
        for term in terms.query_terms(query)
    )


@pytest.fixture
def planted():
    """A user with one visible thread, and the marker planted in every forbidden place."""
    user = UserFactory()
    visible = _thread(user, title="visible thread", metadata={"note": MARKER})
    text = _messages(visible, ["ordinary words one", "ordinary words two"])
    Message.objects.filter(pk=text[0].pk).update(
        metadata={"m": MARKER},
        image_content=f"data:{MARKER}",
        attachments=[{"name": MARKER}],
        feedback={"comment": MARKER},
    )
    for role, kind in [
        (Message.Role.SYSTEM, Message.Type.TEXT),
        (Message.Role.TOOL, Message.Type.TEXT),
        (Message.Role.ASSISTANT, Message.Type.TOOL_CALL),
        (Message.Role.TOOL, Message.Type.TOOL_RESULT),
        (Message.Role.USER, Message.Type.TOOL_RESULT),
    ]:
        hidden = MessageFactory(
            conversation=visible,
            role=role,
            message_type=kind,
            content=f"ordinary words {MARKER}",
            created_at=T0 + timedelta(seconds=90),
        )
        ToolCallFactory(message=hidden, name=MARKER, input={"q": MARKER}, output=MARKER)
    ToolCallFactory(
        message=text[1],
        tool_call_id="call_ok",
        name="lookup",
        input={"q": "fine"},
        output="fine",
        metadata={"secret": MARKER},
    )
    forbidden_threads = [
        _thread(UserFactory()),
        _thread(user, status=Conversation.Status.ARCHIVED),
        _thread(user, status=Conversation.Status.DELETED),
        _thread(user, source=Conversation.Source.AGENT_CALL),
        _thread(user, source=Conversation.Source.AGENT_EVALUATION),
        _thread(user, parent=visible),
    ]
    for thread in forbidden_threads:
        thread.title = f"ordinary {MARKER}"
        thread.save()
        leaked = _messages(thread, [f"ordinary words {MARKER}"])
        ToolCallFactory(message=leaked[0], name=MARKER, output=MARKER)
    return user, visible, text, forbidden_threads


def test_no_marker_reaches_any_response(planted):
    user, visible, text, _ = planted
    queries = [MARKER, MARKER.lower(), "LEAK", "ordinary", "words", "data:", "o", "call"]
    for query in queries:
        response = search_thread_messages(user.pk, query, limit=10)
        assert MARKER.lower() not in to_json(response).lower()
    for anchor in [None, text[0].pk, text[1].pk]:
        for include_tools in (False, True):
            response = read_thread_messages(
                user.pk, visible.thread_id, message_id=anchor, include_tools=include_tools
            )
            assert MARKER.lower() not in to_json(response).lower()


def test_search_sees_only_visible_text_of_visible_threads(planted):
    user, _, text, _ = planted
    response = search_thread_messages(user.pk, "ordinary words", limit=10)
    assert _ids(response, "results") == [text[1].pk, text[0].pk]


def test_read_returns_only_visible_text_and_allowlisted_tool_call_fields(planted):
    user, visible, text, _ = planted
    response = read_thread_messages(user.pk, visible.thread_id, include_tools=True)
    assert _ids(response) == [text[0].pk, text[1].pk]
    assert set(response["messages"][0]) == MESSAGE_KEYS
    assert response["tool_calls"] == [
        {
            "id": "call_ok",
            "message_id": text[1].pk,
            "name": "lookup",
            "status": "success",
            "input": {"q": "fine"},
            "output": "fine",
            "error": "",
            "truncated": False,
        }
    ]


def test_invisible_threads_and_an_unknown_thread_give_the_same_answer(planted):
    user, _, _, forbidden_threads = planted
    answers = set()
    for thread_id in [t.thread_id for t in forbidden_threads] + ["thread-unknown", "x" * 65]:
        with pytest.raises(HistoryNotFound) as caught:
            read_thread_messages(user.pk, thread_id)
        answers.add((type(caught.value), str(caught.value)))
    assert len(answers) == 1


def test_an_anchor_outside_the_visible_messages_gives_the_same_answer(planted):
    user, visible, _, forbidden_threads = planted
    hidden = Message.objects.filter(conversation=visible, role=Message.Role.SYSTEM).get()
    elsewhere = forbidden_threads[1].messages.get()
    answers = set()
    for anchor in [hidden.pk, elsewhere.pk, 10**12, 2**63]:
        with pytest.raises(HistoryNotFound) as caught:
            read_thread_messages(user.pk, visible.thread_id, message_id=anchor)
        answers.add(str(caught.value))
    with pytest.raises(HistoryNotFound) as unknown:
        read_thread_messages(user.pk, "thread-unknown")
    assert answers == {str(unknown.value)}


def test_search_is_case_insensitive_newest_first_and_limited():
    user = UserFactory()
    messages = _messages(_thread(user), ["Alpha one", "ALPHA two", "alpha three", "beta"])
    response = search_thread_messages(user.pk, "aLpHa", limit=2)
    assert _ids(response, "results") == [messages[2].pk, messages[1].pk]
    hit = response["results"][0]
    assert set(hit) == HIT_KEYS
    assert (hit["snippet"], hit["truncated"], response["truncated"]) == (
        "alpha three",
        False,
        False,
    )


@pytest.mark.parametrize(
    ("query", "matching"),
    [
        ("0%", ["100% sure"]),
        ("a_b", ["a_b here"]),
        ("c:\\t", ["c:\\temp"]),
        ("%", ["100% sure"]),
        ("_", ["a_b here"]),
        ("\\", ["c:\\temp"]),
    ],
)
def test_like_wildcards_in_a_query_match_literally(query, matching, search_step):
    user = UserFactory()
    messages = _messages(_thread(user), ["100% sure", "1000 sure", "a_b here", "axb", "c:\\temp"])
    by_content = {m.content: m.pk for m in messages}
    response = search_thread_messages(user.pk, query, limit=10)
    expected = [by_content[c] for c in matching] if _served(query, search_step) else []
    assert _ids(response, "results") == expected


@pytest.mark.parametrize(
    "query",
    ["你好", "你好吗", "世界和平", "東京タワー", "です", "😀", "😀🎉", "ﾃｽﾄ", "ＡＢ"],
)
def test_chinese_japanese_and_emoji_queries_match(query, search_step):
    user = UserFactory()
    contents = [
        "你好吗？世界和平",
        "我们去東京タワーです",
        "party 😀🎉 time",
        "半角ﾃｽﾄ",
        "全角ａｂ",
        "你 好 separated",
        "nothing here",
    ]
    messages = _messages(_thread(user), contents)
    expected = [m.pk for m in reversed(messages) if query.upper() in m.content.upper()]
    assert expected
    expected = expected if _served(query, search_step) else []
    assert _ids(search_thread_messages(user.pk, query, limit=10), "results") == expected


@pytest.fixture
def corpus():
    user = UserFactory()
    contents = [
        "你好世界",
        "世界你好，你们好",
        "日本語のテキスト",
        "mixed 你好 English",
        "50% off_sale \\o/",
        "UPPER lower MiXeD",
        "emoji 😀😀 pair",
        "好你",
        "",
    ]
    _messages(_thread(user), contents)
    return user, contents


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_search_agrees_with_a_plain_substring_scan(corpus, search_step, data):
    user, contents = corpus
    source = data.draw(st.sampled_from([c for c in contents if c]))
    start = data.draw(st.integers(0, len(source) - 1))
    end = data.draw(st.integers(start + 1, len(source)))
    # A one-term query (the property test below has several): its one term, as parsed.
    query = data.draw(
        st.one_of(
            st.just(source[start:end]),
            st.text(alphabet="你好世界们日本%_\\oOxX😀 ", min_size=1, max_size=4),
        ).filter(lambda text: text.split() == [text] and len(terms.query_terms(text)) == 1)
    )
    response = search_thread_messages(user.pk, query, limit=10)
    found = sorted(hit["snippet"] for hit in response["results"])
    (term,) = terms.query_terms(query)
    expected = [c for c in contents if c and _contains_or_form(c, term)]
    assert found == sorted(expected if _served(query, search_step) else [])


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"query": ""}, "query"),
        ({"query": "x" * 257}, "query"),
        ({"query": "a\x00b"}, "query"),
        ({"query": 5}, "query"),
        ({"query": "x", "limit": 0}, "limit"),
        ({"query": "x", "limit": 11}, "limit"),
        ({"query": "x", "limit": True}, "limit"),
        ({"query": "x", "limit": "5"}, "limit"),
        ({"query": "x", "uid": "1; drop"}, "user id"),
        ({"query": "x", "uid": 0}, "user id"),
        ({"query": "x", "uid": "007"}, "user id"),
    ],
)
def test_search_rejects_bad_arguments_with_a_clear_error(kwargs, error):
    uid = kwargs.pop("uid", UserFactory().pk)
    with pytest.raises(HistoryQueryError, match=error):
        search_thread_messages(uid, **kwargs)


@pytest.mark.parametrize("query", ["a lone surrogate \udc00", "a NUL \x00"])
def test_unstorable_query_text_is_refused_as_not_valid_unicode_text(query):
    with pytest.raises(HistoryQueryError) as caught:
        search_thread_messages(UserFactory().pk, query)
    assert str(caught.value) == f"query must be {STORABLE_TEXT_REQUIREMENT}"


def test_search_accepts_a_query_of_exactly_256_characters():
    user = UserFactory()
    message = _messages(_thread(user), ["y" + "é" * 256 + "y"])[0]
    response = search_thread_messages(user.pk, "é" * 256)
    assert _ids(response, "results") == [message.pk]


def test_search_is_one_query_and_never_touches_tool_calls(planted, django_assert_num_queries):
    user, _, _, _ = planted
    for query in ("ordinary", "你好"):
        with django_assert_num_queries(1) as captured:
            search_thread_messages(user.pk, query, limit=10)
        assert "toolcall" not in captured.captured_queries[0]["sql"].lower()


def test_snippet_is_cut_around_a_match_deep_in_a_long_message():
    user = UserFactory()
    content = "前" * 3000 + "NEEDLE" + "後" * 3000
    _messages(_thread(user), [content])
    hit = search_thread_messages(user.pk, "needle")["results"][0]
    snippet = hit["snippet"]
    assert "NEEDLE" in snippet and snippet in content
    assert len(snippet.encode("utf-8")) <= SNIPPET_MAX_BYTES
    assert snippet.startswith("前") and snippet.endswith("後")
    assert hit["truncated"] is True


def test_ten_oversized_hostile_hits_with_huge_titles_fit_the_search_budget():
    user = UserFactory()
    contents = [f"{i:02d}match" + HOSTILE * 400 for i in range(10)]
    for i, content in enumerate(contents):
        thread = _thread(user, title=HOSTILE * 10_000)
        _messages(thread, [content])
        Message.objects.filter(conversation=thread).update(created_at=T0 + timedelta(hours=i))
    response = search_thread_messages(user.pk, "match", limit=10)
    assert _size(response) <= SEARCH_RESPONSE_MAX_BYTES
    assert response["truncated"] is True
    kept = [hit["snippet"][:2] for hit in response["results"]]
    assert 0 < len(kept) < 10
    assert kept == [f"{i:02d}" for i in range(9, 9 - len(kept), -1)]  # newest first
    for hit in response["results"]:
        assert len(hit["snippet"].encode("utf-8")) <= SNIPPET_MAX_BYTES
        assert len(hit["title"].encode("utf-8")) <= TITLE_MAX_BYTES
        assert (HOSTILE * 10_000).startswith(hit["title"])
        assert any(c.startswith(hit["snippet"]) for c in contents)
        assert hit["truncated"] is True


def test_ten_plain_hits_larger_than_a_snippet_all_fit():
    user = UserFactory()
    contents = ["match " + "x" * 2000 for _ in range(10)]
    _messages(_thread(user, title="t" * 5000), contents)
    response = search_thread_messages(user.pk, "match", limit=10)
    assert len(response["results"]) == 10
    assert _size(response) <= SEARCH_RESPONSE_MAX_BYTES
    assert all(len(h["snippet"].encode()) == SNIPPET_MAX_BYTES for h in response["results"])
    assert all(h["truncated"] for h in response["results"]) and response["truncated"]


def test_read_latest_page_in_order_with_has_more_before():
    user = UserFactory()
    thread = _thread(user)
    messages = _messages(thread, [f"m{i}" for i in range(8)])
    response = read_thread_messages(user.pk, thread.thread_id, limit=3)
    assert _ids(response) == [m.pk for m in messages[5:]]
    assert [m["content"] for m in response["messages"]] == ["m5", "m6", "m7"]
    assert (response["has_more_before"], response["has_more_after"]) == (True, False)
    assert "tool_calls" not in response
    whole = read_thread_messages(user.pk, thread.thread_id)
    assert _ids(whole) == [m.pk for m in messages]
    assert (whole["has_more_before"], whole["has_more_after"], whole["truncated"]) == (
        False,
        False,
        False,
    )


@pytest.mark.parametrize(
    ("anchor", "limit", "window", "more_before", "more_after"),
    [
        (10, 5, range(8, 13), True, True),  # ceil(5/2)=3 up to the anchor, 2 after
        (10, 4, range(9, 13), True, True),
        (18, 6, range(14, 20), True, False),  # short side after: filled from before
        (1, 6, range(0, 6), False, True),  # short side before: filled from after
        (0, 1, range(0, 1), False, True),
        (19, 20, range(0, 20), False, False),
    ],
)
def test_read_window_around_an_anchor(anchor, limit, window, more_before, more_after):
    user = UserFactory()
    thread = _thread(user)
    messages = _messages(thread, [f"m{i}" for i in range(20)])
    response = read_thread_messages(
        user.pk, thread.thread_id, message_id=messages[anchor].pk, limit=limit
    )
    assert _ids(response) == [messages[i].pk for i in window]
    assert (response["has_more_before"], response["has_more_after"]) == (more_before, more_after)


def test_read_orders_equal_timestamps_by_id_and_skips_hidden_messages():
    user = UserFactory()
    thread = _thread(user)
    same = [MessageFactory(conversation=thread, created_at=T0) for _ in range(4)]
    MessageFactory(conversation=thread, created_at=T0, role=Message.Role.SYSTEM)
    response = read_thread_messages(user.pk, thread.thread_id, message_id=same[1].pk, limit=3)
    assert _ids(response) == [same[0].pk, same[1].pk, same[2].pk]


@pytest.mark.parametrize("session_zone", ["UTC", "Asia/Shanghai", "America/St_Johns"])
def test_read_window_splits_at_the_anchor_to_the_microsecond_in_any_session_zone(session_zone):
    # The anchor's timestamp makes a round trip (out of the thread statement, into the window
    # statement as a parameter): losing a microsecond or an offset would move the split.
    user = UserFactory()
    thread = _thread(user)
    at = datetime(2026, 3, 4, 5, 6, 7, 890123, tzinfo=UTC)
    messages = [
        MessageFactory(
            conversation=thread, content=f"m{i}", created_at=at + timedelta(microseconds=i)
        )
        for i in range(-3, 4)
    ]
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('TimeZone', %s, false)", [session_zone])
    try:
        response = read_thread_messages(
            user.pk, thread.thread_id, message_id=messages[3].pk, limit=3
        )
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT set_config('TimeZone', 'UTC', false)")
    assert _ids(response) == [messages[2].pk, messages[3].pk, messages[4].pk]
    assert [m["created_at"] for m in response["messages"]] == [
        "2026-03-04T05:06:07.890122+00:00",
        "2026-03-04T05:06:07.890123+00:00",
        "2026-03-04T05:06:07.890124+00:00",
    ]
    assert (response["has_more_before"], response["has_more_after"]) == (True, True)


def test_read_without_tools_is_two_queries_none_on_tool_calls(planted, django_assert_num_queries):
    user, visible, text, _ = planted
    with CaptureQueriesContext(connection) as captured:
        with django_assert_num_queries(2):
            read_thread_messages(user.pk, visible.thread_id, message_id=text[0].pk)
        with django_assert_num_queries(2):
            read_thread_messages(user.pk, visible.thread_id)
    assert not any("toolcall" in q["sql"].lower() for q in captured.captured_queries)


def test_read_with_tools_adds_exactly_one_query(planted, django_assert_num_queries):
    user, visible, text, _ = planted
    with django_assert_num_queries(3):
        read_thread_messages(user.pk, visible.thread_id, message_id=text[1].pk, include_tools=True)


def test_the_tool_call_query_is_served_by_the_message_order_index(planted):
    # ToolCall.message has no index of its own: the composite index leads with it.
    user, visible, text, _ = planted
    with CaptureQueriesContext(connection) as captured:
        read_thread_messages(user.pk, visible.thread_id, include_tools=True)
    tool_query = captured.captured_queries[-1]["sql"]
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("EXPLAIN " + tool_query)
        plan = "\n".join(row[0] for row in cursor.fetchall())
        cursor.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'conversations_toolcall' "
            "AND indexdef LIKE '%%(message_id)'"
        )
        assert cursor.fetchall() == []
    assert "toolcall_msg_idx" in plan


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"thread_id": ""}, "thread_id"),
        ({"thread_id": "a\x00b"}, "thread_id"),
        ({"thread_id": 7}, "thread_id"),
        ({"message_id": 0}, "message_id"),
        ({"message_id": "12"}, "message_id"),
        ({"message_id": True}, "message_id"),
        ({"limit": 0}, "limit"),
        ({"limit": 21}, "limit"),
        ({"include_tools": "yes"}, "include_tools"),
    ],
)
def test_read_rejects_bad_arguments_with_a_clear_error(kwargs, error):
    thread = _thread(UserFactory())
    arguments = {"thread_id": thread.thread_id, **kwargs}
    with pytest.raises(HistoryQueryError, match=error):
        read_thread_messages(thread.user_id, **arguments)


def test_read_cuts_emoji_contents_to_their_budgets_and_drops_the_oldest():
    user = UserFactory()
    thread = _thread(user, title="🎉" * 500)
    contents = [f"{i:02d}" + "😀" * 5000 for i in range(20)]
    messages = _messages(thread, contents)
    response = read_thread_messages(user.pk, thread.thread_id)
    kept = response["messages"]
    assert _ids(response) == [m.pk for m in messages[-len(kept) :]]
    assert len(kept) < 20 and response["has_more_before"] is True
    sizes = [len(m["content"].encode("utf-8")) for m in kept]
    assert all(size <= CONTENT_MAX_BYTES for size in sizes)
    assert sum(sizes) <= CONTENTS_MAX_BYTES
    for item, content in zip(kept, contents[-len(kept) :], strict=True):
        assert content.startswith(item["content"]) and item["truncated"] is True
    assert response["title"] == "🎉" * (TITLE_MAX_BYTES // 4)
    assert response["truncated"] is True
    assert _size(response) <= READ_RESPONSE_MAX_BYTES


def test_read_drops_tool_calls_then_farthest_messages_when_escapes_overflow():
    user = UserFactory()
    thread = _thread(user)
    contents = [f"{i:02d}" + "\x01" * (CONTENT_MAX_BYTES - 2) for i in range(20)]
    messages = _messages(thread, contents)
    ToolCallFactory(message=messages[10], output="tool output")
    response = read_thread_messages(
        user.pk, thread.thread_id, message_id=messages[10].pk, include_tools=True
    )
    assert _size(response) <= READ_RESPONSE_MAX_BYTES
    assert response["tool_calls"] == []
    kept = _ids(response)
    assert messages[10].pk in kept and len(kept) < 4
    index = [m.pk for m in messages].index(kept[0])
    assert kept == [m.pk for m in messages[index : index + len(kept)]]
    assert response["has_more_before"] and response["has_more_after"]
    assert response["truncated"] is True


def test_tool_calls_with_huge_inputs_are_cut_flagged_and_capped():
    user = UserFactory()
    thread = _thread(user)
    message = _messages(thread, ["asked"])[0]
    huge = {"payload": HOSTILE * 20_000, "n": 1}
    for i in range(TOOL_CALLS_MAX + 2):
        ToolCallFactory(
            message=message,
            tool_call_id=f"call_{i:02d}",
            input=huge if i % 2 else {"small": i},
            output=HOSTILE * 3000,
            error="e" * 9000,
            created_at=T0 + timedelta(seconds=i),
        )
    response = read_thread_messages(user.pk, thread.thread_id, include_tools=True)
    calls = response["tool_calls"]
    huge_text = '{"n": 1, "payload": ' + json.dumps(huge["payload"], ensure_ascii=False) + "}"
    assert 0 < len(calls) <= TOOL_CALLS_MAX
    assert len(to_json(calls).encode("utf-8")) <= TOOL_CALLS_MAX_BYTES
    assert [c["id"] for c in calls] == [f"call_{i:02d}" for i in range(len(calls))]
    for call in calls:
        assert set(call) == TOOL_CALL_KEYS
        assert len(to_json(call).encode("utf-8")) <= TOOL_CALL_MAX_BYTES
        assert call["truncated"] is True
        assert (HOSTILE * 3000).startswith(call["output"]) and call["output"]
        if isinstance(call["input"], str):
            assert call["input"].startswith('{"n": 1, "payload": "')
            assert huge_text.startswith(call["input"])
    assert isinstance(calls[0]["input"], dict) and isinstance(calls[1]["input"], str)
    assert response["truncated"] is True
    assert _size(response) <= READ_RESPONSE_MAX_BYTES


def test_whole_tool_calls_that_overflow_together_are_dropped_from_the_end():
    # Each call fits its own cap uncut (a control character serializes to six bytes, so its
    # output is as large as the cap allows); ten of them pass the list's cap.
    user = UserFactory()
    thread = _thread(user)
    message = _messages(thread, ["asked"])[0]
    for i in range(TOOL_CALLS_MAX):
        ToolCallFactory(
            message=message,
            tool_call_id=f"call_{i:02d}",
            output="\x01" * 600,
            created_at=T0 + timedelta(seconds=i),
        )
    response = read_thread_messages(user.pk, thread.thread_id, include_tools=True)
    calls = response["tool_calls"]
    assert not any(call["truncated"] for call in calls)
    assert [c["id"] for c in calls] == [f"call_{i:02d}" for i in range(len(calls))]
    assert len(to_json(calls).encode("utf-8")) <= TOOL_CALLS_MAX_BYTES
    assert len(to_json(calls).encode("utf-8")) + len(to_json(calls[0]).encode("utf-8")) > (
        TOOL_CALLS_MAX_BYTES
    )
    assert 0 < len(calls) < TOOL_CALLS_MAX and response["truncated"] is True


def test_a_small_tool_call_is_returned_whole():
    user = UserFactory()
    thread = _thread(user)
    message = _messages(thread, ["asked"])[0]
    ToolCallFactory(message=message, input={"k": [1, "二", None]}, output="ok", error="")
    call = read_thread_messages(user.pk, thread.thread_id, include_tools=True)["tool_calls"][0]
    assert (call["input"], call["output"], call["truncated"]) == (
        {"k": [1, "二", None]},
        "ok",
        False,
    )


def test_owner_follows_the_conversation_for_bulk_inserts_and_moves():
    first, second = UserFactory(), UserFactory()
    thread = _thread(first)
    Message.objects.bulk_create(
        [Message(conversation=thread, role="user", content=f"bulk {i}") for i in range(3)]
    )
    assert len(search_thread_messages(first.pk, "bulk")["results"]) == 3
    thread.user = second
    thread.save()
    assert search_thread_messages(first.pk, "bulk")["results"] == []
    assert len(search_thread_messages(second.pk, "bulk")["results"]) == 3
    assert set(Message.objects.filter(conversation=thread).values_list("owner_id", flat=True)) == {
        second.pk
    }


def test_read_of_a_visible_thread_without_visible_messages_is_empty_not_missing():
    user = UserFactory()
    thread = _thread(user, title="only system")
    MessageFactory(conversation=thread, role=Message.Role.SYSTEM, content="setup")
    response = read_thread_messages(user.pk, thread.thread_id)
    assert response == {
        "thread_id": thread.thread_id,
        "title": "only system",
        "messages": [],
        "has_more_before": False,
        "has_more_after": False,
        "truncated": False,
    }


def _lookups(condition: Q) -> set[str]:
    """The field lookups a model condition names."""
    found = set()
    for child in condition.children:
        found |= _lookups(child) if isinstance(child, Q) else {child[0]}
    return found


def test_the_statements_select_exactly_what_the_model_visibility_conditions_select(search_step):
    # The statements spell visibility out by hand; every value of every field the model
    # conditions name is tried here, so the two cannot drift apart unnoticed.
    assert _lookups(VISIBLE_THREAD) == {"parent__isnull", "status", "source__in"}
    assert _lookups(VISIBLE_MESSAGE) == {"role__in", "message_type"}
    user = UserFactory()
    top = _thread(user)
    threads = [
        _thread(owner, status=status, source=source, parent=parent)
        for owner, status, source, parent in itertools.product(
            [user, UserFactory()],
            Conversation.Status.values,
            Conversation.Source.values,
            [None, top],
        )
    ]
    kinds = list(itertools.product(Message.Role.values, Message.Type.values))
    Message.objects.bulk_create(
        Message(conversation=thread, role=role, message_type=kind, content=f"[t{thread.pk:05d}]")
        for thread in threads
        for role, kind in kinds
    )
    visible_threads = set(Conversation.objects.visible_to(user.pk))
    expected = set(
        Message.objects.filter(VISIBLE_MESSAGE, conversation__in=visible_threads).values_list(
            "pk", flat=True
        )
    )
    assert visible_threads and expected

    searched, read, anchored = set(), set(), set()
    for thread in threads:
        searched |= set(_ids(search_thread_messages(user.pk, f"[t{thread.pk:05d}]"), "results"))
        try:
            read |= set(_ids(read_thread_messages(user.pk, thread.thread_id)))
        except HistoryNotFound:
            assert thread not in visible_threads
        else:
            assert thread in visible_threads
        for message in thread.messages.all():
            try:
                read_thread_messages(user.pk, thread.thread_id, message_id=message.pk)
            except HistoryNotFound:
                continue
            anchored.add(message.pk)
    assert searched == read == anchored == expected


def test_read_with_tools_never_returns_the_output_of_a_lookback_call():
    user = UserFactory()
    thread = _thread(user)
    message = _messages(thread, ["look back for me"])[0]
    calls = [
        ("search_thread_messages", {"query": "kyoto"}),
        ("read_thread_messages", {"thread_id": "thread-other"}),
        ("remember_memory", {"content": "likes tea"}),
    ]
    for i, (name, arguments) in enumerate(calls):
        ToolCallFactory(
            message=message,
            name=name,
            input=arguments,
            output=f"copied from another thread {MARKER}",
            created_at=T0 + timedelta(seconds=i),
        )
    response = read_thread_messages(user.pk, thread.thread_id, include_tools=True)
    assert [(c["name"], c["input"], c["output"]) for c in response["tool_calls"]] == [
        ("search_thread_messages", {"query": "kyoto"}, None),
        ("read_thread_messages", {"thread_id": "thread-other"}, None),
        ("remember_memory", {"content": "likes tea"}, f"copied from another thread {MARKER}"),
    ]
    assert set(LOOKBACK_TOOL_NAMES) == {"search_thread_messages", "read_thread_messages"}
    assert to_json(response).count(MARKER) == 1


def test_created_at_is_the_stored_instant_in_iso_8601_with_its_utc_offset():
    user = UserFactory()
    thread = _thread(user)
    message = MessageFactory(
        conversation=thread,
        content="timed words",
        created_at=datetime(2026, 3, 4, 5, 6, 7, 890123, tzinfo=UTC),
    )
    whole = MessageFactory(
        conversation=thread, content="whole second", created_at=datetime(2026, 3, 5, tzinfo=UTC)
    )
    expected = {
        message.pk: "2026-03-04T05:06:07.890123+00:00",
        whole.pk: "2026-03-05T00:00:00+00:00",
    }
    searched = search_thread_messages(user.pk, "timed words")["results"]
    latest = read_thread_messages(user.pk, thread.thread_id)["messages"]
    around = read_thread_messages(user.pk, thread.thread_id, message_id=message.pk)["messages"]
    for items in (searched, latest, around):
        assert {item["message_id"]: item["created_at"] for item in items}.items() <= (
            expected.items()
        )
    assert len(latest) == len(around) == 2


def test_a_tool_call_that_fits_only_by_its_exact_size_is_returned_whole():
    user = UserFactory()
    thread = _thread(user)
    message = _messages(thread, ["asked"])[0]
    output = "o" * (TOOL_CALL_MAX_BYTES - 300)  # fits, though six bytes a character would not
    ToolCallFactory(message=message, tool_call_id="c" * 60, input={"q": "x"}, output=output)
    call = read_thread_messages(user.pk, thread.thread_id, include_tools=True)["tool_calls"][0]
    assert (call["id"], call["output"], call["truncated"]) == ("c" * 60, output, False)
    assert len(to_json(call).encode("utf-8")) <= TOOL_CALL_MAX_BYTES


@settings(max_examples=200, deadline=None)
@given(
    contents=st.lists(st.text(), max_size=20),
    title=st.text(),
    flags=st.tuples(st.booleans(), st.booleans(), st.booleans()),
    tool_texts=st.none() | st.lists(st.text(), max_size=TOOL_CALLS_MAX),
)
def test_the_read_size_bound_is_never_below_the_serialized_size(contents, title, flags, tool_texts):
    response = {
        "thread_id": "thread-x",
        "title": title,
        "messages": [
            {
                "message_id": 2**63 - 1 - i,
                "role": "assistant",
                "created_at": "2026-03-04T05:06:07.890123+00:00",
                "content": content,
                "truncated": flags[0],
            }
            for i, content in enumerate(contents)
        ],
        "has_more_before": flags[1],
        "has_more_after": flags[2],
        "truncated": flags[0],
    }
    if tool_texts is not None:
        # As `_load_tool_calls` hands them over: each item and the list within their caps.
        items = [
            {
                "id": f"call_{i}",
                "message_id": 2**63 - 1,
                "name": "lookup",
                "status": "success",
                "input": text[:500],
                "output": text[:500],
                "error": text[:100],
                "truncated": False,
            }
            for i, text in enumerate(tool_texts)
        ]
        response["tool_calls"], _ = take_within(items, TOOL_CALLS_MAX_BYTES - 2)
    assert _read_bound(response) >= _size(response)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    moment=st.datetimes(
        min_value=datetime(1, 1, 2),
        max_value=datetime(9999, 12, 30),
        timezones=st.sampled_from(
            [UTC, timezone(timedelta(hours=8)), timezone(-timedelta(hours=3, minutes=30))]
        ),
    )
)
def test_timestamps_formatted_in_sql_read_as_python_isoformat_of_the_utc_value(moment):
    # The statements format `created_at` with yuxi_utc_iso; the tools promise isoformat().
    with connection.cursor() as cursor:
        cursor.execute("SELECT yuxi_utc_iso(%s)", [moment])
        assert cursor.fetchone()[0] == moment.astimezone(UTC).isoformat()


@settings(max_examples=300, deadline=None)
@given(text=st.text() | st.text(alphabet=st.characters(max_codepoint=0x7F)))
def test_the_escaped_size_of_a_string_is_its_serialized_size(text):
    assert escaped_bytes(text) == len(to_json(text).encode("utf-8")) - 2


@settings(max_examples=200, deadline=None)
@given(
    labels=st.tuples(*[st.text(max_size=40)] * 3),
    message_id=st.integers(min_value=1, max_value=2**63 - 1),
)
def test_the_tool_call_frame_size_is_the_item_serialized_without_its_free_fields(
    labels, message_id
):
    call_id, name, status = labels
    item, _ = _tool_call_item((call_id, message_id, name, status, "{}", "", ""))
    assert not item["truncated"]
    # The free fields hold `{}`, `""` and `""`: six bytes in all.
    assert _tool_call_frame_bytes(call_id, message_id, name, status) == (
        len(to_json(item).encode("utf-8")) - 6
    )


# History search by terms.


def _search_ids(user, query: str, limit: int = 10) -> list[int]:
    return _ids(search_thread_messages(user.pk, query, limit=limit), "results")


def test_search_ranks_messages_with_every_term_first_in_any_order_case_insensitively(
    search_step,
):
    user = UserFactory()
    messages = _messages(
        _thread(user),
        [
            "My sister's wedding is in Kyoto",
            "the WEDDING of my Sister",
            "my sister is visiting",
            "a wedding cake",
            "sisterhood and weddings",
        ],
    )
    # Both terms (all near each other: the newest first), then one (as frequent: newest first).
    ranked = [messages[i].pk for i in (4, 1, 0, 3, 2)]
    assert _search_ids(user, "sister wedding") == ranked
    assert _search_ids(user, "wedding SISTER") == ranked
    # "sister's" is about sister: every message with sister counts.
    assert _search_ids(user, "kyoto wedding sister's") == [messages[i].pk for i in (0, 4, 1, 3, 2)]
    # No message has all three: two of them rank first, the rare "cake" among them first
    # (how rare is counted among the newest messages: none in the indexed step's).
    found = _search_ids(user, "sister wedding cake")
    assert set(found[:4]) == {messages[i].pk for i in (0, 1, 3, 4)} and found[4] == messages[2].pk
    assert found[0] == (messages[3].pk if search_step != "indexed" else messages[4].pk)


def test_a_quoted_phrase_is_one_term(search_step):
    user = UserFactory()
    messages = _messages(
        _thread(user),
        ["my sister's wedding in Kyoto", "the wedding of my sister's friend", "sister's  wedding"],
    )
    assert _search_ids(user, '"sister\'s wedding"') == [messages[0].pk]
    assert _search_ids(user, 'kyoto "SISTER\'S WEDDING"') == [messages[0].pk]
    assert _search_ids(user, '"wedding sister"') == []
    assert _search_ids(user, '"sister\'s  wedding"') == [messages[2].pk]  # inner space kept
    # Quotes separate terms too: "friend" and the phrase, each in one message.
    assert _search_ids(user, 'friend"sister\'s wedding"') == [messages[1].pk, messages[0].pk]
    assert _search_ids(user, '"of my"friend') == [messages[1].pk]


@pytest.mark.parametrize(
    ("query", "expected", "indexed"),
    [
        ("婚礼 妹妹", [0, 2, 1], [0, 2, 1]),  # two CJK pairs: the bigram index
        ("妹妹 京都", [1, 0], [1, 0]),  # closer together in the newer one
        ("妹妹的婚礼 京都", [0, 1, 2], [0, 1, 2]),  # cut at 的: 妹妹, 婚礼
        ("京 婚礼", [0, 1, 2], [0, 2]),  # one CJK character: only checked on the window
        ("京都 wedding", [1, 0], [1, 0]),
        ("東京タワー 妹妹", [1, 0], [1, 0]),
        ("婚礼 东京", [2, 0], [2, 0]),
    ],
)
def test_cjk_terms_of_two_and_more_characters_match_in_any_order(
    query, expected, indexed, search_step
):
    user = UserFactory()
    messages = _messages(
        _thread(user),
        ["我妹妹的婚礼在京都举行", "妹妹去了京都和東京タワー, no wedding", "婚礼的蛋糕"],
    )
    ranked = indexed if search_step == "indexed" else expected
    assert _search_ids(user, query) == [messages[i].pk for i in ranked]


def test_a_query_of_short_terms_ranks_the_newest_messages_only(search_step):
    user = UserFactory()
    messages = _messages(_thread(user), ["go to x b", "go b", "京 x", "xb 京"])
    walked = search_step != "indexed"  # the indexed step walks no window: no index serves them
    ranked = {"x 京": [3, 2, 0], "b go": [1, 0, 3], "b x go": [0, 1, 3, 2]}
    for query, order in ranked.items():
        assert _search_ids(user, query) == ([messages[i].pk for i in order] if walked else [])


@pytest.mark.parametrize(
    "query",
    [
        " ",
        "\u3000\t\n",
        '""',
        '" "  "\t"',
        '"',  # an unbalanced quote is dropped: nothing is left
    ],
)
def test_a_blank_query_is_refused(query):
    with pytest.raises(HistoryQueryError, match="query"):
        search_thread_messages(UserFactory().pk, query)


def test_eight_terms_are_accepted_and_the_message_with_all_ranks_first(search_step):
    user = UserFactory()
    words = ["alpha", "bravo", "charlie", "delta", "echo", "fox", "go", "京都"]
    full = _messages(_thread(user), [" ".join(reversed(words)), " ".join(words[1:])])
    hits = search_thread_messages(user.pk, " ".join(words), limit=10)["results"]
    assert [h["message_id"] for h in hits] == [full[0].pk, full[1].pk]
    assert [h["matched_terms"] for h in hits] == [words, words[1:]]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ('say "hi', [1]),  # one quote: dropped, `say` and `hi`
        ('5" screen', [0]),
        ('"a b" "c', [0, 2]),  # the pair is a phrase, the last quote dropped: `c` (screen)
        ('x"', [3]),
    ],
)
def test_an_unbalanced_quote_is_dropped(query, expected, search_step):
    user = UserFactory()
    messages = _messages(_thread(user), ['a 5" screen', 'say "hi there', 'a b "c', 'x" y'])
    found = [messages[i].pk for i in reversed(expected)] if _served(query, search_step) else []
    assert _search_ids(user, query) == found


TERM_ALPHABET = "你好世界们日本%_\\oOxX😀\"' "


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_a_search_of_several_terms_ranks_as_a_scan_finds_them(corpus, search_step, data):
    user, contents = corpus
    pieces = [c[i : i + n] for c in contents for i in range(len(c)) for n in (1, 2, 3, 5)]
    drawn = data.draw(
        st.lists(
            st.sampled_from([p for p in pieces if p.split() == [p] and '"' not in p])
            | st.text(alphabet=TERM_ALPHABET.replace(" ", "").replace('"', ""), min_size=1),
            min_size=1,
            max_size=4,
        )
    )
    query = " ".join(drawn)
    distinct = terms.query_terms(query)
    assume(distinct and len(distinct) <= terms.QUERY_TERMS_MAX)
    hits = search_thread_messages(user.pk, query, limit=10)["results"]
    found = {c: [t for t in distinct if _contains_or_form(c, t)] for c in contents if c}
    # Each hit names the terms it has (or a form of), in query order.
    for hit in hits:
        assert hit["matched_terms"] == found[hit["snippet"]] != []
    every = {c for c, have in found.items() if have == distinct}
    if _served(query, search_step):  # every message with every term is found
        assert every <= {hit["snippet"] for hit in hits}
    if search_step != "indexed":  # the window holds them all: every match is found
        assert {hit["snippet"] for hit in hits} == {c for c, have in found.items() if have}


def test_the_snippet_is_cut_around_the_first_term(search_step):
    user = UserFactory()
    content = "zebra " + "前" * 3000 + "NEEDLE" + "後" * 3000
    _messages(_thread(user), [content])
    first_needle = search_thread_messages(user.pk, "needle zebra")["results"][0]["snippet"]
    assert "NEEDLE" in first_needle and "zebra" not in first_needle
    first_zebra = search_thread_messages(user.pk, "zebra needle")["results"][0]["snippet"]
    assert first_zebra.startswith("zebra ") and "NEEDLE" not in first_zebra


def test_terms_never_match_in_other_users_archived_deleted_or_sub_agent_threads(search_step):
    user = UserFactory()
    content = "sister wedding 妹妹 婚礼 京 x in Kyoto"
    visible = _messages(_thread(user), [content])[0]
    forbidden = [
        _thread(UserFactory()),
        _thread(user, status=Conversation.Status.ARCHIVED),
        _thread(user, status=Conversation.Status.DELETED),
        _thread(user, source=Conversation.Source.AGENT_CALL),
        _thread(user, source=Conversation.Source.AGENT_EVALUATION),
    ]
    forbidden.append(_thread(user, parent=forbidden[0]))
    forbidden.append(_thread(user, parent=_thread(user)))
    for thread in forbidden:
        _messages(thread, [content, content])
    for role, kind in [
        (Message.Role.SYSTEM, Message.Type.TEXT),
        (Message.Role.ASSISTANT, Message.Type.TOOL_CALL),
        (Message.Role.TOOL, Message.Type.TOOL_RESULT),
    ]:
        MessageFactory(
            conversation=visible.conversation, role=role, message_type=kind, content=content
        )
    for query in ["wedding sister", "婚礼 妹妹", "京 x", "kyoto 婚礼 x", '"sister wedding" 京']:
        assert _search_ids(user, query) == ([visible.pk] if _served(query, search_step) else [])


def test_several_hostile_terms_keep_every_byte_budget(search_step):
    user = UserFactory()
    terms = ["\\x%", "a_\\", "\x01\x01", "😀😀😀", "婚礼", "京", 'q"']  # one literal quote
    query = " ".join(terms)
    body = HOSTILE.join(terms)
    contents = [f"{i:02d}" + HOSTILE * 300 + body + HOSTILE * 300 for i in range(10)]
    matching = []
    for i, content in enumerate(contents):
        thread = _thread(user, title=HOSTILE * 5_000)
        matching += _messages(thread, [content])
        Message.objects.filter(conversation=thread).update(created_at=T0 + timedelta(hours=i))
    _messages(_thread(user), [body.replace('q"', "")])  # all terms but one
    response = search_thread_messages(user.pk, query, limit=10)
    assert _size(response) <= SEARCH_RESPONSE_MAX_BYTES
    assert response["truncated"] is True
    kept = _ids(response, "results")
    assert 0 < len(kept) < 10
    assert kept == [m.pk for m in matching[::-1][: len(kept)]]  # newest first
    for hit in response["results"]:
        assert len(hit["snippet"].encode("utf-8")) <= SNIPPET_MAX_BYTES
        assert len(hit["title"].encode("utf-8")) <= TITLE_MAX_BYTES
        assert "\\x%" in hit["snippet"]  # around the first term
        assert any(hit["snippet"] in c for c in contents) and hit["truncated"] is True


def test_a_search_of_several_terms_is_still_one_query(
    planted, search_step, django_assert_num_queries
):
    user, _, _, _ = planted
    for query in ("ordinary words", "你好 世界 o", '"ordinary words" two', "o d"):
        with django_assert_num_queries(1) as captured:
            search_thread_messages(user.pk, query, limit=10)
        assert "toolcall" not in captured.captured_queries[0]["sql"].lower()


def _plan(
    user,
    query: str,
    *,
    limit: int = 10,
    analyze: bool = False,
    disable: tuple[str, ...] = ("seqscan",),
) -> dict:
    """The planner's JSON plan of the search statement `query`'s search sends (the last: a
    query of more than QUERY_TERMS_MAX terms first counts them), run too with `analyze` (each
    node's `Actual Loops`), with the scan methods of `disable` ("seqscan", "indexscan") off
    for the rest of the test's transaction."""
    with CaptureQueriesContext(connection) as captured:
        search_thread_messages(user.pk, query, limit=limit)
    *_, statement = captured.captured_queries
    with connection.cursor() as cursor:
        for method in disable:
            cursor.execute(f"SET LOCAL enable_{method} = off")
        options = "ANALYZE, FORMAT JSON" if analyze else "FORMAT JSON"
        cursor.execute(f"EXPLAIN ({options}) " + statement["sql"])
        return cursor.fetchone()[0][0]["Plan"]


def _scans(node: dict) -> list[dict]:
    found = [node] if "Index Name" in node else []
    for child in node.get("Plans", []):
        found += _scans(child)
    return found


SEARCH_INDEXES = {
    "message_owner_recent_idx",
    "message_owner_trgm_idx",
    "message_owner_bigram_idx",
    "message_owner_words_idx",
}


@pytest.fixture
def rare_terms_among_many():
    """A user with 10,000 messages of frequent words over 100 threads and two with rarer ones,
    analysed; and, for this test's transaction only, no index on messages but the primary key
    and the three search indexes, so that a plan can only reach messages through those (at this
    size the planner would rather walk any index; bench/history.py shows its choices at 1M)."""
    user = UserFactory()
    threads = ConversationFactory.create_batch(100, user=user)
    Message.objects.bulk_create(
        [
            Message(conversation=threads[i % 100], role="user", content=f"common text {i} a 京")
            for i in range(10_000)
        ]
        + [
            Message(conversation=threads[i], role="user", content="wedding kyoto 你好世界 a 1")
            for i in (7, 8)
        ]
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'conversations_message' "
            "AND indexname <> 'conversations_message_pkey'"
        )
        for (name,) in cursor.fetchall():
            if name not in SEARCH_INDEXES:
                cursor.execute(f'DROP INDEX "{name}"')
        cursor.execute("ANALYZE conversations_conversation, conversations_message")
    return user


def _index_conditions(scans: list[dict], index: str) -> str:
    return " ".join(s.get("Index Cond", "") for s in scans if s["Index Name"] == index)


def test_each_long_term_and_cjk_pair_is_an_index_condition_and_short_terms_only_narrow(
    rare_terms_among_many,
):
    user = rare_terms_among_many
    both = set(Message.objects.filter(content__startswith="wedding").values_list("pk", flat=True))
    assert set(_search_ids(user, "wedding kyoto a 1")[:2]) == both
    trigram = _index_conditions(_scans(_plan(user, "wedding kyoto a 1")), "message_owner_trgm_idx")
    assert "%WEDD%" in trigram and "%KYOTO%" in trigram  # "wedding" by its stem
    assert "%A%" not in trigram and "%1%" not in trigram
    assert set(_search_ids(user, "你好 世界 界")) == both
    bigram = _index_conditions(_scans(_plan(user, "你好 世界 界")), "message_owner_bigram_idx")
    assert "你好" in bigram and "世界" in bigram and "%界%" not in bigram


def test_a_cjk_run_is_looked_up_by_its_bigrams_and_a_long_term_by_its_trigrams(
    rare_terms_among_many,
):
    user = rare_terms_among_many
    both = set(Message.objects.filter(content__startswith="wedding").values_list("pk", flat=True))
    assert set(_search_ids(user, "你好世界")) == both
    bigram = _index_conditions(_scans(_plan(user, "你好世界")), "message_owner_bigram_idx")
    assert "&&" in bigram and "你好" in bigram and "好世" in bigram
    long_term = "wedding" * 36 + "abcd"  # 256 letters
    trigram = _index_conditions(_scans(_plan(user, long_term)), "message_owner_trgm_idx")
    assert long_term[:40].upper() in trigram


def test_a_query_of_short_terms_walks_the_newest_messages(rare_terms_among_many):
    user = rare_terms_among_many
    assert len(_search_ids(user, "a 京 1")) == 10
    names = {s["Index Name"] for s in _scans(_plan(user, "a 京 1"))}
    assert "message_owner_recent_idx" in names
    assert not names & {"message_owner_trgm_idx", "message_owner_bigram_idx"}


def test_the_visible_threads_never_drive_an_index_scan_of_messages():
    """The thread check is `conversation_id + 0 = ANY (...)`, a filter: as an index condition
    the planner would AND the thread index's bitmap (every message of the user's visible
    threads) into each GIN scan."""
    user = UserFactory()
    threads = ConversationFactory.create_batch(40, user=user)
    Message.objects.bulk_create(
        [
            Message(conversation=threads[i % 40], role="user", content=f"common text {i}")
            for i in range(4_000)
        ]
        + [Message(conversation=threads[3], role="user", content="wedding kyoto 你好")]
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE conversations_conversation, conversations_message")
    for query in ("wedding", "wedding kyoto", "你好 kyoto", "wedding 你好 text"):
        assert _search_ids(user, query)[0] == Message.objects.get(content__startswith="wedding").pk
        plan = _plan(user, query, disable=("seqscan", "indexscan"))
        conditions = [
            n.get("Index Cond", "")
            for n in _nodes(plan)
            if "Index Name" in n and not n["Index Name"].startswith("conversations_conversation")
        ]
        assert conditions and not any("conversation_id" in c for c in conditions), query


def _nodes(node: dict) -> list[dict]:
    return [node] + [found for child in node.get("Plans", []) for found in _nodes(child)]


def _message_scans_run(user, query: str) -> list[str]:
    """The search indexes of the message table that the scans which ran of `query`'s search
    walk, one a scan."""
    plan = _plan(user, query, limit=3, analyze=True, disable=())
    return [
        node["Index Name"]
        for node in _nodes(plan)
        if node.get("Index Name") in SEARCH_INDEXES and node["Actual Loops"] > 0
    ]


def test_a_full_page_among_the_newest_messages_never_runs_the_indexed_step():
    user = UserFactory()
    _messages(_thread(user), ["old rare words"] + ["frequent words here"] * 5)
    # The newest-first walk only (then each hit fetched by its key): no GIN scan.
    frequent = _message_scans_run(user, "words frequent")
    assert not set(frequent) & {"message_owner_trgm_idx", "message_owner_bigram_idx"}
    # Not a full page with both terms: the indexed step runs too.
    assert len(_message_scans_run(user, "rare words")) > len(frequent)


@pytest.mark.parametrize(
    "hidden",
    [
        {"thread": {"user": "other"}},
        {"thread": {"status": Conversation.Status.ARCHIVED}},
        {"thread": {"status": Conversation.Status.DELETED}},
        {"thread": {"source": Conversation.Source.AGENT_CALL}},
        {"thread": {"source": Conversation.Source.AGENT_EVALUATION}},
        {"thread": {"parent": "visible"}},
        {"message": {"role": Message.Role.SYSTEM}},
        {"message": {"role": Message.Role.TOOL}},
        {"message": {"message_type": Message.Type.TOOL_CALL}},
    ],
    ids=[
        "other user",
        "archived",
        "deleted",
        "agent_call",
        "agent_evaluation",
        "sub-agent child",
        "system message",
        "tool message",
        "tool_call message",
    ],
)
def test_a_full_page_of_newer_invisible_matches_is_never_returned(hidden):
    # Ten invisible matches newer than ten visible ones: a page the newest-first step would
    # fill, and answer with, if it let any of them through.
    user = UserFactory()
    visible_thread = _thread(user)
    visible = _messages(visible_thread, [f"sister wedding {i}" for i in range(10)])
    options = dict(hidden.get("thread", {}))
    if options.get("user") == "other":
        options["user"] = UserFactory()
    if options.get("parent") == "visible":
        options["parent"] = visible_thread
    thread = _thread(options.pop("user", user), **options) if "thread" in hidden else visible_thread
    for i in range(10):
        MessageFactory(
            conversation=thread,
            content=f"wedding of my sister {i}",
            created_at=T0 + timedelta(hours=1, minutes=i),
            **hidden.get("message", {}),
        )
    assert _search_ids(user, "wedding sister") == [m.pk for m in reversed(visible)]


def _trigram_scans_run(user, query: str) -> list[dict]:
    """The trigram index scans of terms the statement `query`'s search sends ran, with their
    rows. Only bitmap scans are allowed (at this size the planner may rather walk a btree and
    filter; without index scans it walks the newest messages by the owner key of the trigram
    index, a scan with no term)."""
    plan = _plan(user, query, analyze=True, disable=("seqscan", "indexscan"))
    return [
        node
        for node in _nodes(plan)
        if node.get("Index Name") == "message_owner_trgm_idx"
        and "upper(content)" in node["Index Cond"]
        and node["Actual Loops"] > 0
    ]


def test_a_frequent_term_beside_a_rare_one_is_only_a_filter_and_still_required(
    rare_terms_among_many,
):
    user = rare_terms_among_many
    thread = Conversation.objects.filter(user=user).first()
    both = _messages(thread, ["wedding of common friends"] * 3)
    # "common" is in nearly every newest message, "wedding" in five (three with "common").
    assert _search_ids(user, "common wedding")[:3] == [m.pk for m in reversed(both)]
    [scan] = [s for s in _trigram_scans_run(user, "common wedding") if "CASE" in s["Index Cond"]]
    assert "%WEDD%" in scan["Index Cond"]  # "wedding" by its stem
    # The index found every message with "wedding"; "common" was checked on those only.
    assert scan["Actual Rows"] == 5


def test_terms_all_found_as_often_all_drive_the_index(rare_terms_among_many):
    user = rare_terms_among_many
    thread = Conversation.objects.filter(user=user).first()
    _messages(thread, [f"wedding kyoto {i}" for i in range(12)])
    # Neither term is rarer than the other among the newest messages: both index conditions.
    all_three = Message.objects.filter(content__startswith="wedding kyoto", content__contains="1")
    assert set(_search_ids(user, "wedding kyoto 1")[:5]) == set(
        all_three.values_list("pk", flat=True)
    )
    # The step of every term (the slots' patterns; each rare term's own lookup scans too).
    [scan] = [s for s in _trigram_scans_run(user, "wedding kyoto 1") if "CASE" in s["Index Cond"]]
    assert "%WEDD%" in scan["Index Cond"] and "%KYOTO%" in scan["Index Cond"]
    assert scan["Actual Rows"] == 14


def test_of_rare_terms_only_the_rarest_drives_the_index_and_the_others_are_still_required(
    rare_terms_among_many,
):
    user = rare_terms_among_many
    thread = Conversation.objects.filter(user=user).first()
    both = Message.objects.bulk_create(
        [Message(conversation=thread, role="user", content="amber violet") for _ in range(2)]
        + [Message(conversation=thread, role="user", content="violet trip") for _ in range(3)]
        + [Message(conversation=thread, role="user", content="amber cake") for _ in range(4)]
    )[:2]
    # Both rare among the newest messages ("violet" in five, "amber" in six): only "violet"
    # is looked up in the index; "amber" is checked on what it found, and still required.
    assert set(_search_ids(user, "amber violet")[:2]) == {m.pk for m in both}
    [scan] = [s for s in _trigram_scans_run(user, "amber violet") if "CASE" in s["Index Cond"]]
    assert scan["Actual Rows"] == 5


@pytest.fixture
def eight_kept_of_nine(rare_terms_among_many):
    """The user of `rare_terms_among_many` with messages of rarer words, and a question of
    nine terms, one of them found nowhere (left out), and the same question of the eight kept."""
    user = rare_terms_among_many
    thread = Conversation.objects.filter(user=user).first()
    Message.objects.bulk_create(
        [Message(conversation=thread, role="user", content="amber violet") for _ in range(6)]
        + [Message(conversation=thread, role="user", content="violet trip") for _ in range(3)]
        + [Message(conversation=thread, role="user", content="amber cake") for _ in range(4)]
        + [Message(conversation=thread, role="user", content="common amber cake text")]
    )
    kept = "wedding kyoto amber violet trip cake common text"
    return user, "wedding kyoto amber violet zzqxv trip cake common text", kept


def test_of_more_than_eight_terms_the_rarest_trigram_term_drives_chosen_as_they_are_counted(
    eight_kept_of_nine,
):
    user, nine, kept = eight_kept_of_nine
    # The terms were counted among the newest messages to keep eight: the one that drives the
    # step with every term is chosen then ("wedding", in two, first of the rarest), and the
    # statement is planned with its condition alone ("kyoto", also in two, is only checked).
    [scan] = [s for s in _trigram_scans_run(user, nine) if "CASE" in s["Index Cond"]]
    assert "%WEDD%" in scan["Index Cond"]
    assert not {"%KYOTO%", "%AMBER%", "%VIOLET%", "%COMMON%"} & set(
        scan["Index Cond"].replace("'", " ").split()
    )
    assert scan["Actual Rows"] == 2
    # Which term drives changes the cost, never the result: the eight kept terms, asked
    # alone (the statement choosing), find the same hits in the same order.
    assert search_thread_messages(user.pk, nine) == search_thread_messages(user.pk, kept)


def test_of_more_than_eight_terms_only_the_rarest_are_planned_to_be_looked_up(
    eight_kept_of_nine,
):
    user, nine, kept = eight_kept_of_nine
    words = [
        node["Index Cond"]
        for node in _nodes(_plan(user, nine, disable=("seqscan", "indexscan")))
        if node.get("Index Name") == "message_owner_words_idx"
    ]
    # "wedding" and "kyoto" (two each) and "trip" (three): the RARE_LOOKUPS rarest; "cake"
    # (five), "amber" (eleven), "common" and "text" (most) are not planned at all.
    assert len(words) == search.RARE_LOOKUPS
    asked = [
        node
        for node in _nodes(_plan(user, kept, disable=("seqscan", "indexscan")))
        if node.get("Index Name") == "message_owner_words_idx"
    ]
    assert len(asked) == len(kept.split())  # the statement choosing: one a term


@pytest.fixture
def often_and_rare():
    """Forty messages, newest last: "often" in thirty (frequent among the newest), three
    rarer words in four to eight each, with and without "often"."""
    user = UserFactory()
    contents = [
        " ".join(
            ["often"] * (i % 4 != 0)
            + ["amber"] * (i % 7 == 0)
            + ["Basil"] * (i % 5 == 0)
            + ["cedar_tree"] * (i % 11 == 0)
            + [f"n{i}"]
        )
        for i in range(40)
    ]
    return user, _messages(_thread(user), contents)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    words=st.lists(
        st.sampled_from(["often", "OFTEN", "amber", "basil", "cedar_tree", "ten", "of", "n2", "b"]),
        min_size=1,
        max_size=4,
    )
)
def test_a_term_left_to_the_filter_still_ranks_as_a_scan_finds(often_and_rare, words):
    user, messages = often_and_rare
    query = " ".join(words)
    distinct = terms.query_terms(query)
    contents = {m.pk: m.content for m in messages}
    have = {pk: [t for t in distinct if _contains_or_form(c, t)] for pk, c in contents.items()}
    hits = _hits(user, query)
    # Every term counts where a scan finds it, filtered or not; a page of the matches is found.
    assert [h["matched_terms"] for h in hits] == [have[h["message_id"]] for h in hits]
    assert len(hits) == min(10, sum(1 for found in have.values() if found))


# Ranking: any term matches; a BM25-like score (rarer terms weigh more), terms close together
# and more of the query's terms counting more, then newest.


def _hits(user, query: str, **kwargs) -> list[dict]:
    return search_thread_messages(user.pk, query, limit=10, **kwargs)["results"]


def test_a_message_with_every_term_ranks_before_newer_ones_with_fewer(search_step):
    user = UserFactory()
    both, sister, wedding = _messages(
        _thread(user), ["my sister's wedding is on June 14", "my sister called", "a wedding cake"]
    )
    # The one with both terms is the oldest; a query word no message has changes nothing.
    assert _search_ids(user, "sister wedding date") == [both.pk, wedding.pk, sister.pk]


def test_among_messages_with_as_many_terms_the_rarer_term_ranks_first():
    # How rare a term is is counted among the user's newest messages (here all of them).
    user = UserFactory()
    thread = _thread(user)
    rare = _messages(thread, ["we saw a heron"])[0]
    common = _messages(thread, [f"the weather is fine {i}" for i in range(5)])
    found = _search_ids(user, "weather heron")
    # "heron" is in one message, "weather" in five: the heron ranks first although oldest.
    assert found == [rare.pk] + [m.pk for m in reversed(common)]


def test_terms_close_together_rank_before_the_same_terms_far_apart(search_step):
    user = UserFactory()
    near, far = _messages(
        _thread(user),
        ["my sister's wedding was lovely", "my sister " + "and so on " * 20 + "at a wedding"],
    )
    assert _search_ids(user, "wedding sister") == [near.pk, far.pk]


def test_among_equal_matches_the_newest_ranks_first(search_step):
    user = UserFactory()
    stated, corrected = _messages(
        _thread(user),
        ["the book club meets on Monday", "update: the book club meets on Friday now"],
    )
    assert _search_ids(user, "book club meets") == [corrected.pk, stated.pk]


def test_matched_terms_are_the_query_terms_each_hit_contains_in_query_order(search_step):
    user = UserFactory()
    _messages(_thread(user), ["KYOTO trip with my Sister", "Sister only", "nothing here"])
    hits = _hits(user, 'sister "kyoto trip" nowhere sister')
    assert [h["matched_terms"] for h in hits] == [["sister", "kyoto trip"], ["sister"]]
    assert set(hits[0]) == HIT_KEYS


def test_another_form_of_a_word_is_found_after_the_word_as_written(search_step):
    user = UserFactory()
    exact, form = _messages(_thread(user), ["a peanut allergy", "I am allergic to peanuts"])
    hits = _hits(user, "allergy")
    assert [h["message_id"] for h in hits] == [exact.pk, form.pk]
    assert [h["matched_terms"] for h in hits] == [["allergy"], ["allergy"]]
    # A run of CJK characters is also found by half its two-character pieces (妹妹, 婚礼 of
    # 妹妹, 妹婚, 婚礼) after one that has it as written; one piece is not enough.
    thread = _thread(user)
    exact, *forms, _ = _messages(thread, ["妹妹婚礼", "我妹妹的婚礼", "婚礼上妹妹唱", "婚礼"])
    found = _search_ids(user, "妹妹婚礼")
    assert found[0] == exact.pk and sorted(found[1:]) == [m.pk for m in forms]


@pytest.mark.parametrize(
    ("since", "until", "expected"),
    [
        ("2026-01-02", None, [3, 2]),
        (None, "2026-01-02", [1, 0]),
        ("2026-01-01T12:00:00Z", "2026-01-02T12:00:00+00:00", [2, 1]),
        ("2026-01-01T12:00", "2026-01-02T12:00", [2, 1]),
        # An offset is converted to UTC: 20:00 at +08:00 is 12:00 UTC.
        ("2026-01-01T20:00:00+08:00", None, [3, 2, 1]),
        (datetime(2026, 1, 2, 12, tzinfo=UTC), None, [3]),
    ],
)
def test_since_is_inclusive_and_until_exclusive(since, until, expected, search_step):
    user = UserFactory()
    thread = _thread(user)
    days = [
        MessageFactory(conversation=thread, content="trip notes", created_at=at)
        for at in [
            datetime(2026, 1, 1, 0, tzinfo=UTC),
            datetime(2026, 1, 1, 12, tzinfo=UTC),
            datetime(2026, 1, 2, 0, tzinfo=UTC),
            datetime(2026, 1, 2, 12, tzinfo=UTC),
        ]
    ]
    found = search_thread_messages(user.pk, "trip", limit=10, since=since, until=until)
    assert _ids(found, "results") == [days[n].pk for n in expected]


@pytest.mark.parametrize(
    "bounds",
    [
        {"since": "yesterday"},
        {"until": "2026-13-01"},
        {"since": "14/06/2026"},
        {"until": 20260614},
        {"since": "2026-06-14" + " " * 60},
        {"since": "2026-06-14", "until": "2026-06-14"},
        {"since": "2026-06-15", "until": "2026-06-14"},
    ],
)
def test_a_bad_time_bound_is_refused_with_the_format(bounds):
    with pytest.raises(HistoryQueryError) as refused:
        search_thread_messages(UserFactory().pk, "trip", **bounds)
    assert "ISO 8601" in str(refused.value) or "earlier than" in str(refused.value)


UNINDEXABLE = ["C++", "...", "%%%", "%" * 256, "—" * 100, "a b c d e f g h", "婚", "界 京"]


@pytest.mark.parametrize("query", UNINDEXABLE)
def test_a_query_no_index_can_narrow_walks_only_the_newest_window(query, monkeypatch):
    monkeypatch.setattr(search, "SEARCH_WINDOW", 30)
    user = UserFactory()
    thread = _thread(user)
    old = _messages(thread, [f"old {query} here"])[0]
    for i in range(40):
        MessageFactory(
            conversation=thread, content="plain", created_at=T0 + timedelta(days=1, minutes=i)
        )
    # The old message has the terms but lies beyond the newest 30: never walked, never found.
    assert old.pk not in _search_ids(user, query)
    plan = _plan(user, query, analyze=True, disable=())
    read = [
        node
        for node in _nodes(plan)
        if node.get("Relation Name") == "conversations_message" and node["Actual Loops"] > 0
    ]
    assert not {n.get("Index Name") for n in read} & {
        "message_owner_trgm_idx",
        "message_owner_bigram_idx",
    }
    # Every scan of messages that ran read at most the window (by id lookups, a row a loop).
    assert all(n["Actual Rows"] * n["Actual Loops"] <= 30 for n in read if n["Actual Loops"] == 1)


SMUGGLED = "".join(chr(0xE0000 + ord(c)) for c in "obey")


def test_lookback_shows_invisible_characters_escaped_in_titles_snippets_and_contents():
    user = UserFactory()
    thread = _thread(user, title=f"plans{SMUGGLED}")
    (message,) = _messages(thread, [f"oolong tea{SMUGGLED} and 👩\u200d👧"])
    found = search_thread_messages(user.pk, "oolong")["results"]
    escaped = "\\u{E006F}\\u{E0062}\\u{E0065}\\u{E0079}"
    assert found[0]["snippet"] == f"oolong tea{escaped} and 👩\u200d👧"
    assert found[0]["title"] == f"plans{escaped}"
    read = read_thread_messages(user.pk, thread.thread_id)
    assert read["messages"][0]["content"] == f"oolong tea{escaped} and 👩\u200d👧"
    assert not any(0xE0000 <= ord(c) <= 0xE007F for c in to_json(read) + to_json(found[0]))


# Questions sent as written.


def test_a_question_of_fifteen_words_is_answered(search_step):
    user = UserFactory()
    fact, *_ = _messages(
        _thread(user),
        [
            "My sister finally got married in Porto last weekend, the whole family flew in.",
            "Did you see the game last night? It was a long one.",
            "What time do you want to meet on Friday?",
        ],
    )
    question = "Can you remind me where my sister got married last year, and who was there?"
    assert len(question.split()) == 15
    hits = search_thread_messages(user.pk, question)["results"]
    assert hits[0]["message_id"] == fact.pk
    assert {"sister", "married"} <= set(hits[0]["matched_terms"])


@pytest.mark.parametrize(
    "query", ["sunrise?", "(sunrise)", "sunrise...", "¿sunrise?", "“sunrise”,", "sunrise？"]
)
def test_a_word_wrapped_in_punctuation_matches_the_word(query, search_step):
    user = UserFactory()
    fact = _messages(_thread(user), ["we hiked up for the sunrise at five", "sunset was late"])[0]
    hits = search_thread_messages(user.pk, query)["results"]
    assert [h["message_id"] for h in hits] == [fact.pk]
    assert hits[0]["matched_terms"] == ["sunrise"]


def test_a_rare_word_outranks_messages_that_share_only_stop_words(search_step):
    user = UserFactory()
    rare, *_ = _messages(
        _thread(user),
        ["pottery class moved to the new studio", "when did the bus start, she asked"]
        + ["when did the shop open, and when did the rain start?"] * 4,
    )
    hits = search_thread_messages(user.pk, "When did the pottery class start?")["results"]
    assert hits[0]["message_id"] == rare.pk
    assert hits[0]["matched_terms"] == ["pottery", "class"]


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("", "must be a non-empty string"),
        ("x" * 257, "at most 256 characters"),
        ("When did she\x00 go?", "query must be"),
        ("  \t ", "blank"),
        ('"" " "', "blank"),
    ],
)
def test_empty_over_long_and_nul_queries_are_still_refused(query, message):
    with pytest.raises(HistoryQueryError, match=message):
        search_thread_messages(UserFactory().pk, query)


def test_a_question_of_stop_words_only_searches_them():
    user = UserFactory()
    said = _messages(_thread(user), ["what is it", "nothing here"])[0]
    hits = search_thread_messages(user.pk, "What is it?")["results"]
    assert [h["message_id"] for h in hits] == [said.pk]
    assert hits[0]["matched_terms"] == ["What", "is", "it"]


def test_a_chinese_question_drops_its_function_words(search_step):
    user = UserFactory()
    fact, other = _messages(_thread(user), ["妹妹下个月在杭州办婚礼", "我是在家的时候看到的"])
    hits = search_thread_messages(user.pk, "我妹妹的婚礼是什么时候？")["results"]
    assert [h["message_id"] for h in hits] == [fact.pk]
    assert hits[0]["matched_terms"] == ["妹妹", "婚礼"]


def test_of_many_terms_those_found_nowhere_then_the_most_frequent_are_left_out():
    user = UserFactory()
    words = ["often", "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]
    _messages(_thread(user), [" ".join(words)] + ["often here"] * 5)
    query = " ".join(["zzzabsent", *words, "yyyabsent"])  # eleven terms
    hits = search_thread_messages(user.pk, query)["results"]
    # Both absent words go first (they are found nowhere), then "often", the most frequent.
    assert hits[0]["matched_terms"] == words[1:]


def test_an_absent_word_that_an_older_message_holds_is_kept_over_a_frequent_one(monkeypatch):
    user = UserFactory()
    words = ["often", "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf"]
    thread = _thread(user)
    old = _messages(thread, ["ancientword only here"])[0]
    for n, content in enumerate(["often here"] * 4 + [" ".join(words)], start=1):
        MessageFactory(conversation=thread, content=content, created_at=T0 + timedelta(days=n))
    monkeypatch.setattr(search, "SEARCH_WINDOW", 3)  # the old message is out of the window
    hits = search_thread_messages(user.pk, " ".join([*words, "ancientword"]), limit=10)["results"]
    assert old.pk in [h["message_id"] for h in hits]
    assert all("often" not in h["matched_terms"] for h in hits)


def test_a_word_matches_its_other_forms_married_and_marry(search_step):
    user = UserFactory()
    fact = _messages(_thread(user), ["my cousin got married in June", "a quiet day"])[0]
    hits = search_thread_messages(user.pk, "When did my cousin marry?")["results"]
    assert hits[0]["message_id"] == fact.pk
    assert hits[0]["matched_terms"] == ["cousin", "marry"]


@pytest.mark.parametrize(
    ("text", "prefix"),
    [
        ("married", "marr:*"),  # a stemmed word: the words beginning with its stem
        ("Caroline", "Carolin:*"),
        ("café", "café:*"),
        ("2026", "2026:*"),
        ("abc123", "abc123:*"),
        ("ab", None),  # too short for any index
        ("C++", None),  # punctuation: the trigram index, or the window only
        ("snake_case", None),
        ("京都", None),  # CJK: the bigram index
        ("東京タワー", None),
    ],
)
def test_a_term_of_letters_or_digits_is_looked_up_by_the_words_beginning_with_its_form(
    text, prefix
):
    assert terms.term(text).word == prefix


def test_a_rare_words_older_messages_are_found_by_the_words_that_begin_with_it(monkeypatch):
    user = UserFactory()
    thread = _thread(user)
    plural, inside, _ = _messages(
        thread, ["the Weddings were lovely", "a prewedding dinner", "nothing here"]
    )
    for n in range(1, 6):
        MessageFactory(conversation=thread, content="chatter", created_at=T0 + timedelta(days=n))
    monkeypatch.setattr(search, "SEARCH_WINDOW", 5)  # the three old messages are out of it
    found = _search_ids(user, "wedding chatter")
    assert plural.pk in found  # "Weddings" begins with the stem of "wedding"
    # Only inside another word: not among the rare word's own candidates (a message with every
    # term would still be, through the trigram index).
    assert inside.pk not in found
    assert _search_ids(user, "prewedding chatter")[0] == inside.pk


def test_a_rare_words_own_candidates_come_through_the_word_index(rare_terms_among_many):
    user = rare_terms_among_many
    both = set(Message.objects.filter(content__startswith="wedding").values_list("pk", flat=True))
    assert set(_search_ids(user, "wedding common")[:2]) == both
    plan = _plan(user, "wedding common", analyze=True, disable=("seqscan", "indexscan"))
    lookups = [
        node
        for node in _nodes(plan)
        if node.get("Index Name") == "message_owner_words_idx" and node["Actual Loops"] > 0
    ]
    # The word's prefix query comes from an InitPlan (`@@ $n`); it found the two messages.
    assert any("@@" in node["Index Cond"] and node["Actual Rows"] == 2 for node in lookups)


def test_a_message_longer_than_a_tsvector_holds_is_stored_and_found():
    user = UserFactory()
    # 400,000 distinct words, 3.6 MB: their tsvector would exceed PostgreSQL's 1 MB, so the
    # word index takes the first 100,000 characters only.
    content = " ".join(f"w{n:07x}" for n in range(400_000)) + " zebra"
    message = _messages(_thread(user), [content])[0]
    assert _search_ids(user, "w0000010") == [message.pk]
    assert _search_ids(user, "zebra") == [message.pk]


def test_of_the_windows_partial_matches_those_whose_terms_weigh_most_are_scored(monkeypatch):
    user = UserFactory()
    kiwi, *apples = _messages(
        _thread(user), ["a kiwi"] + ["an apple"] * (search.FREQUENT_TERM_HITS + 2)
    )
    # No message has both words; "apple" is too frequent for a lookup of its own.
    assert len(_search_ids(user, "apple kiwi")) == 10
    monkeypatch.setattr(search, "WINDOW_CANDIDATES", 2)
    # The rarer word's message, then the newest of the others.
    assert _search_ids(user, "apple kiwi") == [kiwi.pk, apples[-1].pk]


def test_a_rarer_term_outweighs_a_frequent_one_and_a_long_message_weighs_less():
    user = UserFactory()
    thread = _thread(user)
    common = ["the garden is nice"] * 6
    rare, frequent, long_rare, *_ = _messages(
        thread,
        ["we planted tulips", "garden party", "tulips " + "and many more words here " * 30]
        + common,
    )
    ranked = _search_ids(user, "garden tulips")
    # tulips (in 2 of 9) outweighs garden (in 7 of 9); the long message with tulips weighs
    # less than the short one, though it is newer.
    assert ranked[:2] == [rare.pk, long_rare.pk]
    assert ranked.index(frequent.pk) > 1


def test_when_a_question_asks_when_a_message_with_a_date_ranks_first(search_step):
    user = UserFactory()
    dated, _ = _messages(
        _thread(user), ["the book club meets on Thursday at 7", "I love the book club"]
    )
    assert _search_ids(user, "When does the book club meet?")[0] == dated.pk
    assert _search_ids(user, "book club")[0] != dated.pk  # newest first without the question


@pytest.mark.django_db(transaction=True)
def test_rows_written_by_raw_sql_and_copy_are_found_and_ranked_like_the_orm_ones():
    user = UserFactory()
    thread = _thread(user)
    orm = _messages(thread, ["the tulips bloomed early"] + ["the garden is nice"] * 4)[0]
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO conversations_message (conversation_id, role, message_type, content,"
            " attachments, feedback, metadata, created_at) VALUES"
            " (%s, 'user', 'text', 'tulips in the rain', '[]', '{}', '{}', %s) RETURNING id",
            [thread.pk, T0 + timedelta(days=1)],
        )
        raw = cursor.fetchone()[0]
        with cursor.copy(
            "COPY conversations_message (conversation_id, role, message_type, content,"
            " attachments, feedback, metadata, created_at) FROM STDIN"
        ) as copy:
            copy.write_row(
                (thread.pk, "assistant", "text", "tulips for sale", "[]", "{}", "{}",
                 T0 + timedelta(days=2))
            )  # fmt: skip
    copied = Message.objects.get(content="tulips for sale").pk
    hits = search_thread_messages(user.pk, "Where are the tulips in the garden?")["results"]
    # All three tulip messages are found, newest first among equals (same length bucket, one
    # term each), above the frequent garden-only ones; the ORM row ranks as the others do.
    assert [h["message_id"] for h in hits[:3]] == [copied, raw, orm.pk]
    assert all(h["matched_terms"] == ["tulips"] for h in hits[:3])
