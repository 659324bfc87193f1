"""The user's page in a real headless chromium, as a person uses it: log in, turn approval on,
ask to remember, edit the proposal, approve, see the line in the memory panel, compare and
restore the previous version, reload and find the thread. At a phone's width and a laptop's,
under the development server (WSGI) and once under uvicorn (ASGI); axe-core on every state;
screenshots for a person to look at.
"""

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from axe_selenium_python import Axe
from selenium.common.exceptions import (
    NoSuchElementException,
    StaleElementReferenceException,
    WebDriverException,
)
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

from memory_app.models import UserConfig
from memory_app.selectors import read_memory_file
from memory_app.services import write_memory_file
from tests.browser import ARTIFACTS, BROWSER_TESTS, PAGE_WAIT_SECONDS, chromium, log_in
from tests.factories import UserConfigFactory
from tests.servers import test_database_url, wait_until_healthy
from tests.wire_model import Call, Reply

pytestmark = BROWSER_TESTS

# axe-core 4.10.3 from the npm registry (its licence beside it): axe-selenium-python's own copy
# is 3.1.1, which predates many of today's rules.
AXE_SCRIPT = Path(__file__).resolve().parent.parent / "vendor" / "axe-core" / "axe.min.js"
# Impacts that fail a test; minor and moderate findings are reported, not failed.
AXE_FAILING = {"serious", "critical"}
ASGI_PORT = 8431
SHOTS = Path(os.environ.get("YUXI_SHOTS", ARTIFACTS))


@pytest.fixture
def browser(tmp_path):
    with chromium(tmp_path / "chromium-profile") as driver:
        yield driver


# How chromium reports, instead of a stale element, a node read while its page was replaced.
_NODE_GONE = "does not belong to the document"


def wait(driver, condition, timeout: float = PAGE_WAIT_SECONDS):
    """Until `condition` holds; an element replaced while it was read (a reload, an htmx swap)
    is looked up again on the next poll, however chromium reports it."""

    def polled(d):
        try:
            return condition(d)
        except WebDriverException as exc:
            if isinstance(exc, StaleElementReferenceException) or _NODE_GONE in (exc.msg or ""):
                return False
            raise

    return WebDriverWait(driver, timeout).until(polled)


def text_of(driver, selector: str) -> str:
    """The text of the first match ("" if none, or if htmx replaced it while it was read)."""
    try:
        found = driver.find_elements(By.CSS_SELECTOR, selector)
        return found[0].text if found else ""
    except StaleElementReferenceException:
        return ""


