"""What users of other memory products expect, in headless chromium on the user's page: search
their memory and conversations, edit one line in place, Undo after Forget or Clear, rename and
delete a conversation, every pending approval in one place, replies rendered as Markdown; in
English and Chinese, axe-core on each new state, screenshots at a phone's and a laptop's width.
"""

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support import expected_conditions

from conversations.models import Conversation, Message
from memory_app.selectors import read_memory_file
from memory_app.services import write_memory_file
from tests.browser import BROWSER_TESTS, chromium
from tests.factories import ConversationFactory, MessageFactory
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
from tests.memory_app.test_views_trust_browser import (
    LANGUAGES,
    approval_waiting,
    in_language,
    no_page_scroll,
)
from tests.wire_model import Reply

pytestmark = BROWSER_TESTS

SIZES = ("390x844", "1280x800")


@pytest.fixture
def browser(tmp_path):
    with chromium(tmp_path / "chromium-profile") as driver:
        yield driver


def at_both_widths(driver, state: str, language: str, showing: str) -> None:
    """axe-core on this state, then a screenshot at each width (the layout holding there) with
    the element `showing` (a CSS selector) scrolled into view."""
    check_axe(driver, f"{state} ({language})")
    for size in SIZES:
        driver.set_window_size(*map(int, size.split("x")))
        no_page_scroll(driver, size)
        element = driver.find_element(By.CSS_SELECTOR, showing)
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", element)
        shot(driver, f"{size}-{language}-{state}")
    driver.set_window_size(1280, 800)


def confirm(driver) -> None:
    """Accept the browser's own confirmation dialog."""
    wait(driver, expected_conditions.alert_is_present()).accept()


@pytest.mark.parametrize("language", LANGUAGES)
def test_search_filters_the_memory_lines_and_finds_conversations_by_rank(
    browser, live_server, language
):
    user = open_page(browser, live_server.url, "1280x800")
    current = read_memory_file(user=user)
    text = "I drink green tea\nMy sister's wedding is on 14 June\nI walk to work\n"
    write_memory_file(user=user, text=text, if_match=current.etag, actor=user)
    wedding = ConversationFactory(user=user, title="Family plans")
    MessageFactory(conversation=wedding, content="my sister gets married in June, the wedding")
    other = ConversationFactory(user=user, title="Groceries")
    MessageFactory(conversation=other, content="buy tea and bread")
    browser.refresh()
    in_language(browser, language)

    box = browser.find_element(By.ID, "search-text")
    box.send_keys("wedding")
    wait(
        browser,
        lambda d: (
            [e.text for e in d.find_elements(By.CSS_SELECTOR, ".line-text") if e.is_displayed()]
            == ["My sister's wedding is on 14 June"]
        ),
    )
    box.send_keys(Keys.ENTER)
    wait(browser, shows("#search-results .hit", "Family plans"))
    hits = browser.find_elements(By.CSS_SELECTOR, "#search-results .hit")
    assert len(hits) == 1 and "wedding" in hits[0].find_element(By.TAG_NAME, "mark").text
    assert browser.switch_to.active_element.get_attribute("id") == "search-title"
    at_both_widths(browser, "search", language, "#search-results")
    click(browser, "#search-results .open-hit")
    wait(browser, shows(".thread-title", "Family plans"))
    box = browser.find_element(By.ID, "search-text")
    box.clear()
    box.send_keys(" ", Keys.BACKSPACE)
    wait(
        browser,
        lambda d: (
            len([e for e in d.find_elements(By.CSS_SELECTOR, ".line-text") if e.is_displayed()])
            == 3
        ),
    )


@pytest.mark.parametrize("language", LANGUAGES)
def test_a_line_is_edited_in_place_and_forget_and_clear_can_be_undone(
    browser, live_server, language
):
    user = open_page(browser, live_server.url, "1280x800")
    current = read_memory_file(user=user)
    write_memory_file(
        user=user, text="- I live in Porto\n- I drink tea\n", if_match=current.etag, actor=user
    )
    browser.refresh()
    in_language(browser, language)
    wait(browser, lambda d: line_texts(d) == ["- I live in Porto", "- I drink tea"])

    click(browser, '#memory-panel [data-memory="edit-line"][data-number="1"]')
    field = browser.find_element(By.CSS_SELECTOR, ".line-edit input")
    assert browser.switch_to.active_element == field
    assert field.get_attribute("value") == "- I live in Porto"
    field.clear()
    field.send_keys("- I live in Lisbon")
    check_axe(browser, f"editing a line ({language})")
    field.send_keys(Keys.ENTER)
    wait(browser, lambda d: line_texts(d) == ["- I live in Lisbon", "- I drink tea"])
    assert read_memory_file(user=user).text == "- I live in Lisbon\n- I drink tea\n"
    at_both_widths(browser, "line-edited", language, "#memory-panel .lines")

    click(browser, '#memory-panel [data-memory="forget-line"][data-number="2"]')
    wait(browser, lambda d: line_texts(d) == ["- I live in Lisbon"])
    assert browser.find_element(By.CSS_SELECTOR, '.memory-status [data-memory="undo"]')
    at_both_widths(browser, "undo-offered", language, "#memory-panel .memory-status")
    click(browser, '.memory-status [data-memory="undo"]')
    wait(browser, lambda d: line_texts(d) == ["- I live in Lisbon", "- I drink tea"])
    assert read_memory_file(user=user).text == "- I live in Lisbon\n- I drink tea\n"

    click(browser, '#memory-panel [data-memory="clear"]')
    confirm(browser)
    wait(browser, lambda d: line_texts(d) == [])
    assert read_memory_file(user=user).text == ""
    click(browser, '.memory-status [data-memory="undo"]')
    wait(browser, lambda d: line_texts(d) == ["- I live in Lisbon", "- I drink tea"])
    at_both_widths(browser, "undone", language, "#memory-panel .memory-status")


