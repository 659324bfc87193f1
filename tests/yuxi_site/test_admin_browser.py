"""Staff pages in a real headless chromium: what a person actually sees, with screenshots.

Demo data plus long real-world values (64-character thread ids, 256-byte titles, CJK, emoji):
every column keeps a readable width, no header is cut off, nothing scrolls sideways, and the
links lead from a user to their config, its ledger, the run, the thread and its messages.
"""

import io
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone
from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from conversations.models import AgentRun, Conversation, Message
from memory_app.models import MemoryEvent
from tests.browser import ARTIFACTS, BROWSER_TESTS, PAGE_WAIT_SECONDS, log_in
from tests.factories import (
    AgentRunFactory,
    ConversationFactory,
    MemoryEventFactory,
    MessageFactory,
    StaffUserFactory,
    ToolCallFactory,
    UserConfigFactory,
    UserFactory,
)

MARKER = "<script>window.yuxiInjected = true</script>"

pytestmark = BROWSER_TESTS


@pytest.fixture
def staff_browser(browser, live_server):
    """The browser, logged in to the admin through its login form."""
    url = live_server.url + reverse("admin:login")
    staff = StaffUserFactory()
    log_in(browser, url, staff.username, submit='input[type="submit"]', landed="#user-tools")
    return browser


def _open(browser, live_server, url, screenshot):
    browser.get(live_server.url + url)
    WebDriverWait(browser, PAGE_WAIT_SECONDS).until(
        expected_conditions.presence_of_element_located((By.ID, "content"))
    )
    ARTIFACTS.mkdir(exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / screenshot))


def _assert_marker_inert(browser):
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text  # noqa: B018 - reading it is the probe
    assert browser.execute_script("return window.yuxiInjected === undefined")


def test_staff_sees_a_hidden_thread_banner_and_escaped_raw_messages(staff_browser, live_server):
    root = ConversationFactory()
    child = ConversationFactory(user=root.user, parent=root, title=MARKER)
    MessageFactory(conversation=child, role=Message.Role.USER, content=MARKER)
    url = reverse("admin:conversations_conversation_change", args=[child.pk])
    _open(staff_browser, live_server, url, "conversation-hidden-preview.png")
    banner = staff_browser.find_element(By.CSS_SELECTOR, ".yuxi-banner").text
    assert "Not visible to history lookback" in banner
    assert "SubAgent child" in banner
    raw = staff_browser.find_element(By.CSS_SELECTOR, "table.yuxi-raw").text
    assert MARKER in raw
    _assert_marker_inert(staff_browser)


def test_staff_sees_a_visible_thread_as_the_agent_sees_it(staff_browser, live_server):
    thread = ConversationFactory(title="旅行计划 Trip", status=Conversation.Status.ACTIVE)
    MessageFactory(conversation=thread, content="请记住：我对花生过敏")
    MessageFactory(conversation=thread, role=Message.Role.ASSISTANT, content=MARKER)
    MessageFactory(conversation=thread, role=Message.Role.SYSTEM, content="system-routing-hint")
    url = reverse("admin:conversations_conversation_change", args=[thread.pk])
    _open(staff_browser, live_server, url, "conversation-visible-preview.png")
    banner = staff_browser.find_element(By.CSS_SELECTOR, ".yuxi-banner").text
    assert "Visible to history lookback" in banner
    agent = staff_browser.find_element(By.CSS_SELECTOR, "table.yuxi-agent").text
    assert "请记住：我对花生过敏" in agent
    assert MARKER in agent
    assert "system-routing-hint" not in agent
    raw = staff_browser.find_element(By.CSS_SELECTOR, "table.yuxi-raw").text
    assert "system-routing-hint" in raw
    summary = staff_browser.find_element(By.CSS_SELECTOR, ".yuxi-agent-summary").text
    assert summary.startswith("2 messages returned")
    _assert_marker_inert(staff_browser)


def test_staff_sees_memory_as_the_agent_sees_it(staff_browser, live_server):
    config = UserConfigFactory(enable_memory=True)
    agents = Path(settings.WORKSPACE_ROOT) / str(config.user_id) / "agents"
    agents.mkdir(parents=True)
    memory = f"- 对花生过敏 🥜\n- {MARKER}\n"
    (agents / "MEMORY.md").write_text(memory, encoding="utf-8")
    url = reverse("admin:memory_app_userconfig_change", args=[config.pk])
    _open(staff_browser, live_server, url, "memory-preview.png")
    content = staff_browser.find_element(By.ID, "content").text
    assert "on: the agent's next run reads the memory" in content
    assert f"{len(memory.encode())} bytes shown (the agent reads at most 24576)" in content
    assert "truncated: no" in content
    shown = staff_browser.find_element(By.CSS_SELECTOR, "pre.yuxi-excerpt").text
    assert shown == memory.strip()
    _assert_marker_inert(staff_browser)