def line_texts(driver) -> list[str]:
    """The lines of MEMORY.md as the memory panel lists them."""
    try:
        return [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#memory-panel .line-text")]
    except StaleElementReferenceException:
        return []


def shows(selector: str, text: str):
    """A wait condition: the first element `selector` matches holds `text`."""
    return lambda driver: text in text_of(driver, selector)


def check_axe(driver, state: str) -> None:
    """No serious or critical axe-core violation in this state of the page."""
    axe = Axe(driver, script_url=str(AXE_SCRIPT))
    axe.inject()
    results = axe.run()
    failing = [v for v in results["violations"] if v["impact"] in AXE_FAILING]
    assert failing == [], f"{state}: " + axe.report(failing)


def shot(driver, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(SHOTS / f"page-{name}.png"))


def click(driver, selector: str) -> None:
    """Click the match once it is clickable, again if htmx swapped it in between."""

    def clicked(driver) -> bool:
        try:
            element = driver.find_element(By.CSS_SELECTOR, selector)
            if not (element.is_displayed() and element.is_enabled()):
                return False
            driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", element)
            element.click()
            return True
        except (NoSuchElementException, StaleElementReferenceException):
            return False

    wait(driver, clicked)


def user_with_memory():
    """A user with memory on whose MEMORY.md already holds a line (written as their own edit, so
    the agent's write keeps it as a version)."""
    user = UserConfigFactory().user
    empty = read_memory_file(user=user)
    write_memory_file(user=user, text="I drink green tea\n", if_match=empty.etag, actor=user)
    return user


def open_page(driver, base_url: str, size: str):
    """A new `user_with_memory`, logged in through the login form in a window of `size`
    ("390x844"), on their page with its memory panel loaded; returns the user."""
    user = user_with_memory()
    width, height = map(int, size.split("x"))
    driver.set_window_size(width, height)
    log_in(
        driver,
        base_url + "/",
        user.username,
        submit='button[type="submit"]',
        landed="#memory-panel .memory-body",
    )
    return user


def remember_edit_approve_restore(driver, base_url: str, size: str) -> None:
    user = open_page(driver, base_url, size)
    assert urlsplit(driver.current_url).path == "/"
    wait(driver, shows("#memory-panel .file", "I drink green tea"))
    check_axe(driver, "logged in")
    shot(driver, f"{size}-start")

    click(driver, 'input[data-setting="memory_write_approval"]')
    wait(driver, shows("#settings-status", "saved"))
    assert UserConfig.objects.get(user=user).memory_write_approval

    box = driver.find_element(By.ID, "composer-text")
    box.send_keys("remember that I live in Lisbn", Keys.ENTER)
    wait(driver, shows(".approval .proposed", "I live in Lisbn"))
    assert text_of(driver, ".message.user .text") == "remember that I live in Lisbn"
    check_axe(driver, "approval card")
    shot(driver, f"{size}-approval")

    click(driver, '.approval [data-approval="edit"]')
    proposal = driver.find_element(By.ID, "approval-text")
    assert driver.switch_to.active_element == proposal
    proposal.clear()
    proposal.send_keys("I live in Lisbon")
    check_axe(driver, "editing the proposal")
    click(driver, '.approval [data-decision="edit"]')
    wait(driver, shows("#memory-panel .file", "I live in Lisbon"))
    assert not driver.find_elements(By.CSS_SELECTOR, ".approval")
    assert "Saved to memory" in text_of(driver, ".message.assistant .tools")
    assert line_texts(driver) == ["I drink green tea", "I live in Lisbon"]
    origin = driver.find_elements(By.CSS_SELECTOR, "#memory-panel .line .origin")[1].text
    assert origin.startswith("the assistant") and "in this conversation" in origin
    assert "I live in Lisbon" in read_memory_file(user=user).text
    check_axe(driver, "approved")
    shot(driver, f"{size}-approved")

    # The newest kept version is the file before the agent's write.
    click(driver, ".version:first-child button[hx-get]")
    wait(driver, shows(".version:first-child .diff-new", "I live in Lisbon"))
    check_axe(driver, "compared")
    shot(driver, f"{size}-compared")
    click(driver, '.version:first-child [data-memory="restore"]')
    wait(driver, lambda d: line_texts(d) == ["I drink green tea"])
    assert read_memory_file(user=user).text == "I drink green tea\n"
    check_axe(driver, "restored")

    driver.refresh()
    click(driver, "#thread-list .open-thread")
    wait(driver, shows(".message.user .text", "remember that I live in Lisbn"))
    replies = [e.text for e in driver.find_elements(By.CSS_SELECTOR, ".message.assistant")]
    assert len(replies) == 1 and "Saved to memory" in replies[0]
    check_axe(driver, "thread reopened")
    shot(driver, f"{size}-reopened")

    click(driver, 'form.lang button[value="zh-hans"]')
    wait(driver, lambda d: d.find_element(By.TAG_NAME, "html").get_attribute("lang") == "zh-hans")
    assert text_of(driver, "#new-thread") == "新对话"
    click(driver, "#thread-list .open-thread")
    wait(driver, shows(".message.assistant .tools", "已保存到记忆"))
    check_axe(driver, "in Chinese")
    shot(driver, f"{size}-zh")
    logged = [entry["message"] for entry in driver.get_log("browser")]
    assert [message for message in logged if "Content Security" in message] == []


@pytest.mark.parametrize("size", ["390x844", "1280x800"])
def test_remember_edit_approve_then_restore_under_the_development_server(
    browser, live_server, size
):
    remember_edit_approve_restore(browser, live_server.url, size)


@pytest.fixture
def asgi_server(transactional_db, settings):
    """uvicorn serving yuxi_site.asgi on the test database and workspace root."""
    # The server checks passwords with the site's own hasher, not the tests' cheap one.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.PBKDF2PasswordHasher"]
    env = {
        **os.environ,
        "DATABASE_URL": test_database_url(),
        "WORKSPACE_ROOT": str(settings.WORKSPACE_ROOT),
        "DEBUG": "1",  # static files from the apps (no collectstatic in a test)
        "STATIC_ROOT": str(settings.STATIC_ROOT),  # the tests' own, empty
        "LLM_BASE_URL": "",
    }
    ARTIFACTS.mkdir(exist_ok=True)
    log = (ARTIFACTS / "uvicorn.log").open("wb")  # kept for a person to read
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "yuxi_site.asgi:application", "--port", str(ASGI_PORT)],
        cwd=settings.BASE_DIR,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{ASGI_PORT}"
    try:
        wait_until_healthy(base, server, why=lambda: f"see {ARTIFACTS / 'uvicorn.log'}")
        yield base
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


