import pytest

from tests.browser import chromium


@pytest.fixture
def browser(tmp_path):
    """Debian's chromium through its own chromedriver, so Selenium Manager fetches nothing."""
    with chromium(tmp_path / "chromium-profile") as driver:
        yield driver
