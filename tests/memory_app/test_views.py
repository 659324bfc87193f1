"""The user's page as HTTP sees it: login required and landed on, the CSP on the page and every
fragment, no inline script or style and nothing from another origin, the language of the
browser or of the switch, another user's thread out of reach, the memory cut where the agent
stops reading."""

import re
from pathlib import Path

import pytest
from django.contrib.staticfiles import finders
from django.test import Client

from conversations.models import AgentRun, Message, ToolCall
from memory_app.memory_file import MEMORY_FILE_MAX_BYTES
from memory_app.selectors import (
    MEMORY_PROMPT_MAX_BYTES,
    list_memory_versions,
    read_memory_file,
)
from memory_app.services import write_memory_file
from tests.catalogues import ROOT, translated_and_compiled
from tests.factories import (
    AgentRunFactory,
    ConversationFactory,
    MessageFactory,
    ToolCallFactory,
    UserConfigFactory,
    UserFactory,
)
from tests.yuxi_site.test_csp import _directives, _parsed

pytestmark = pytest.mark.django_db

MARKER = "<script>alert(1)</script>"
STATIC = Path(__file__).resolve().parents[2] / "memory_app" / "static" / "memory_app"


@pytest.fixture
def user():
    """A user with memory on, a MEMORY.md with a kept earlier version, a thread holding a tool
    call and a pending approval, every text carrying an HTML marker."""
    user = UserConfigFactory().user
    first = write_memory_file(
        user=user, text=f"{MARKER}\n", if_match=read_memory_file(user=user).etag, actor=user
    )
    write_memory_file(user=user, text="I drink tea\n", if_match=first.etag, actor=user)
    thread = ConversationFactory(user=user, title=MARKER)
    MessageFactory(conversation=thread, role=Message.Role.USER, content=MARKER)
    reply = MessageFactory(conversation=thread, role=Message.Role.ASSISTANT, content=MARKER)
    ToolCallFactory(message=reply)
    run = AgentRunFactory(conversation=thread, status=AgentRun.Status.INTERRUPTED)
    pending = MessageFactory(
        conversation=thread,
        role=Message.Role.ASSISTANT,
        message_type=Message.Type.TOOL_CALL,
        metadata={"run_id": str(run.run_id)},
    )
    ToolCallFactory(message=pending, status=ToolCall.Status.PENDING, input={"content": MARKER})
    run.finished_at = run.created_at
    run.save(update_fields=["finished_at"])
    return user


@pytest.fixture
def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def page_paths(user) -> list[str]:
    """The page and each fragment it loads, for `user`'s thread and newest kept version."""
    thread = user.conversations.get()
    [version, *_] = list_memory_versions(user=user)
    return [
        "/",
        "/page/threads/",
        "/page/threads/?status=archived",
        f"/page/threads/{thread.thread_id}/messages/",
        "/page/memory/",
        f"/page/memory/versions/{version.sha256}/diff/",
    ]


def test_an_anonymous_visitor_is_sent_to_the_login_page(user):
    for path in page_paths(user):
        response = Client().get(path)
        assert response.status_code == 302, path
        assert response["Location"].startswith("/accounts/login/?next="), path


def test_a_user_who_logs_in_lands_on_their_page():
    UserFactory(username="mei")
    client = Client()
    response = client.post("/accounts/login/", {"username": "mei", "password": "pw"})
    assert (response.status_code, response["Location"]) == (302, "/")
    assert client.get("/").status_code == 200


def test_page_and_fragments_carry_the_policy_no_inline_script_or_style_and_no_other_origin(
    user, logged_in
):
    for path in page_paths(user):
        response = logged_in.get(path)
        assert response.status_code == 200, path
        directives = _directives(response)
        assert directives["script-src"] == ["'self'"], path
        assert directives["default-src"] == ["'self'"], path  # styles too: no inline style
        html = response.content.decode()
        page = _parsed(html)
        assert page.inline_scripts == [], path
        assert not re.search(r"<script(?![^>]*\bsrc=)", html), path
        assert not re.search(r"\sstyle=|<style|\son[a-z]+=|javascript:", html, re.I), path
        assert not [url for url in page.urls if re.match(r"^(https?:)?//", url)], path
        assert MARKER not in html, path  # every text of the user's is escaped


