"""Staff previews in a real headless chromium: what a person actually sees, with screenshots."""

import os
from pathlib import Path

import pytest
from django.conf import settings
from django.urls import reverse
from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from conversations.models import Conversation, Message
from tests.factories import (
    ConversationFactory,
    MessageFactory,
    StaffUserFactory,
    UserConfigFactory,
)

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,2000",
)
ARTIFACTS = Path(settings.BASE_DIR) / "test-artifacts"
MARKER = "<script>window.yuxiInjected = true</script>"
PAGE_WAIT_SECONDS = 30

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    # Skipped on a developer machine without chromium; never in CI, which installs it.
    pytest.mark.skipif(
        not CHROMIUM.exists() and not os.environ.get("CI"),
        reason="/usr/bin/chromium is absent: apt-get install chromium chromium-driver "
        "(.ci/run installs them)",
    ),
]


@pytest.fixture
def browser(tmp_path):
    """Debian's chromium through its own chromedriver, so Selenium Manager fetches nothing."""
    options = Options()
    options.binary_location = str(CHROMIUM)
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path / 'chromium-profile'}")
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(PAGE_WAIT_SECONDS)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def staff_browser(browser, live_server):
    """The browser, logged in to the admin through its login form."""
    staff = StaffUserFactory()
    browser.get(live_server.url + reverse("admin:login"))
    browser.find_element(By.NAME, "username").send_keys(staff.username)
    browser.find_element(By.NAME, "password").send_keys("pw")
    browser.find_element(By.CSS_SELECTOR, 'input[type="submit"]').click()
    WebDriverWait(browser, PAGE_WAIT_SECONDS).until(
        expected_conditions.presence_of_element_located((By.ID, "user-tools"))
    )
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
    assert summary.startswith("2 messages;")
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
