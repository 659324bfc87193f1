"""A conversation reopened later, in headless chromium, in English and Chinese: the reply whose
turn wrote to memory says "Memory updated" and its link moves the focus to the line it wrote;
a write whose line was removed since says so without a link; every date names its time zone
and stays on one line at a phone's width. axe-core on each state, screenshots at 390 and
1280 px."""

import pytest
from selenium.webdriver.common.by import By

from memory_app.runtime import chat
from memory_app.selectors import memory_lines, read_memory_file
from memory_app.services import delete_memory_line
from tests.browser import BROWSER_TESTS, chromium
from tests.memory_app.test_views_browser import click, open_page, shows, text_of, wait
from tests.memory_app.test_views_capabilities_browser import at_both_widths
from tests.memory_app.test_views_trust_browser import (
    LANGUAGES,
    SAYS,
    approval_waiting,
    in_language,
)

pytestmark = BROWSER_TESTS

GONE = {"en": "no longer in your memory", "zh-hans": "已不在你的记忆中"}
# Every date the page shows, wherever it stands: messages, threads, line origins, versions,
# approvals.
DATES = "#app time"


@pytest.fixture
def browser(tmp_path):
    with chromium(tmp_path / "chromium-profile") as driver:
        yield driver


def written_then_removed(user):
    """A thread whose write's line was removed since, then one whose line is still there (with
    a later turn that wrote nothing): real turns of the scripted model."""
    gone = chat(user_id=user.pk, message="remember that I swim on Sundays")
    [number] = [
        line.number
        for line in memory_lines(user=user).lines
        if line.origin.get("run_id") == gone.run_id
    ]
    etag = read_memory_file(user=user).etag
    delete_memory_line(user=user, number=number, if_match=etag, actor=user)
    kept = chat(user_id=user.pk, message="remember that I like jasmine")
    chat(user_id=user.pk, thread_id=kept.thread_id, message="thank you")
    return kept, gone


def open_thread(driver, thread_id: str) -> None:
    click(driver, f'#thread-list .open-thread[data-thread-id="{thread_id}"]')
    wait(
        driver,
        lambda d: d.find_elements(By.CSS_SELECTOR, f'.thread-view[data-thread-id="{thread_id}"]'),
    )


def dates_name_their_zone_on_one_line(driver, size: str) -> None:
    """Each date shown ends with its zone ("UTC", the site's), is one line box and is not cut
    off: it ends within the content of the button, paragraph or item it stands in."""
    found = driver.execute_script(
        "const right = (e) => { const s = getComputedStyle(e);"
        " return e.getBoundingClientRect().right - parseFloat(s.paddingRight)"
        " - parseFloat(s.borderRightWidth); };"
        "return [...document.querySelectorAll(arguments[0])]"
        ".filter((t) => t.getClientRects().length)"
        ".map((t) => [t.textContent, t.getClientRects().length,"
        " right(t) - right(t.closest('button, p, li')), t.closest('button, p, li').className]);",
        DATES,
    )
    assert len(found) >= 5
    for text, boxes, beyond, where in found:
        assert text.endswith(" UTC"), text
        assert boxes == 1, f"{text!r} wraps at {size}"
        assert beyond <= 0.5, f"{text!r} is cut off by {beyond:.0f}px at {size} in {where}"


@pytest.mark.parametrize("language", LANGUAGES)
def test_a_reopened_thread_says_memory_updated_and_its_link_focuses_the_line(
    browser, live_server, language
):
    user = open_page(browser, live_server.url, "1280x800")
    kept, gone = written_then_removed(user)
    approval_waiting(user)
    browser.refresh()
    in_language(browser, language)
    says = SAYS[language]
    open_thread(browser, kept.thread_id)
    wait(browser, shows(".chat .memory-updated", says["updated"]))
    replies = browser.find_elements(By.CSS_SELECTOR, ".chat .message.assistant")
    assert [bool(r.find_elements(By.CSS_SELECTOR, ".memory-updated")) for r in replies] == [
        True,
        False,
    ]
    assert says["saved"] in replies[0].text
    dates_name_their_zone_on_one_line(browser, "1280x800")
    at_both_widths(browser, "reopened-memory-updated", language, ".chat .memory-updated")
    browser.set_window_size(390, 844)
    dates_name_their_zone_on_one_line(browser, "390x844")
    click(browser, ".memory-updated a")
    focused = browser.switch_to.active_element
    assert focused.get_attribute("data-run-id") == kept.run_id
    assert "I like jasmine" in focused.text
    browser.set_window_size(1280, 800)

    open_thread(browser, gone.thread_id)
    wait(browser, shows(".chat .memory-updated", GONE[language]))
    assert says["updated"] in text_of(browser, ".chat .memory-updated")
    assert not browser.find_elements(By.CSS_SELECTOR, ".chat .memory-updated a")
    at_both_widths(browser, "reopened-line-gone", language, ".chat .memory-updated")
