"""/api/docs in a real headless chromium, as a logged-in user sees it: Swagger UI drawn from our
own static files under the Content-Security-Policy, no request to another origin."""

from urllib.parse import urlsplit

from django.urls import reverse
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from tests.browser import ARTIFACTS, BROWSER_TESTS, PAGE_WAIT_SECONDS, log_in
from tests.factories import UserFactory

pytestmark = BROWSER_TESTS

DOCS_WIDTH = 1280


def test_the_api_docs_render_from_our_own_assets(browser, live_server):
    user = UserFactory()
    browser.set_window_size(DOCS_WIDTH, 2000)
    # The login lands on the user's page; Swagger UI draws one block per operation.
    url = live_server.url + reverse("login")
    log_in(browser, url, user.username, submit='button[type="submit"]', landed="#memory-panel")
    browser.get(live_server.url + "/api/docs")
    WebDriverWait(browser, PAGE_WAIT_SECONDS).until(
        expected_conditions.presence_of_element_located((By.CSS_SELECTOR, ".opblock"))
    )
    ARTIFACTS.mkdir(exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / f"api-docs-{DOCS_WIDTH}.png"))
    assert "Yuxi Memory API" in browser.find_element(By.CSS_SELECTOR, ".info .title").text
    paths = {e.text for e in browser.find_elements(By.CSS_SELECTOR, ".opblock-summary-path")}
    assert {"/api/chat/", "/api/memory/", "/api/threads/"} <= paths
    origin = urlsplit(live_server.url).netloc
    loaded = browser.execute_script(
        "return performance.getEntriesByType('resource').map(entry => entry.name)"
    )
    assert loaded and all(urlsplit(url).netloc == origin for url in loaded), loaded
    refused = [
        entry["message"]
        for entry in browser.get_log("browser")
        if "Content Security Policy" in entry["message"]
    ]
    assert refused == []