def test_the_page_shows_the_switches_the_thread_the_card_and_the_file(user, logged_in):
    html = logged_in.get("/").content.decode()
    assert 'data-setting="enable_memory" checked' in html
    assert 'data-setting="memory_write_approval">' in html
    thread = user.conversations.get()
    messages = logged_in.get(f"/page/threads/{thread.thread_id}/messages/").content.decode()
    assert messages.count('class="message ') == 2
    assert "Saved to memory" in messages and "remember_memory" not in messages
    assert 'class="card approval"' in messages and 'data-decision="approve"' in messages
    threads = logged_in.get("/page/threads/").content.decode()
    assert "Waiting for your approval" in threads
    memory = logged_in.get("/page/memory/").content.decode()
    assert "I drink tea" in memory and 'class="version"' in memory
    assert f'max="{MEMORY_FILE_MAX_BYTES}" value="12"' in memory


@pytest.mark.parametrize(
    ("accept", "lang", "text"),
    [("en-US,en;q=0.9", "en", "New conversation"), ("zh-CN,zh;q=0.9", "zh-hans", "新对话")],
)
def test_the_language_is_the_browsers_by_default(logged_in, accept, lang, text):
    html = logged_in.get("/", HTTP_ACCEPT_LANGUAGE=accept).content.decode()
    assert f'<html lang="{lang}">' in html
    assert text in html


