"""No third-party script on our origin: /api/docs is built from django-ninja's own Swagger
assets in our static files, and every HTML page carries a Content-Security-Policy that allows
scripts from our origin only and no framing."""

import io
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from email.message import Message
from html.parser import HTMLParser
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command
from django.test import Client

from tests.factories import StaffUserFactory
from tests.servers import test_database_url, wait_until_healthy

pytestmark = pytest.mark.django_db

SWAGGER_ASSETS = ("ninja/swagger-ui-bundle.js", "ninja/swagger-ui-init.js", "ninja/swagger-ui.css")


class _Links(HTMLParser):
    """Every URL a page makes the browser load or follow (src, href, action, srcset...)."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.inline_scripts: list[str] = []
        self._in_script = False
        self._script_type = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        for name in ("src", "href", "action", "srcset", "data", "poster"):
            if values.get(name):
                self.urls.append(values[name])
        if tag == "script":
            self._in_script = "src" not in values
            self._script_type = values.get("type") or ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script and data.strip() and self._script_type != "application/json":
            self.inline_scripts.append(data)


def _parsed(html: str) -> _Links:
    parser = _Links()
    parser.feed(html)
    return parser


def _directives(response) -> dict[str, list[str]]:
    policy = response["Content-Security-Policy"]
    directives = {}
    for part in policy.split(";"):
        name, *values = part.split()
        directives[name] = values
    return directives


@pytest.fixture
def user_client(client):
    client.force_login(StaffUserFactory(is_superuser=False))
    return client


def test_api_docs_loads_nothing_from_another_origin(user_client):
    response = user_client.get("/api/docs")
    assert response.status_code == 200
    html = response.content.decode()
    page = _parsed(html)
    for asset in SWAGGER_ASSETS:
        assert f"/static/{asset}" in page.urls
    assert not [url for url in page.urls if re.match(r"^(https?:)?//", url)], page.urls
    assert not re.search(r"https?://|cdn\.", html)
    assert page.inline_scripts == []  # the settings travel as JSON, read by our own script


def test_the_swagger_assets_are_served_from_our_static_files_by_whitenoise(settings, tmp_path):
    # As in production: collectstatic fills STATIC_ROOT, whitenoise serves it (DEBUG off).
    settings.STATIC_ROOT = tmp_path / "static"
    call_command("collectstatic", "--noinput", stdout=io.StringIO())
    client = Client()  # a fresh handler: whitenoise indexes STATIC_ROOT when it starts
    for asset in SWAGGER_ASSETS:
        response = client.get(f"/static/{asset}")
        assert response.status_code == 200, asset
        assert b"".join(response.streaming_content), asset
        response.close()


@pytest.mark.parametrize(
    "path",
    ["/api/docs", "/accounts/login/", "/accounts/logout/", "/admin/login/", "/admin/", "/x/"],
)
def test_every_html_page_carries_the_content_security_policy(user_client, path):
    send = user_client.post if path == "/accounts/logout/" else user_client.get  # logout: POST
    response = send(path)
    assert response["Content-Type"].startswith("text/html"), path
    directives = _directives(response)
    assert directives["script-src"] == ["'self'"]
    assert directives["frame-ancestors"] == ["'none'"]
    assert directives["img-src"] == ["'self'", "data:"]
    assert directives["default-src"] == ["'self'"]


def test_admin_pages_carry_the_policy_and_no_inline_script(staff_client):
    for path in ("/admin/", "/admin/auth/user/", "/admin/conversations/conversation/"):
        response = staff_client.get(path)
        assert response.status_code == 200, path
        assert _directives(response)["script-src"] == ["'self'"], path
        assert _parsed(response.content.decode()).inline_scripts == [], path


# --- error pages, under DEBUG too, and both servers ------------------------------------------

ERROR_PATHS = ["/static/no-such-file.css", "/no-such-page/", "/admin/no-such-page/"]


@pytest.mark.parametrize("debug", [False, True])
@pytest.mark.parametrize("path", ERROR_PATHS)
def test_a_404_page_carries_the_policy_with_debug_on_or_off(settings, debug, path):
    settings.DEBUG = debug
    response = Client().get(path)  # a fresh handler: whitenoise reads DEBUG when it starts
    assert response.status_code in (302, 404), path  # the admin sends a stranger to log in
    assert response["Content-Type"].startswith("text/html")
    assert _directives(response)["script-src"] == ["'self'"]


def _serve_command(port: int) -> list[str]:
    """The development server as `scripts/serve` runs it (its `exec` line), on `port`."""
    script = (Path(settings.BASE_DIR) / "scripts" / "serve").read_text()
    [line] = [line for line in script.splitlines() if line.startswith("exec ")]
    words = shlex.split(line.removeprefix("exec "))
    assert words[:3] == [".venv/bin/python", "manage.py", "runserver"]
    return [sys.executable, "manage.py", *words[2:-1], "--noreload", f"127.0.0.1:{port}"]


def _free_port() -> int:
    """The first free port of 8300-8399, the range servers started here may use."""
    for port in range(8300, 8400):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 8300-8399")


@contextmanager
def _server(command: list[str], *, port: int, debug: bool, static: Path) -> Iterator[str]:
    """A server process on `port` serving the static files in `static`, stopped on the way
    out; yields its base URL."""
    env = {
        **os.environ,
        "STATIC_ROOT": str(static),
        "DEBUG": str(debug),
        "DATABASE_URL": test_database_url(),
        "PORT": str(port),
        "WEB_CONCURRENCY": "1",
    }
    process = subprocess.Popen(
        command,
        cwd=settings.BASE_DIR,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_healthy(base, process, why=lambda: f"{command} did not start")
        yield base
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)


def _get(url: str) -> tuple[int, Message]:
    """The status and the headers, read by name in any case as HTTP says (uvicorn's httptools
    protocol sends `content-type`, its h11 protocol `Content-Type`)."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.headers
    except urllib.error.HTTPError as error:
        return error.code, error.headers


SERVERS = {
    "scripts/serve": _serve_command,
    "gunicorn": lambda port: [
        str(Path(sys.executable).parent / "gunicorn"),
        "-c",
        "gunicorn.conf.py",
        "yuxi_site.asgi",
    ],
}


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("server", "debug"),
    [("scripts/serve", False), ("scripts/serve", True), ("gunicorn", False)],
)
def test_every_html_answer_of_both_servers_carries_the_policy(settings, tmp_path, server, debug):
    # As both start scripts do: collectstatic first.
    settings.STATIC_ROOT = tmp_path / "static"
    call_command("collectstatic", "--noinput", stdout=io.StringIO())
    port = _free_port()
    with _server(SERVERS[server](port), port=port, debug=debug, static=tmp_path / "static") as base:
        for path in [*ERROR_PATHS, "/accounts/login/"]:
            status, headers = _get(base + path)
            assert status in (200, 404), (path, status)
            assert headers["Content-Type"].startswith("text/html"), path
            assert "script-src 'self'" in headers["Content-Security-Policy"], path
        status, headers = _get(f"{base}/static/ninja/swagger-ui-init.js")
        assert status == 200  # static files still served, by whitenoise
