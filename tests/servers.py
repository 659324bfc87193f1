"""What the tests that start real processes share: the test database as a `DATABASE_URL` for
the child's environment, and the wait until a server they started answers `/healthz`."""

import subprocess
import time
import urllib.request
from collections.abc import Callable
from urllib.parse import quote

from django.db import connection

# How long a server the tests start may take to answer `/healthz` (seconds).
STARTUP_SECONDS = 60


def test_database_url() -> str:
    """The database this test runs on (pytest-django's), as a child process's `DATABASE_URL`."""
    db = connection.settings_dict
    credentials = quote(db["USER"] or "postgres", safe="")
    if db["PASSWORD"]:
        credentials += ":" + quote(db["PASSWORD"], safe="")
    host, port = db["HOST"] or "127.0.0.1", db["PORT"] or 5432
    return f"postgres://{credentials}@{host}:{port}/{db['NAME']}"


test_database_url.__test__ = False  # a helper, not a test, wherever it is imported


def wait_until_healthy(
    base: str, process: subprocess.Popen, *, why: Callable[[], str] = lambda: ""
) -> None:
    """Return once `base` answers `/healthz`; raise if `process` exits first or
    `STARTUP_SECONDS` pass (`why()`: what to show then, such as the server's log)."""
    deadline = time.monotonic() + STARTUP_SECONDS
    while True:
        try:
            urllib.request.urlopen(f"{base}/healthz", timeout=5).close()
            return
        except OSError:  # refused, reset, or timed out while the worker boots
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"no server answered at {base}: {why()}") from None
            time.sleep(0.2)
