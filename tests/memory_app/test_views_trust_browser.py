"""The user's page in headless chromium where trust is won or lost: a session that ended, a token
gone stale, states the page must name (memory off, the demo model, what a tool did), the
user's language, and a layout that holds; in English and in Chinese, axe-core on each state,
screenshots for a person to look at.
"""

from urllib.parse import urlsplit

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from conversations.models import AgentRun, Message, ToolCall
from memory_app.models import UserConfig
from memory_app.selectors import read_memory_file
from memory_app.services import write_memory_file
from tests.browser import BROWSER_TESTS, chromium, log_in
from tests.factories import (
    AgentRunFactory,
    ConversationFactory,
    MessageFactory,
    ToolCallFactory,
    UserConfigFactory,
)
from tests.memory_app.test_views_browser import (
    check_axe,
    click,
    line_texts,
    open_page,
    shot,
    shows,
    text_of,
    wait,
)

pytestmark = BROWSER_TESTS


@pytest.fixture
def browser(tmp_path):
    with chromium(tmp_path / "chromium-profile") as driver:
        yield driver


LANGUAGES = ["en", "zh-hans"]
# What the page says, by language, for the states these tests look for.
SAYS = {
    "en": {
        "ended": "Your session ended",
        "reload": "Reload the page",
        "memory_off": "Memory is off",
        "demo": "demo model",
        "saved": "Saved to memory",
        "updated": "Memory updated",
        "not_in_file": "not in the memory file",
        "saved_setting": "Setting saved",
    },
    "zh-hans": {
        "ended": "你的登录已结束",
        "reload": "请刷新页面",
        "memory_off": "记忆已关闭",
        "demo": "演示模型",
        "saved": "已保存到记忆",
        "updated": "记忆已更新",
        "not_in_file": "要替换的文字不在记忆文件中",
        "saved_setting": "设置已保存",
    },
}


def in_language(driver, language: str) -> None:
    """Switch the page to `language` with its buttons (a no-op for English, the default)."""
    if language == "en":
        return
    click(driver, f'form.lang button[value="{language}"]')
    wait(driver, lambda d: d.find_element(By.TAG_NAME, "html").get_attribute("lang") == language)
    wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#memory-panel .memory-body"))


def no_page_scroll(driver, size: str) -> None:
    """The page never scrolls sideways; at a laptop's width the three columns fill the window
    and each scrolls on its own, the page itself not at all."""
    width, height = driver.execute_script(
        "const e = document.documentElement; return [e.scrollWidth - e.clientWidth,"
        " e.scrollHeight - e.clientHeight];"
    )
    assert width <= 0, f"the page scrolls sideways by {width}px at {size}"
    if size == "1280x800":
        assert height <= 0, f"the page scrolls by {height}px at {size}"


@pytest.mark.parametrize("language", LANGUAGES)
def test_an_ended_session_sends_the_user_to_log_in_and_back_to_the_page(
    browser, live_server, language
):
    user = open_page(browser, live_server.url, "1280x800")
    in_language(browser, language)
    says = SAYS[language]

    browser.delete_cookie("sessionid")  # logged out elsewhere, or expired
    click(browser, '.thread-tab[aria-pressed="false"]')  # a fragment
    wait(browser, lambda d: urlsplit(d.current_url).path == "/accounts/login/")
    assert says["ended"] in text_of(browser, ".notice")
    assert not browser.find_elements(By.CSS_SELECTOR, "#thread-list")
    check_axe(browser, "session ended")
    shot(browser, f"1280x800-{language}-session-ended")
    log_in(
        browser,
        browser.current_url,
        user.username,
        submit='button[type="submit"]',
        landed="#memory-panel .memory-body",
    )
    assert urlsplit(browser.current_url).path == "/"

    browser.delete_cookie("sessionid")
    click(browser, 'input[data-setting="memory_write_approval"]')  # a write
    wait(browser, lambda d: urlsplit(d.current_url).path == "/accounts/login/")
    assert says["ended"] in text_of(browser, ".notice")
    assert not UserConfig.objects.get(user=user).memory_write_approval


def test_the_session_ended_notice_at_a_phones_width(browser, live_server):
    for language in LANGUAGES:
        open_page(browser, live_server.url, "390x844")
        in_language(browser, language)
        browser.delete_cookie("sessionid")
        box = browser.find_element(By.ID, "composer-text")
        box.send_keys("hello", Keys.ENTER)
        wait(browser, lambda d: urlsplit(d.current_url).path == "/accounts/login/")
        assert SAYS[language]["ended"] in text_of(browser, ".notice")
        no_page_scroll(browser, "390x844")
        shot(browser, f"390x844-{language}-session-ended")
        browser.delete_all_cookies()