def test_the_language_switch_overrides_the_browser(logged_in):
    response = logged_in.post("/i18n/setlang/", {"language": "zh-hans", "next": "/"})
    assert (response.status_code, response["Location"]) == (302, "/")
    html = logged_in.get("/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert '<html lang="zh-hans">' in html and "每次写入记忆前先问我" in html
    memory = logged_in.get("/page/memory/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert "早期版本" in memory


@pytest.mark.parametrize(
    ("accept", "heading", "pointer", "wrong"),
    [
        ("en", "Memory", "(the Memory section of this page)", "on the right"),
        ("zh-CN,zh;q=0.9", "记忆", "（见本页的“记忆”部分）", "右侧"),
    ],
)
def test_the_empty_conversation_names_the_memory_section_in_words_true_at_any_width(
    logged_in, accept, heading, pointer, wrong
):
    """A phone shows the memory panel below the conversation, a wide window beside it: the
    empty state names the section by its heading, never by where it stands."""
    html = logged_in.get("/", HTTP_ACCEPT_LANGUAGE=accept).content.decode()
    [empty] = re.findall(r'<div class="empty">.*?</div>', html, re.S)
    assert pointer in empty and wrong not in empty
    assert f'<h2 id="memory-title">{heading}</h2>' in html


def test_another_users_or_an_unknown_thread_or_version_is_404(logged_in):
    other = ConversationFactory()
    MessageFactory(conversation=other)
    for path in (
        f"/page/threads/{other.thread_id}/messages/",
        "/page/threads/nope/messages/",
        f"/page/memory/versions/{'0' * 64}/diff/",
    ):
        assert logged_in.get(path).status_code == 404, path


def test_a_forged_cursor_is_a_400(user, logged_in):
    thread = user.conversations.get()
    for path in (f"/page/threads/{thread.thread_id}/messages/", "/page/threads/"):
        assert logged_in.get(path, {"cursor": "forged"}).status_code == 400, path


def test_older_messages_load_through_the_cursor_the_page_holds(user, logged_in):
    thread = user.conversations.get()
    for n in range(40):
        MessageFactory(conversation=thread, role=Message.Role.USER, content=f"later {n}")
    first = logged_in.get(f"/page/threads/{thread.thread_id}/messages/").content.decode()
    assert "later 39" in first and "later 0" not in first
    older = re.search(r'hx-get="([^"]+cursor=[^"]+)"', first).group(1).replace("&amp;", "&")
    earlier = logged_in.get(older).content.decode()
    assert "later 0" in earlier and "later 39" not in earlier
    assert "approval" not in earlier  # the card belongs to the newest page only


def test_the_panel_marks_where_the_agent_stops_reading(user, logged_in):
    first = "x" * (MEMORY_PROMPT_MAX_BYTES - 1)  # with its "\n": exactly what the agent reads
    text = f"{first}\nhidden from the agent\n"
    write_memory_file(user=user, text=text, if_match=read_memory_file(user=user).etag, actor=user)
    html = logged_in.get("/page/memory/").content.decode()
    assert html.index(first) < html.index('class="cut"') < html.index("hidden from the agent")
    assert html.index('class="lines unread"') < html.index("hidden from the agent")
    shorter = f"{first}\n"  # the whole file is read: nothing to mark
    write_memory_file(
        user=user, text=shorter, if_match=read_memory_file(user=user).etag, actor=user
    )
    assert 'class="cut"' not in logged_in.get("/page/memory/").content.decode()


def test_each_line_says_where_it_came_from_and_can_be_forgotten(user, logged_in):
    html = logged_in.get("/page/memory/").content.decode()
    [line] = re.findall(r'<li class="line".*?</li>', html, re.S)
    assert '<span class="line-text">I drink tea</span>' in line
    assert "your edit" in line
    assert 'data-memory="forget-line" data-number="1"' in line


def test_the_page_ships_its_own_scripts_and_htmx_with_its_licence():
    for asset in ("page.js", "page.css", "vendor/htmx/htmx.esm.js", "vendor/htmx/LICENSE"):
        assert finders.find(f"memory_app/{asset}"), asset
    script = (STATIC / "page.js").read_text()
    assert re.findall(r'^import .* from "(.*)";$', script, re.M) == ["./vendor/htmx/htmx.esm.js"]
    # Text it shows goes in as text (fragments come from the server's escaping templates).
    assert not re.search(r"https?://|eval\(|new Function|\.innerHTML|insertAdjacentHTML", script)


def test_every_text_of_the_page_is_translated_and_the_compiled_catalogue_is_current():
    entries = translated_and_compiled(ROOT / "memory_app/locale/zh_Hans/LC_MESSAGES")
    assert len(entries) > 90


def test_an_empty_reply_is_said_to_be_empty(user, logged_in):
    thread = user.conversations.get()
    MessageFactory(conversation=thread, role=Message.Role.ASSISTANT, content="")
    html = logged_in.get(f"/page/threads/{thread.thread_id}/messages/").content.decode()
    assert "(an empty reply)" in html


def test_the_page_and_every_fragment_are_never_stored_by_the_browser(user, logged_in):
    for path in page_paths(user):
        response = logged_in.get(path)
        assert response.status_code == 200, path
        assert "no-store" in response["Cache-Control"], path


@pytest.mark.parametrize("accept", ["zh-TW", "zh-Hant", "zh-Hant-HK,zh;q=0.8", "zh-HK"])
def test_traditional_chinese_browsers_get_simplified_chinese(logged_in, accept):
    html = logged_in.get("/", HTTP_ACCEPT_LANGUAGE=accept).content.decode()
    assert '<html lang="zh-hans">' in html
    assert 'value="en"' in html  # the buttons still offer English


def test_dates_are_unambiguous_and_chinese_has_no_ascii_comma_or_wrong_replaced_by(user, logged_in):
    english = logged_in.get("/page/memory/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    # "7 Dec 2026, 06:04 UTC": the month in words, a 24-hour clock, the zone; never
    # "12/07/2026 6:04 a.m."
    assert re.search(r">\d{1,2} [A-Z][a-z]{2} \d{4}, \d{2}:\d{2} UTC<", english)
    assert not re.search(r"\d{1,2}/\d{1,2}/\d{4}", english)
    chinese = logged_in.get("/page/memory/", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert re.search(r">\d{4}年\d{1,2}月\d{1,2}日 \d{2}:\d{2} UTC<", chinese)
    assert "被替换于" not in chinese and "替换它的是：" in chinese
    assert not re.search(r"(你的编辑|助手|你的恢复|工作人员), ", chinese)
    threads = logged_in.get("/page/threads/", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert re.search(r">\d{4}年\d{1,2}月\d{1,2}日 \d{2}:\d{2} UTC<", threads)


@pytest.mark.parametrize("accept", ["en", "zh-hans"])
@pytest.mark.parametrize(
    ("zone", "label", "offset"), [("UTC", "UTC", "+00:00"), ("Asia/Shanghai", "CST", "+08:00")]
)
def test_every_date_the_page_shows_names_the_time_zone_it_is_shown_in(
    user, logged_in, settings, accept, zone, label, offset
):
    settings.TIME_ZONE = zone
    MessageFactory(conversation=user.conversations.get(), content="a zebra crossing")
    paths = [*page_paths(user), "/page/approvals/", "/page/search/?q=zebra"]
    dated = set()
    for path in paths:
        html = logged_in.get(path, HTTP_ACCEPT_LANGUAGE=accept).content.decode()
        for stamp, text in re.findall(r'<time datetime="([^"]+)">([^<]*)</time>', html):
            assert stamp.endswith(offset) and text.endswith(f"{stamp[11:16]} {label}"), path
            dated.add(path.split("?")[0])
    # threads, messages, line origins and versions, approvals, search hits
    assert len(dated) == 5 and "/page/memory/" in dated


def test_a_heading_line_has_no_forget_button_and_cr_only_lines_are_separate(logged_in, user):
    current = read_memory_file(user=user)
    write_memory_file(
        user=user, text="# Memory\r- tea\r- walks\r", if_match=current.etag, actor=user
    )
    html = logged_in.get("/page/memory/").content.decode()
    assert html.count('data-memory="forget-line"') == 2
    assert re.findall(r'<span class="line-text">([^<]*)</span>', html) == [
        "# Memory",
        "- tea",
        "- walks",
    ]


def test_search_finds_only_the_users_own_visible_messages_with_their_terms_marked(user, logged_in):
    mine = ConversationFactory(user=user, title="Zoo")
    MessageFactory(conversation=mine, content="we saw a zebra <b>there</b>")
    archived = ConversationFactory(user=user, title="Old zoo", status="archived")
    MessageFactory(conversation=archived, content="another zebra")
    MessageFactory(conversation=ConversationFactory(title="Theirs"), content="their zebra")
    html = logged_in.get("/page/search/", {"q": "zebra"}).content.decode()
    assert html.count('class="hit"') == 1 and "Zoo" in html
    assert "<mark>zebra</mark>" in html and "&lt;b&gt;there&lt;/b&gt;" in html
    assert "Theirs" not in html and "Old zoo" not in html
    assert re.search(r">\d{1,2} [A-Z][a-z]{2} \d{4}, \d{2}:\d{2} UTC<", html)


def test_a_search_with_nothing_to_search_says_so_in_the_users_words(logged_in):
    blank = logged_in.get("/page/search/", {"q": " "}, HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert "请输入要查找的内容。" in blank.content.decode()
    nothing = logged_in.get("/page/search/", {"q": "qwertyuiop"}).content.decode()
    assert "No conversation mentions it." in nothing


def test_the_approvals_of_every_thread_are_listed_with_a_way_to_each(user, logged_in):
    html = logged_in.get("/page/approvals/").content.decode()
    thread = user.conversations.get()
    assert html.count('class="approval-item"') == 1
    assert f'data-open-thread="{thread.thread_id}"' in html
    assert MARKER not in html and "&lt;script&gt;" in html
    other = Client()
    other.force_login(UserFactory())
    assert "approval-item" not in other.get("/page/approvals/").content.decode()
