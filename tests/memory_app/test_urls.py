"""`memory_app.urls` works under any prefix a host includes it at: the API, its OpenAPI
document and Swagger UI, its JSON edge and error views, and a turn, all under `/memory/api/`;
nothing is left at `/api/`."""

import json

import pytest
from django.conf import settings
from django.test import Client

from memory_app.api_edge import api_path_prefix
from tests.factories import UserConfigFactory

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.memory_app.host_urls")]

CSRF_TOKEN = "h" * 32


@pytest.fixture
def host_client():
    """A logged-in client of a user whose memory is on, with a CSRF cookie it may echo."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(UserConfigFactory(enable_memory=True).user)
    client.cookies[settings.CSRF_COOKIE_NAME] = CSRF_TOKEN
    return client


def _post(client, path, body, **extra):
    return client.post(
        path,
        json.dumps(body),
        content_type="application/json",
        HTTP_X_CSRFTOKEN=CSRF_TOKEN,
        **extra,
    )


def test_the_api_path_is_found_from_the_urls():
    assert api_path_prefix() == "/memory/api/"


def test_the_api_answers_under_the_hosts_prefix_and_not_at_the_root(host_client):
    assert host_client.get("/memory/api/settings/").json() == {
        "enable_memory": True,
        "memory_write_approval": False,
    }
    assert host_client.get("/api/settings/").status_code == 404


def test_the_openapi_document_and_docs_page_name_the_prefixed_paths(host_client):
    paths = host_client.get("/memory/api/openapi.json").json()["paths"]
    assert "/memory/api/chat/" in paths
    assert all(path.startswith("/memory/api/") for path in paths)
    docs = host_client.get("/memory/api/docs")
    assert docs.status_code == 200
    assert b"/memory/api/openapi.json" in docs.content


@pytest.mark.django_db(transaction=True)  # the tool runs on a pool thread
def test_a_turn_under_the_prefix_remembers(host_client):
    turn = _post(host_client, "/memory/api/chat/", {"message": "remember that I drink oolong"})
    assert turn.status_code == 200
    assert [call["status"] for call in turn.json()["tool_calls"]] == ["success"]
    memory = host_client.get("/memory/api/memory/").json()
    assert memory["text"] == "I drink oolong\n"


def test_the_json_edge_guards_the_prefixed_api(host_client):
    refused = host_client.post(
        "/memory/api/chat/", "message=hi", content_type="text/plain", HTTP_X_CSRFTOKEN=CSRF_TOKEN
    )
    assert (refused.status_code, refused["Content-Type"]) == (415, "application/json")
    unslashed = host_client.patch(
        "/memory/api/settings",
        json.dumps({"enable_memory": False}),
        content_type="application/json",
        HTTP_X_CSRFTOKEN=CSRF_TOKEN,
    )
    assert unslashed.json() == {"enable_memory": False, "memory_write_approval": False}


def test_an_unknown_path_under_the_prefixed_api_is_a_json_404_and_elsewhere_not(host_client):
    missing = host_client.get("/memory/api/no-such-thing/")
    assert (missing.status_code, missing.json()) == (404, {"error": "not found"})
    elsewhere = host_client.get("/no-such-page/")
    assert elsewhere.status_code == 404
    assert not elsewhere["Content-Type"].startswith("application/json")


def test_a_thread_listing_cursor_pages_under_the_prefix(host_client):
    for n in range(3):
        _post(host_client, "/memory/api/chat/", {"message": f"hello {n}"})
    first = host_client.get("/memory/api/threads/", {"limit": 2}).json()
    rest = host_client.get("/memory/api/threads/", {"limit": 2, "cursor": first["next_cursor"]})
    assert rest.status_code == 200
    assert len(first["threads"]) + len(rest.json()["threads"]) == 3