@pytest.mark.parametrize("language", LANGUAGES)
def test_a_token_gone_stale_by_a_login_elsewhere_is_refreshed_and_the_write_goes_through(
    browser, live_server, language
):
    user = open_page(browser, live_server.url, "1280x800")
    in_language(browser, language)
    first = browser.current_window_handle
    browser.switch_to.new_window("tab")  # a second login rotates the CSRF token
    log_in(
        browser,
        live_server.url + "/accounts/login/",
        user.username,
        submit='button[type="submit"]',
        landed="#memory-panel .memory-body",
    )
    browser.close()
    browser.switch_to.window(first)

    click(browser, 'input[data-setting="memory_write_approval"]')
    wait(browser, shows("#settings-status", SAYS[language]["saved_setting"]))
    assert UserConfig.objects.get(user=user).memory_write_approval

    # The language buttons post a form: a stale token there is refreshed as well.
    browser.switch_to.new_window("tab")
    log_in(
        browser,
        live_server.url + "/accounts/login/",
        user.username,
        submit='button[type="submit"]',
        landed="#memory-panel .memory-body",
    )
    browser.close()
    browser.switch_to.window(first)
    other = "en" if language != "en" else "zh-hans"
    click(browser, f'form.lang button[value="{other}"]')
    wait(browser, lambda d: d.find_element(By.TAG_NAME, "html").get_attribute("lang") == other)
    assert "Forbidden" not in browser.find_element(By.TAG_NAME, "body").text


@pytest.mark.parametrize("language", LANGUAGES)
def test_a_token_that_cannot_be_refreshed_asks_to_reload_in_the_users_language(
    browser, live_server, language
):
    user = open_page(browser, live_server.url, "1280x800")
    in_language(browser, language)
    browser.delete_cookie("csrftoken")
    click(browser, 'input[data-setting="memory_write_approval"]')
    wait(browser, shows("#settings-status", SAYS[language]["reload"]))
    assert "X-CSRFToken" not in text_of(browser, "#settings-status")
    assert not UserConfig.objects.get(user=user).memory_write_approval


def test_back_after_logout_shows_nothing_of_the_users_page(browser, live_server):
    open_page(browser, live_server.url, "1280x800")
    wait(browser, shows("#memory-panel .file", "I drink green tea"))
    click(browser, "form.logout button")
    wait(browser, lambda d: urlsplit(d.current_url).path == "/accounts/logout/")
    browser.back()
    wait(browser, lambda d: d.execute_script("return document.readyState") == "complete")
    assert "I drink green tea" not in browser.find_element(By.TAG_NAME, "body").text


@pytest.mark.parametrize("language", LANGUAGES)
@pytest.mark.parametrize("size", ["390x844", "1280x800"])
def test_memory_off_is_said_in_the_panel_and_the_chat_and_approval_cannot_be_switched(
    browser, live_server, language, size
):
    user = open_page(browser, live_server.url, size)
    UserConfig.objects.filter(user=user).update(enable_memory=False)
    browser.refresh()
    in_language(browser, language)
    says = SAYS[language]
    wait(browser, shows("#memory-panel .memory-off", says["memory_off"]))
    assert says["memory_off"] in text_of(browser, "#chat-memory-off")
    approval = browser.find_element(By.CSS_SELECTOR, 'input[data-setting="memory_write_approval"]')
    assert not approval.is_enabled()
    check_axe(browser, "memory off")
    no_page_scroll(browser, size)
    panel = browser.find_element(By.CSS_SELECTOR, "#memory-panel .memory-off")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", panel)
    shot(browser, f"{size}-{language}-memory-off")

    click(browser, 'input[data-setting="enable_memory"]')
    wait(browser, lambda d: not d.find_elements(By.CSS_SELECTOR, "#memory-panel .memory-off"))
    assert not browser.find_element(By.ID, "chat-memory-off").is_displayed()
    assert approval.is_enabled()


