"""`GET /api/export/` served by a real ASGI server (gunicorn with a uvicorn worker, as in
production) streams the document from an async iterator: Django would otherwise read a
synchronous one whole into memory first (and say so in the log), undoing the export's bounded
memory. The WSGI path keeps its synchronous iterator."""

import json
import os
import secrets
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client

from tests.factories import MessageFactory, UserConfigFactory
from tests.pgbouncer import TEST_PORT
from tests.servers import test_database_url, wait_until_healthy

# The server's own process must see what the test wrote.
pytestmark = pytest.mark.django_db(transaction=True)

ASGI_PORT = TEST_PORT + 3
# Django's warning when it holds a synchronous iterator whole to serve it over ASGI.
WHOLE_IN_MEMORY = "must consume synchronous iterators"


def _export_over_asgi(session_key: str, log: Path) -> bytes:
    env = {
        **os.environ,
        "DATABASE_URL": test_database_url(),
        "WORKSPACE_ROOT": str(settings.WORKSPACE_ROOT),
        "SECRET_KEY": settings.SECRET_KEY,
        "DEBUG": "False",
        "HOST": "127.0.0.1",
        "PORT": str(ASGI_PORT),
        "WEB_CONCURRENCY": "1",
        "LOG_LEVEL": "WARNING",
    }
    with open(log, "wb") as output:
        server = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py", "yuxi_site.asgi"],
            cwd=settings.BASE_DIR,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{ASGI_PORT}"
    try:
        wait_until_healthy(base, server, why=log.read_text)
        request = urllib.request.Request(
            f"{base}/api/export/", headers={"Cookie": f"sessionid={session_key}"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.headers["Transfer-Encoding"] == "chunked"
            return response.read()
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


def test_the_export_streams_from_an_async_iterator_under_a_real_asgi_server(tmp_path):
    message = MessageFactory(content="I drink oolong tea " + secrets.token_hex(8))
    user = message.conversation.user
    UserConfigFactory(user=user, enable_memory=True)
    client = Client()
    client.force_login(user)
    log = tmp_path / "gunicorn.log"
    document = json.loads(_export_over_asgi(client.cookies["sessionid"].value, log))
    assert document["threads"][0]["messages"][0]["content"] == message.content
    assert WHOLE_IN_MEMORY not in log.read_text()


def test_the_export_stays_a_synchronous_iterator_under_wsgi():
    user = UserConfigFactory(enable_memory=True).user
    client = Client()
    client.force_login(user)
    response = client.get("/api/export/")
    assert response.status_code == 200 and not response.is_async
    assert json.loads(b"".join(response.streaming_content))["user"]["id"] == user.pk