def test_an_edit_of_a_line_over_a_changed_file_is_refused_and_the_panel_shows_it(
    browser, live_server
):
    user = open_page(browser, live_server.url, "1280x800")
    click(browser, '#memory-panel [data-memory="edit-line"][data-number="1"]')
    field = browser.find_element(By.CSS_SELECTOR, ".line-edit input")
    current = read_memory_file(user=user)
    write_memory_file(user=user, text="I drink black tea\n", if_match=current.etag, actor=user)
    field.clear()
    field.send_keys("I drink oolong", Keys.ENTER)
    wait(browser, shows("#memory-panel .memory-status", "changed meanwhile"))
    assert line_texts(browser) == ["I drink black tea"]
    assert read_memory_file(user=user).text == "I drink black tea\n"


@pytest.mark.parametrize("language", LANGUAGES)
def test_a_conversation_is_renamed_and_deleted_after_a_confirmation(browser, live_server, language):
    user = open_page(browser, live_server.url, "1280x800")
    thread = ConversationFactory(user=user, title="Untitled chat")
    MessageFactory(conversation=thread, content="hello")
    browser.refresh()
    in_language(browser, language)
    click(browser, "#thread-list .open-thread")
    wait(browser, shows(".thread-title", "Untitled chat"))
    click(browser, '[data-thread-action="rename"]')
    field = browser.find_element(By.ID, "rename-text")
    assert browser.switch_to.active_element == field
    field.clear()
    field.send_keys("Trip to Lisbon", Keys.ENTER)
    wait(browser, shows(".thread-title", "Trip to Lisbon"))
    wait(browser, shows("#thread-list .open-thread .title", "Trip to Lisbon"))
    thread.refresh_from_db()
    assert thread.title == "Trip to Lisbon"
    check_axe(browser, f"renamed ({language})")

    click(browser, '[data-thread-action="delete"]')
    wait(browser, expected_conditions.alert_is_present()).dismiss()  # asks first; No keeps it
    thread.refresh_from_db()
    assert thread.status == Conversation.Status.ACTIVE
    click(browser, '[data-thread-action="delete"]')
    confirm(browser)
    wait(browser, lambda d: not d.find_elements(By.CSS_SELECTOR, "#thread-list .open-thread"))
    thread.refresh_from_db()
    assert thread.status == Conversation.Status.DELETED
    assert not browser.find_elements(By.CSS_SELECTOR, ".thread-view")


@pytest.mark.parametrize("language", LANGUAGES)
def test_the_pending_approvals_of_every_thread_are_listed_in_one_place(
    browser, live_server, language
):
    user = open_page(browser, live_server.url, "1280x800")
    approval_waiting(user)
    approval_waiting(user)
    browser.refresh()
    in_language(browser, language)
    wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#approvals .approval-item")) == 2)
    assert "I live in Lisbon" in text_of(browser, "#approvals .approval-item")
    at_both_widths(browser, "approvals", language, "#approvals")
    click(browser, "#approvals [data-open-thread]")
    wait(browser, shows(".approval .proposed", "I live in Lisbon"))


@pytest.mark.parametrize("language", LANGUAGES)
def test_a_reply_is_rendered_as_markdown_and_sanitised(browser, live_server, wire_model, language):
    reply = (
        "Here is **what I know**:\n\n- tea, *green*\n- [docs](https://example.com/a)\n"
        "- [bad](javascript:alert(1))\n\n`code` <script>alert(2)</script>"
        ' <img src=x onerror="alert(3)">\n\n| a | b |\n|---|---|\n| 1 | 2 |\n'
    )
    wire_model.answer(Reply(text=reply))
    open_page(browser, live_server.url, "1280x800")
    in_language(browser, language)
    browser.find_element(By.ID, "composer-text").send_keys("what do you know?", Keys.ENTER)
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".message.assistant .md strong"))
    answer = browser.find_element(By.CSS_SELECTOR, ".message.assistant .md")
    assert answer.find_element(By.TAG_NAME, "strong").text == "what I know"
    assert len(answer.find_elements(By.CSS_SELECTOR, "ul > li")) == 3
    links = answer.find_elements(By.TAG_NAME, "a")
    assert [link.get_attribute("href") for link in links] == ["https://example.com/a"]
    assert "noopener" in links[0].get_attribute("rel")
    assert not answer.find_elements(By.CSS_SELECTOR, "script, img, [onerror]")
    assert "<script>alert(2)</script>" in answer.text  # raw HTML shown as text
    assert answer.find_elements(By.CSS_SELECTOR, "table td")
    stored = Message.objects.filter(role=Message.Role.ASSISTANT).get()
    assert stored.content == reply  # stored as the model wrote it
    at_both_widths(browser, "markdown", language, ".message.assistant .md")
    logged = [entry["message"] for entry in browser.get_log("browser")]
    assert [message for message in logged if "Content Security" in message] == []
