"""Under /api/ every answer is JSON: a body that is not JSON is a 415 before anything reads it,
and a path missing its trailing slash reaches its endpoint instead of an HTML redirect."""

import json

import pytest
from django.conf import settings
from django.test import Client
from django.test.client import MULTIPART_CONTENT, encode_multipart

from conversations.models import Message
from memory_app.api_auth import CSRF_FAILED_MESSAGE
from memory_app.models import MemoryEvent, UserConfig
from tests.factories import UserConfigFactory

pytestmark = pytest.mark.django_db

CSRF_TOKEN = "e" * 32
BOUNDARY = "yuxi-boundary"

# Bodies a browser form or a careless client sends: (content type, raw body).
NOT_JSON = {
    "text/plain": ("text/plain", b'{"message": "hi"}'),
    "form": ("application/x-www-form-urlencoded", b"message=hi&csrfmiddlewaretoken=x"),
    "multipart": (
        MULTIPART_CONTENT,
        encode_multipart(BOUNDARY, {"message": "hi"}),
    ),
    "multipart without boundary": ("multipart/form-data", b"--x\r\n\r\nhi\r\n--x--\r\n"),
    "no type": ("", b'{"message": "hi"}'),
}


@pytest.fixture
def user():
    return UserConfigFactory(enable_memory=True).user


def _client(user=None) -> Client:
    client = Client(enforce_csrf_checks=True)
    if user is not None:
        client.force_login(user)
    client.cookies[settings.CSRF_COOKIE_NAME] = CSRF_TOKEN
    return client


def _raw(client: Client, method: str, path: str, content_type: str, body: bytes):
    if content_type == MULTIPART_CONTENT:
        content_type = f"multipart/form-data; boundary={BOUNDARY}"
    return client.generic(
        method.upper(), path, body, content_type=content_type, HTTP_X_CSRFTOKEN=CSRF_TOKEN
    )


def _state() -> tuple:
    return (
        Message.objects.count(),
        MemoryEvent.objects.count(),
        list(UserConfig.objects.values_list("enable_memory", flat=True)),
    )


@pytest.mark.parametrize("kind", NOT_JSON)
@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("post", "/api/chat/"),
        ("put", "/api/memory/"),
        ("patch", "/api/settings/"),
        ("delete", "/api/memory/"),
        ("get", "/api/threads/"),
    ],
)
@pytest.mark.parametrize("logged_in", [True, False])
def test_a_body_that_is_not_json_gets_415_json_and_changes_nothing(
    user, kind, method, path, logged_in
):
    content_type, body = NOT_JSON[kind]
    before = _state()
    response = _raw(_client(user if logged_in else None), method, path, content_type, body)
    assert response.status_code == 415
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"error": "the body must be JSON (Content-Type: application/json)"}
    assert _state() == before


def test_json_with_a_charset_is_json(user):
    response = _raw(
        _client(user),
        "post",
        "/api/chat/",
        "application/json; charset=utf-8",
        json.dumps({"message": "hi"}).encode(),
    )
    assert response.status_code == 200


def test_a_request_without_a_body_is_not_refused_for_its_type(user):
    client = _client(user)
    assert client.get("/api/settings/", content_type="text/plain").status_code == 200
    response = client.delete(
        "/api/memory/", content_type="multipart/form-data", HTTP_X_CSRFTOKEN=CSRF_TOKEN
    )
    assert response.status_code == 204


def test_pages_outside_the_api_still_take_forms(user):
    client = Client()
    response = client.post(
        "/accounts/login/", {"username": user.username, "password": "pw"}, follow=False
    )
    assert response.status_code == 302


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("post", "/api/chat", {"message": "hi"}, 200),
        ("patch", "/api/settings", {"enable_memory": False}, 200),
        ("delete", "/api/memory", None, 204),
        ("get", "/api/settings", None, 200),
    ],
)
def test_a_path_missing_its_trailing_slash_reaches_its_endpoint(user, method, path, body, status):
    client = _client(user)
    kwargs = {} if body is None else {"data": json.dumps(body), "content_type": "application/json"}
    response = getattr(client, method)(path, HTTP_X_CSRFTOKEN=CSRF_TOKEN, **kwargs)
    assert response.status_code == status, response.content[:200]
    if status != 204:
        assert response["Content-Type"].startswith("application/json")


@pytest.mark.parametrize("method", ["post", "put", "patch", "delete", "get"])
def test_an_unknown_path_without_its_slash_is_a_json_404_not_a_redirect(user, method):
    response = _client(user).generic(
        method.upper(), "/api/nothing-here", HTTP_X_CSRFTOKEN=CSRF_TOKEN
    )
    assert (response.status_code, response.json()) == (404, {"error": "not found"})


def test_the_slash_rule_needs_the_csrf_check_like_any_unsafe_request(user):
    client = _client(user)
    response = client.post(
        "/api/chat", data=json.dumps({"message": "hi"}), content_type="application/json"
    )
    assert (response.status_code, response.json()) == (403, {"error": CSRF_FAILED_MESSAGE})
    assert Message.objects.count() == 0