@pytest.mark.parametrize("language", LANGUAGES)
def test_the_demo_model_is_named_and_a_write_is_said_in_words_with_a_link_to_the_line(
    browser, live_server, language
):
    user = open_page(browser, live_server.url, "1280x800")
    in_language(browser, language)
    says = SAYS[language]
    assert says["demo"] in text_of(browser, "#demo-model")
    browser.find_element(By.ID, "composer-text").send_keys(
        "remember that I like jasmine", Keys.ENTER
    )
    wait(browser, shows(".chat .memory-updated", says["updated"]))
    wait(browser, lambda d: "I like jasmine" in line_texts(d))
    reply = text_of(browser, ".message.assistant")
    assert "{" not in reply and "remember_memory" not in reply
    assert says["saved"] in text_of(browser, ".message.assistant .tools")
    check_axe(browser, "memory updated")
    shot(browser, f"1280x800-{language}-memory-updated")
    click(browser, ".memory-updated a")
    target = browser.switch_to.active_element
    assert "I like jasmine" in target.text
    assert "I like jasmine" in read_memory_file(user=user).text


def test_no_demo_model_is_named_when_a_model_is_configured(browser, live_server, wire_model):
    open_page(browser, live_server.url, "1280x800")
    assert not browser.find_element(By.ID, "demo-model").is_displayed()


def test_a_refusal_from_the_api_is_in_chinese_on_the_chinese_page(browser, live_server, wire_model):
    from tests.wire_model import Call, Reply

    arguments = '{"content": "I live in Lisbon", "replaces": "I live in Porto"}'
    wire_model.answer(Reply(calls=(Call("remember_memory", arguments),)))
    user = open_page(browser, live_server.url, "1280x800")
    UserConfig.objects.filter(user=user).update(memory_write_approval=True)
    in_language(browser, "zh-hans")
    browser.find_element(By.ID, "composer-text").send_keys("remember where I live", Keys.ENTER)
    wait(browser, shows(".approval .replaces", "I live in Porto"))
    click(browser, '.approval [data-decision="approve"]')
    wait(browser, shows(".approval .card-error", SAYS["zh-hans"]["not_in_file"]))
    assert "the text" not in text_of(browser, ".approval .card-error")


def approval_waiting(user) -> None:
    """A thread of `user` with a memory write waiting for their decision."""
    thread = ConversationFactory(user=user, title="Where I live")
    MessageFactory(conversation=thread, role=Message.Role.USER, content="remember where I live")
    run = AgentRunFactory(conversation=thread, status=AgentRun.Status.INTERRUPTED)
    pending = MessageFactory(
        conversation=thread,
        role=Message.Role.ASSISTANT,
        message_type=Message.Type.TOOL_CALL,
        metadata={"run_id": str(run.run_id)},
    )
    ToolCallFactory(
        message=pending, status=ToolCall.Status.PENDING, input={"content": "I live in Lisbon"}
    )
    run.finished_at = run.created_at
    run.save(update_fields=["finished_at"])


@pytest.mark.parametrize("language", LANGUAGES)
def test_the_layout_holds_after_compare_with_a_waiting_badge_and_odd_files(
    browser, live_server, language
):
    user = UserConfigFactory().user
    empty = read_memory_file(user=user)
    first = write_memory_file(
        user=user, text="# Memory\n- I drink tea\n", if_match=empty.etag, actor=user
    )
    write_memory_file(
        user=user, text="# Memory\r- I drink tea\r- I walk\r", if_match=first.etag, actor=user
    )
    approval_waiting(user)
    browser.set_window_size(1280, 800)
    log_in(
        browser,
        live_server.url + "/",
        user.username,
        submit='button[type="submit"]',
        landed="#memory-panel .memory-body",
    )
    in_language(browser, language)
    wait(browser, lambda d: line_texts(d) == ["# Memory", "- I drink tea", "- I walk"])
    forget = browser.find_elements(By.CSS_SELECTOR, "#memory-panel .line .forget-line")
    assert len(forget) == 2  # none on the heading
    badge = browser.find_element(By.CSS_SELECTOR, "#thread-list .badge")
    lines = browser.execute_script(
        "const r = arguments[0].getBoundingClientRect();"
        " return r.height / parseFloat(getComputedStyle(arguments[0]).lineHeight);",
        badge,
    )
    assert lines < 1.5, "the approval badge wraps"
    click(browser, ".version:first-child button[hx-get]")
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".version:first-child .diff-row"))
    no_page_scroll(browser, "1280x800")
    check_axe(browser, "compared, odd file")
    browser.set_window_size(390, 844)
    no_page_scroll(browser, "390x844")