def test_the_same_flow_under_the_asgi_server(browser, asgi_server):
    remember_edit_approve_restore(browser, asgi_server, "1280x800")


def test_an_edit_over_a_changed_file_explains_the_412_and_saving_again_replaces_it(
    browser, live_server
):
    user = open_page(browser, live_server.url, "1280x800")
    click(browser, '[data-memory="edit"]')
    box = browser.find_element(By.ID, "memory-text")
    assert browser.switch_to.active_element == box
    box.send_keys("I prefer window seats\n")
    # Meanwhile the file changes (the assistant, another window).
    current = read_memory_file(user=user)
    write_memory_file(user=user, text="I drink black tea\n", if_match=current.etag, actor=user)
    click(browser, ".memory-edit button[type=submit]")
    wait(browser, shows(".memory-edit .conflict", "Not saved: your memory changed"))
    assert text_of(browser, ".memory-edit .current") == "I drink black tea"
    assert read_memory_file(user=user).text == "I drink black tea\n"
    check_axe(browser, "412 explained")
    shot(browser, "1280x800-conflict")
    click(browser, ".memory-edit button[type=submit]")
    wait(browser, shows("#memory-panel .file", "I prefer window seats"))
    assert read_memory_file(user=user).text == "I prefer window seats\nI drink green tea\n"
    assert browser.switch_to.active_element.get_attribute("id") == "memory-title"
    click(browser, '#memory-panel [data-memory="forget-line"][data-number="1"]')
    wait(browser, lambda d: line_texts(d) == ["I drink green tea"])
    assert read_memory_file(user=user).text == "I drink green tea\n"


def test_stop_aborts_the_streamed_reply_and_keeps_the_message(browser, live_server, wire_model):
    wire_model.answer(Reply(text="too late", first_token_after=60))  # has not answered yet
    open_page(browser, live_server.url, "390x844")
    browser.find_element(By.ID, "composer-text").send_keys("tell me a long story", Keys.ENTER)
    wait(browser, lambda d: d.find_element(By.ID, "stop").is_displayed())
    assert browser.find_element(By.ID, "send").get_attribute("disabled") == "true"
    wait(browser, lambda d: d.find_elements(By.ID, "live-reply"))
    assert browser.find_element(By.ID, "live-reply").get_attribute("aria-live") == "polite"
    click(browser, "#stop")
    wait(browser, shows("#chat-status", "Stopped"))
    assert not browser.find_element(By.ID, "stop").is_displayed()
    assert browser.find_element(By.ID, "send").is_enabled()
    assert text_of(browser, ".message.user .text") == "tell me a long story"
    shot(browser, "390x844-stopped")


def test_a_proposal_replacing_a_line_not_in_the_file_is_saved_as_a_new_line(
    browser, live_server, wire_model
):
    # A real model may name a line to replace that the file does not hold: approved as it is,
    # the write is refused and still waits; edited, the user empties the line it replaces.
    arguments = '{"content": "I live in Lisbon", "replaces": "I live in Porto"}'
    wire_model.answer(Reply(calls=(Call("remember_memory", arguments),)))
    user = open_page(browser, live_server.url, "390x844")
    UserConfig.objects.filter(user=user).update(memory_write_approval=True)
    browser.find_element(By.ID, "composer-text").send_keys("remember where I live", Keys.ENTER)
    wait(browser, shows(".approval .replaces", "I live in Porto"))
    click(browser, '.approval [data-decision="approve"]')
    wait(browser, shows(".approval .card-error", "not in the memory file"))
    assert read_memory_file(user=user).text == "I drink green tea\n"

    click(browser, '.approval [data-approval="edit"]')
    replaces = browser.find_element(By.ID, "approval-replaces")
    assert replaces.get_attribute("value") == "I live in Porto"
    replaces.clear()
    check_axe(browser, "editing the line a proposal replaces")
    shot(browser, "390x844-approval-replaces")
    click(browser, '.approval [data-decision="edit"]')
    wait(browser, lambda d: line_texts(d) == ["I drink green tea", "I live in Lisbon"])
    assert not browser.find_elements(By.CSS_SELECTOR, ".approval")
    assert read_memory_file(user=user).text == "I drink green tea\nI live in Lisbon\n"
