"""No third-party script on our origin: /api/docs is built from django-ninja's own Swagger
assets in our static files, and every HTML page carries a Content-Security-Policy that allows
scripts from our origin only and no framing."""

import io
import re
from html.parser import HTMLParser

import pytest
from django.core.management import call_command
from django.test import Client

from tests.factories import StaffUserFactory

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