LONG_USERNAME = "张伟-zhang.wei+travel-planner-🦊"
LONG_THREAD_ID = "t-" + "0123456789abcdef" * 3 + "0123456789abcd"
LONG_TITLE = (
    ("旅行计划 🧳 Kyoto & Osaka with the family — 预订酒店、火车票和餐厅 " * 6)
    .encode()[:256]
    .decode("utf-8", "ignore")
)
EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
# Narrower than this, a column shows a word or two per line at best.
READABLE_COLUMN_PX = 40
# The columns that carry text need room for a phrase, not a letter.
READABLE_TEXT_COLUMN_PX = 120


@pytest.fixture
def long_world():
    """The demo data, plus a user whose every value is as long as real ones get."""
    call_command("seed_demo", stdout=io.StringIO())
    user = UserFactory(username=LONG_USERNAME)
    config = UserConfigFactory(user=user, enable_memory=True)
    thread = ConversationFactory(user=user, thread_id=LONG_THREAD_ID, title=LONG_TITLE)
    assert len(thread.thread_id) == 64 and len(thread.title.encode()) >= 250
    child = ConversationFactory(
        user=user,
        thread_id="s-" + LONG_THREAD_ID[2:],
        title="子任务 🔎 " + LONG_TITLE[:60],
        parent=thread,
        source=Conversation.Source.AGENT_CALL,
    )
    started = timezone.now() - timedelta(minutes=5)
    run = AgentRunFactory(
        conversation=thread,
        request_id="req-" + "9" * 60,
        status=AgentRun.Status.FAILED,
        worker_id="worker-" + "w" * 60,
        created_at=started,
        started_at=started,
        error="model error: the model did not answer within 8 steps 🙁",
    )
    AgentRunFactory(
        conversation=child, run_type=AgentRun.RunType.SUBAGENT, parent_run=run, request_id="sub"
    )
    for n in range(6):
        MessageFactory(
            conversation=thread,
            role=Message.Role.USER if n % 2 == 0 else Message.Role.ASSISTANT,
            content=f"第{n}条：请记住我对花生过敏 🥜 "
            + "averyveryverylongwordwithoutanyspaces" * 8,
        )
    issuer = MessageFactory(conversation=thread, role=Message.Role.ASSISTANT, content="好的 👍")
    call = ToolCallFactory(message=issuer, tool_call_id="call_" + "z" * 60)
    MemoryEventFactory(
        user=user,
        kind=MemoryEvent.Kind.SWITCH_ON,
        actor=user,
        run=None,
        before_sha256=EMPTY_SHA256,
        after_sha256=EMPTY_SHA256,
        size_bytes=0,
    )
    added = MemoryEventFactory(
        user=user, run=run, before_sha256=EMPTY_SHA256, after_sha256="a" * 64
    )
    MemoryEventFactory(
        user=user,
        kind=MemoryEvent.Kind.USER_EDITED,
        actor=user,
        run=None,
        before_sha256="b" * 64,  # not "a" * 64: the chain breaks here
        after_sha256="c" * 64,
    )
    AgentRun.objects.filter(pk=run.pk).update(finished_at=timezone.now())
    return {
        "user": user,
        "config": config,
        "thread": thread,
        "run": run,
        "event": added,
        "call": call,
    }


# Every column of the changelist table and every header, measured in the page.
_MEASURE_COLUMNS = """
const table = document.querySelector('#result_list');
if (!table) { return null; }
const results = table.closest('.results') || table.parentElement;
const headers = [...table.querySelectorAll('thead th')].map(th => ({
  name: th.className || th.textContent.trim(),
  text: th.textContent.trim(),
  width: th.getBoundingClientRect().width,
  cut: th.scrollWidth > th.clientWidth + 1,
}));
return {
  headers: headers,
  sideways: results.scrollWidth > results.clientWidth + 1,
  pageSideways: document.documentElement.scrollWidth > window.innerWidth + 1,
};
"""

TEXT_COLUMNS = ("title", "content", "thread", "user", "error", "run", "tool call")

CHANGELISTS = [
    ("admin:conversations_conversation_changelist", "changelist-conversations.png"),
    ("admin:conversations_message_changelist", "changelist-messages.png"),
    ("admin:conversations_toolcall_changelist", "changelist-toolcalls.png"),
    ("admin:conversations_agentrun_changelist", "changelist-runs.png"),
    ("admin:memory_app_userconfig_changelist", "changelist-userconfigs.png"),
    ("admin:memory_app_memoryevent_changelist", "changelist-memoryevents.png"),
]


# The window widths staff use: a laptop and a desktop monitor.
WINDOW_WIDTHS = (1280, 1920)
WINDOW_HEIGHT = 2000


