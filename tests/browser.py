"""Debian's headless chromium for the browser tests: what a person actually sees.

Nothing is downloaded: chromium drives through its own chromedriver. The tests save
screenshots to `test-artifacts/` (git-ignored) for a person to look at.
"""

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.conf import settings
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

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
PAGE_WAIT_SECONDS = 30

# The marks of every browser test module.
BROWSER_TESTS = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    # Skipped on a developer machine without chromium; never in CI, which installs it.
    pytest.mark.skipif(
        not CHROMIUM.exists() and not os.environ.get("CI"),
        reason="/usr/bin/chromium is absent: apt-get install chromium chromium-driver "
        "(.ci/run installs them)",
    ),
]


@contextmanager
def chromium(profile: Path) -> Iterator[webdriver.Chrome]:
    """A headless chromium with its own profile directory, quit on the way out."""
    options = Options()
    options.binary_location = str(CHROMIUM)
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(PAGE_WAIT_SECONDS)
    try:
        yield driver
    finally:
        driver.quit()


def log_in(driver: webdriver.Chrome, url: str, username: str, *, submit: str, landed: str) -> None:
    """Log in through the login form at `url` (password "pw", the factories'), then wait for the
    element `landed` (a CSS selector) of the page it leads to."""
    driver.get(url)
    driver.find_element(By.NAME, "username").send_keys(username)
    driver.find_element(By.NAME, "password").send_keys("pw")
    driver.find_element(By.CSS_SELECTOR, submit).click()
    WebDriverWait(driver, PAGE_WAIT_SECONDS).until(
        expected_conditions.presence_of_element_located((By.CSS_SELECTOR, landed))
    )