@pytest.mark.parametrize("width", WINDOW_WIDTHS)
def test_every_changelist_keeps_readable_columns_and_whole_headers(
    staff_browser, live_server, long_world, width
):
    staff_browser.set_window_size(width, WINDOW_HEIGHT)
    for name, screenshot in CHANGELISTS:
        _open(
            staff_browser, live_server, reverse(name), screenshot.replace(".png", f"-{width}.png")
        )
        measured = staff_browser.execute_script(_MEASURE_COLUMNS)
        assert measured is not None, name
        assert not measured["sideways"], name
        assert not measured["pageSideways"], name
        for header in measured["headers"]:
            assert not header["cut"], (name, header)
            assert header["width"] >= READABLE_COLUMN_PX, (name, header)
            if header["text"].lower() in TEXT_COLUMNS:
                assert header["width"] >= READABLE_TEXT_COLUMN_PX, (name, header)


def test_change_pages_with_long_values_do_not_scroll_sideways(
    staff_browser, live_server, long_world
):
    pages = [
        (
            reverse("admin:conversations_conversation_change", args=[long_world["thread"].pk]),
            "change-thread-long.png",
        ),
        (
            reverse("admin:conversations_agentrun_change", args=[long_world["run"].pk]),
            "change-run-failed.png",
        ),
        (
            reverse("admin:memory_app_userconfig_change", args=[long_world["config"].pk]),
            "change-userconfig-ledger.png",
        ),
        (
            reverse("admin:conversations_toolcall_change", args=[long_world["call"].pk]),
            "change-toolcall.png",
        ),
    ]
    # A laptop screen: the narrowest width the docs promise.
    staff_browser.set_window_size(1280, WINDOW_HEIGHT)
    for url, screenshot in pages:
        _open(staff_browser, live_server, url, screenshot)
        assert not staff_browser.execute_script(
            "return document.documentElement.scrollWidth > window.innerWidth + 1"
        ), url
        # No table runs past the window, hidden behind its panel's edge (the ledger's last
        # column did, with long run and thread ids).
        overflowing = staff_browser.execute_script(
            "return [...document.querySelectorAll('table.yuxi-table')]"
            ".filter(t => t.getBoundingClientRect().right > window.innerWidth + 1)"
            ".map(t => t.className)"
        )
        assert overflowing == [], (url, overflowing)
        # The content cells of the history panes keep room for a phrase.
        widths = staff_browser.execute_script(
            "return [...document.querySelectorAll('td.yuxi-content')]"
            ".map(td => td.getBoundingClientRect().width)"
        )
        assert all(width >= 200 for width in widths), (url, widths)


def _click(browser, text, screenshot):
    link = browser.find_element(By.PARTIAL_LINK_TEXT, text)
    link.click()
    WebDriverWait(browser, PAGE_WAIT_SECONDS).until(
        expected_conditions.presence_of_element_located((By.ID, "content"))
    )
    ARTIFACTS.mkdir(exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / screenshot))


def test_links_lead_from_a_user_to_config_ledger_run_thread_and_messages(
    staff_browser, live_server, long_world
):
    user, run, event = long_world["user"], long_world["run"], long_world["event"]
    url = reverse("admin:auth_user_change", args=[user.pk])
    _open(staff_browser, live_server, url, "walk-1-user.png")
    _click(staff_browser, "memory and history page", "walk-2a-user-page.png")
    _click(staff_browser, "The memory config row", "walk-2-config.png")
    assert "Why does the agent know this?" in staff_browser.page_source
    ledger = staff_browser.find_element(By.CSS_SELECTOR, ".yuxi-ledger").text
    assert "breaks 1 time" in ledger
    assert ledger.index(f"#{event.pk + 1}") < ledger.index(f"#{event.pk}")  # newest first
    _click(staff_browser, f"#{event.pk}", "walk-3-event.png")
    assert staff_browser.current_url.endswith(
        reverse("admin:memory_app_memoryevent_change", args=[event.pk])
    )
    assert "remember_memory call" in staff_browser.find_element(By.ID, "content").text
    _click(staff_browser, f"run {run.run_id}", "walk-4-run.png")
    content = staff_browser.find_element(By.ID, "content").text
    assert "model error: the model did not answer within 8 steps" in content
    assert "no: run is failed, not running" in content
    _click(staff_browser, LONG_THREAD_ID, "walk-5-thread.png")
    assert staff_browser.find_element(By.CSS_SELECTOR, "h2").text == LONG_THREAD_ID
    _click(staff_browser, "messages of this thread", "walk-6-messages.png")
    rows = staff_browser.find_elements(By.CSS_SELECTOR, "#result_list tbody tr")
    assert len(rows) == 7
    assert "请记住我对花生过敏" in staff_browser.find_element(By.ID, "result_list").text
