"""The JSON API as a client sees it: session auth, CSRF, one error shape, threads, settings."""

import base64
import json
from pathlib import Path

import pytest
from django.conf import settings
from django.core import signing
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from conversations.models import AgentRun, Conversation, Message
from conversations.services import add_message
from memory_app.api_auth import CSRF_FAILED_MESSAGE
from memory_app.models import MemoryEvent, UserConfig
from memory_app.runtime import agent_run
from tests.database import unreachable_database
from tests.factories import ConversationFactory, MessageFactory, UserConfigFactory, UserFactory

# Any 32 alphanumerics form a valid CSRF secret; Django checks that cookie and header agree.
CSRF_TOKEN = "a" * 32
FOREIGN = "{foreign}"  # replaced by another user's thread id
VERSION = "0" * 64  # the hash of a version the user does not have

# Every operation: method, path, a valid body.
OPERATIONS = [
    ("post", "/api/chat/", {"message": "hi"}),
    ("post", "/api/chat/stream/", {"message": "hi"}),
    ("get", "/api/memory/", None),
    ("put", "/api/memory/", {"text": "a fact\n"}),
    ("delete", "/api/memory/", None),
    ("get", "/api/settings/", None),
    ("patch", "/api/settings/", {"enable_memory": True}),
    ("get", "/api/threads/", None),
    ("patch", f"/api/threads/{FOREIGN}/", {"status": "archived"}),
    ("get", f"/api/threads/{FOREIGN}/messages/", None),
    ("get", "/api/approvals/", None),
    ("get", "/api/export/", None),
    ("get", "/api/memory/versions/", None),
    ("delete", "/api/memory/versions/", None),
    ("get", f"/api/memory/versions/{VERSION}/", None),
    ("post", f"/api/memory/versions/{VERSION}/restore/", None),
    ("get", "/api/memory/lines/", None),
    ("delete", "/api/memory/lines/1/", None),
    ("patch", "/api/memory/lines/1/", {"text": "x"}),
]
UNSAFE = [operation for operation in OPERATIONS if operation[0] != "get"]


def send(client: Client, method: str, path: str, body: object = None, **headers: str):
    if body is None:  # no body at all (the test client's post() would send an empty form)
        return client.generic(method.upper(), path, **headers)
    data = body if isinstance(body, str) else json.dumps(body)
    return getattr(client, method)(path, data=data, content_type="application/json", **headers)


def csrf(client: Client) -> dict[str, str]:
    client.cookies[settings.CSRF_COOKIE_NAME] = CSRF_TOKEN
    return {"HTTP_X_CSRFTOKEN": CSRF_TOKEN}


@pytest.fixture
def user(settings):
    """A user with memory on and a MEMORY.md, so a refused write would have something to change."""
    user = UserConfigFactory().user
    memory = Path(settings.WORKSPACE_ROOT) / str(user.pk) / "agents" / "MEMORY.md"
    memory.parent.mkdir(parents=True)
    memory.write_bytes(b"a fact\n")
    return user


@pytest.fixture
def api_client(user):
    """A session-authenticated client that enforces CSRF like a browser would face it."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    return client


def snapshot() -> tuple:
    """Everything a refused request must leave as it was: rows and workspace files."""
    return (
        list(Conversation.objects.order_by("pk").values_list("pk", "status", "updated_at")),
        Message.objects.count(),
        AgentRun.objects.count(),
        list(UserConfig.objects.order_by("pk").values_list("user_id", "enable_memory")),
        MemoryEvent.objects.count(),
        sorted(
            (str(path), path.read_bytes() if path.is_file() else None)
            for path in Path(settings.WORKSPACE_ROOT).rglob("*")
        ),
    )


@pytest.mark.django_db
class TestRefusals:
    @pytest.mark.parametrize(("method", "path", "body"), OPERATIONS)
    def test_anonymous_caller_gets_401_json_and_nothing_changes(self, method, path, body):
        foreign = ConversationFactory()
        before = snapshot()
        client = Client(enforce_csrf_checks=True)
        response = send(client, method, path.replace(FOREIGN, foreign.thread_id), body)
        assert (response.status_code, response.json()) == (
            401,
            {"error": "authentication required"},
        )
        assert snapshot() == before

    @pytest.mark.parametrize(("method", "path", "body"), UNSAFE)
    def test_unsafe_request_without_csrf_token_gets_403_json_and_nothing_changes(
        self, api_client, user, method, path, body
    ):
        own = ConversationFactory(user=user)
        before = snapshot()
        response = send(api_client, method, path.replace(FOREIGN, own.thread_id), body)
        assert (response.status_code, response.json()) == (403, {"error": CSRF_FAILED_MESSAGE})
        assert snapshot() == before

    @pytest.mark.parametrize(
        ("method", "path", "allowed"),
        [
            ("get", "/api/chat/", "POST"),
            ("get", "/api/chat/stream/", "POST"),
            ("post", "/api/memory/", "GET, PUT, DELETE"),
            ("put", "/api/settings/", "GET, PATCH"),
            ("delete", "/api/threads/", "GET"),
            ("get", "/api/threads/thread-x/", "PATCH"),
            ("post", "/api/export/", "GET"),
        ],
    )
    def test_a_method_no_operation_takes_gets_405_json_with_allow(
        self, api_client, method, path, allowed
    ):
        body = None if method == "get" else {}
        response = send(api_client, method, path, body, **csrf(api_client))
        assert response.status_code == 405
        assert set(response["Allow"].split(", ")) == set(allowed.split(", "))
        assert set(response.json()) == {"error"}

    @pytest.mark.parametrize(
        ("method", "path", "body"),
        [
            ("put", "/api/memory/", "{not json"),
            ("put", "/api/memory/", {"text": 5}),
            ("put", "/api/memory/", {}),
            ("patch", "/api/settings/", {"enable_memory": "yes"}),
            ("patch", "/api/settings/", {}),
            ("patch", "/api/settings/", {"memory_write_approval": 1}),
            ("patch", "/api/settings/", "[" * 100_000),
            ("patch", "/api/threads/{own}/", {"status": "gone"}),
            ("patch", "/api/threads/{own}/", []),
            ("post", "/api/chat/", {"message": ["hi"]}),
            ("get", "/api/threads/?limit=0", None),
            ("get", "/api/threads/?limit=101", None),
            ("get", "/api/threads/?status=gone", None),
            ("get", "/api/threads/?cursor=not-a-cursor", None),
        ],
    )
    def test_a_bad_request_gets_400_json_and_nothing_changes(
        self, api_client, user, method, path, body
    ):
        own = ConversationFactory(user=user)
        before = snapshot()
        headers = csrf(api_client)
        response = send(api_client, method, path.replace("{own}", own.thread_id), body, **headers)
        assert response.status_code == 400
        assert set(response.json()) == {"error"}
        assert snapshot() == before

    def test_a_body_over_the_upload_limit_gets_413_json(self, api_client, settings):
        settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1024
        body = {"enable_memory": False, "padding": "x" * 2048}
        before = snapshot()
        response = send(api_client, "patch", "/api/settings/", body, **csrf(api_client))
        assert (response.status_code, set(response.json())) == (413, {"error"})
        assert snapshot() == before

    def test_an_unknown_api_path_gets_404_json(self, api_client):
        response = api_client.get("/api/nothing-here/")
        assert (response.status_code, response.json()) == (404, {"error": "not found"})


@pytest.mark.django_db
def test_the_csrf_403_says_which_header_to_send_and_where_its_token_comes_from(api_client):
    response = send(api_client, "post", "/api/chat/", {"message": "hi"})
    error = response.json()["error"]
    assert response.status_code == 403
    assert "X-CSRFToken" in error and "csrftoken cookie" in error and "/accounts/login/" in error


@pytest.mark.django_db
class TestThreads:
    def test_list_holds_own_visible_threads_newest_first_in_pages(self, api_client, user):
        threads = [ConversationFactory(user=user, title=f"t{i}") for i in range(5)]
        for index, thread in enumerate(threads):  # bump in a known order: t0 oldest
            Message.objects.create(conversation=thread, role="user", content=f"m{index}")
            Conversation.objects.filter(pk=thread.pk).update(
                updated_at=Message.objects.latest("id").created_at
            )
        ConversationFactory(user=user, status="archived")
        ConversationFactory(user=user, source="agent_call")
        ConversationFactory(user=user, parent=threads[0])
        ConversationFactory()  # another user's
        seen, cursor = [], None
        while True:
            query = "?limit=2" + (f"&cursor={cursor}" if cursor else "")
            page = api_client.get("/api/threads/" + query).json()
            seen += [thread["title"] for thread in page["threads"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert seen == ["t4", "t3", "t2", "t1", "t0"]

    def test_status_filter_lists_archived_and_deleted_threads(self, api_client, user):
        for status, title in (("archived", "old"), ("deleted", "gone")):
            MessageFactory(conversation=ConversationFactory(user=user, status=status, title=title))
        for status, title in (("archived", "old"), ("deleted", "gone")):
            page = api_client.get(f"/api/threads/?status={status}").json()
            assert [thread["title"] for thread in page["threads"]] == [title]

    def test_patch_archives_deletes_and_restores_an_own_thread(self, api_client, user):
        thread = MessageFactory(conversation__user=user).conversation
        headers = csrf(api_client)
        for status in ("archived", "deleted", "active"):
            response = send(
                api_client,
                "patch",
                f"/api/threads/{thread.thread_id}/",
                {"status": status},
                **headers,
            )
            assert (response.status_code, response.json()["status"]) == (200, status)
            thread.refresh_from_db()
            assert thread.status == status

    def test_patch_renames_an_own_thread_and_refuses_a_title_it_cannot_keep(self, api_client, user):
        thread = MessageFactory(conversation__user=user).conversation
        headers = csrf(api_client)
        url = f"/api/threads/{thread.thread_id}/"
        renamed = send(api_client, "patch", url, {"title": "  Trip   to Lisbon "}, **headers)
        assert (renamed.status_code, renamed.json()["title"]) == (200, "Trip to Lisbon")
        both = send(api_client, "patch", url, {"title": "Lisbon", "status": "deleted"}, **headers)
        assert (both.json()["title"], both.json()["status"]) == ("Lisbon", "deleted")
        for bad in ({"title": "   "}, {"title": "x" * 300}, {}):
            assert send(api_client, "patch", url, bad, **headers).status_code == 400, bad
        thread.refresh_from_db()
        assert (thread.title, thread.status) == ("Lisbon", "deleted")

    @pytest.mark.parametrize("thread_id", ["{foreign}", "thread-unknown", "thread-%00"])
    def test_patch_of_another_users_or_an_unknown_thread_gets_404_and_changes_nothing(
        self, api_client, thread_id
    ):
        foreign = ConversationFactory()
        before = snapshot()
        path = f"/api/threads/{thread_id.replace('{foreign}', foreign.thread_id)}/"
        response = send(api_client, "patch", path, {"status": "deleted"}, **csrf(api_client))
        assert (response.status_code, response.json()) == (404, {"error": "no such thread"})
        assert snapshot() == before

    @pytest.mark.parametrize(
        "hidden", [{"source": "agent_call"}, {"source": "agent_evaluation"}, {"parent": True}]
    )
    def test_patch_of_a_thread_the_list_never_shows_gets_404_and_changes_nothing(
        self, api_client, user, hidden
    ):
        if hidden.pop("parent", False):
            hidden["parent"] = ConversationFactory(user=user)
        thread = ConversationFactory(user=user, status="archived", **hidden)
        MessageFactory(conversation=thread)  # hidden for what it is, not for being empty
        for status in ("archived", "deleted", "active"):
            assert thread.thread_id not in [
                t["thread_id"]
                for t in api_client.get(f"/api/threads/?status={status}").json()["threads"]
            ]
        before = snapshot()
        path = f"/api/threads/{thread.thread_id}/"
        response = send(api_client, "patch", path, {"status": "active"}, **csrf(api_client))
        assert (response.status_code, response.json()) == (404, {"error": "no such thread"})
        assert snapshot() == before


@pytest.mark.django_db(transaction=True)
def test_a_thread_agent_run_opened_is_listed_once_it_holds_a_message_titled_by_it(api_client, user):
    with agent_run(user_id=user.pk, thread_id=None) as run:
        pass
    thread = Conversation.objects.get(thread_id=run.ctx.thread_id)
    assert thread.title == ""

    def listed() -> list[tuple[str, str]]:
        page = api_client.get("/api/threads/").json()
        return [(t["thread_id"], t["title"]) for t in page["threads"]]

    assert listed() == []
    headers = csrf(api_client)
    path = f"/api/threads/{thread.thread_id}/"
    assert send(api_client, "patch", path, {"status": "archived"}, **headers).status_code == 404
    # The team's loop persists its own messages with conversations.services.add_message.
    add_message(conversation=thread, role=Message.Role.USER, content="  Plan my\ntrip  ")
    add_message(conversation=thread, role=Message.Role.ASSISTANT, content="Where to?")
    add_message(conversation=thread, role=Message.Role.USER, content="Kyoto")
    assert listed() == [(thread.thread_id, "Plan my trip")]


def _page_cursor(client: Client) -> str:
    cursor = client.get("/api/threads/?limit=1").json()["next_cursor"]
    assert cursor is not None
    return cursor


@pytest.mark.django_db
class TestCursors:
    @pytest.fixture
    def threads(self, user):
        return [MessageFactory(conversation__user=user).conversation for _ in range(3)]

    def test_a_cursor_the_list_returned_leads_to_the_next_page(self, api_client, threads):
        page = api_client.get(f"/api/threads/?limit=1&cursor={_page_cursor(api_client)}")
        assert page.status_code == 200 and len(page.json()["threads"]) == 1

    @pytest.mark.parametrize(
        "raw",
        [
            "2020-01-01T00:00:00+16:00|1",  # an offset PostgreSQL refuses
            "2020-01-01T00:00:00+00:00|1",  # the old unsigned shape, well-formed
            "9999-12-31T23:59:59+00:00|9223372036854775807",
        ],
    )
    def test_a_forged_cursor_gets_400_json_before_any_query_of_it(self, api_client, threads, raw):
        cursor = base64.urlsafe_b64encode(raw.encode()).decode()
        with CaptureQueriesContext(connection) as queries:
            response = api_client.get(f"/api/threads/?cursor={cursor}")
        assert (response.status_code, response.json()) == (
            400,
            {"error": "cursor is not one this list returned"},
        )
        assert not [q for q in queries.captured_queries if "conversations_conversation" in q["sql"]]

    def test_an_altered_cursor_gets_400_json(self, api_client, threads):
        cursor = _page_cursor(api_client)
        value, signature = cursor.split(":", 1)
        payload = json.loads(signing.b64_decode(value.encode()))
        payload[-1] += 1  # the thread id the page resumes after
        altered = signing.b64_encode(json.dumps(payload, separators=(",", ":")).encode())
        tampered = cursor[:-1] + ("A" if cursor[-1] != "A" else "B")
        for forged in (f"{altered.decode()}:{signature}", tampered, cursor + "x"):
            response = api_client.get(f"/api/threads/?cursor={forged}")
            assert response.status_code == 400, forged
            assert set(response.json()) == {"error"}

    def test_another_users_cursor_gets_400_json(self, api_client, threads):
        stranger = UserConfigFactory().user
        MessageFactory.create_batch(2, conversation__user=stranger)
        other = Client()
        other.force_login(stranger)
        response = api_client.get(f"/api/threads/?cursor={_page_cursor(other)}")
        assert (response.status_code, set(response.json())) == (400, {"error"})


@pytest.mark.django_db
@pytest.mark.parametrize(("method", "path", "body"), [op for op in UNSAFE if op[2] is not None])
def test_an_unknown_body_field_gets_400_json_and_nothing_changes(
    api_client, user, method, path, body
):
    own = ConversationFactory(user=user)
    before = snapshot()
    memory = api_client.get("/api/memory/")
    headers = {**csrf(api_client), "HTTP_IF_MATCH": memory["ETag"]}
    response = send(
        api_client, method, path.replace(FOREIGN, own.thread_id), {**body, "user_id": 1}, **headers
    )
    assert response.status_code == 400
    assert "user_id" in response.json()["error"]
    assert snapshot() == before


@pytest.mark.django_db
class TestDocuments:
    def test_openapi_document_lists_every_operation(self, client):
        client.force_login(UserFactory())
        document = client.get("/api/openapi.json").json()
        operations = {
            (method.upper(), path)
            for path, item in document["paths"].items()
            for method in item
            if method != "parameters"
        }
        assert operations == {
            (
                method.upper(),
                path.replace(FOREIGN, "{thread_id}")
                .replace(VERSION, "{sha256}")
                .replace("/lines/1/", "/lines/{number}/"),
            )
            for method, path, _ in OPERATIONS
        }

    def test_docs_page_is_served(self, client):
        client.force_login(UserFactory())
        assert client.get("/api/docs").status_code == 200


@pytest.mark.django_db
def test_a_non_staff_user_logs_in_and_out_with_the_plain_pages():
    user = UserFactory(password="s3cret-pass")
    client = Client(enforce_csrf_checks=True)
    page = client.get("/accounts/login/")
    assert page.status_code == 200
    token = page.cookies[settings.CSRF_COOKIE_NAME].value
    login = client.post(
        "/accounts/login/",
        {"username": user.username, "password": "s3cret-pass", "csrfmiddlewaretoken": token},
    )
    assert (login.status_code, login["Location"]) == (302, "/")  # the user's own page
    assert client.get("/api/settings/").json() == {
        "enable_memory": False,
        "memory_write_approval": False,
    }
    token = client.cookies[settings.CSRF_COOKIE_NAME].value  # rotated at login
    logout = client.post("/accounts/logout/", {"csrfmiddlewaretoken": token})
    assert logout.status_code == 200
    assert client.get("/api/settings/").status_code == 401


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("save_every_request", [False, True])
def test_database_down_every_endpoint_answers_json_503_then_recovers(user, save_every_request):
    """The database unreachable (a closed port), for the API and the session middleware alike."""
    thread = ConversationFactory(user=user)
    client = Client(enforce_csrf_checks=True, raise_request_exception=False)
    client.force_login(user)
    headers = csrf(client)
    with unreachable_database(), pytest.MonkeyPatch.context() as patch:
        patch.setattr(settings, "SESSION_SAVE_EVERY_REQUEST", save_every_request)
        for method, path, body in OPERATIONS:
            path = path.replace(FOREIGN, thread.thread_id)
            response = send(client, method, path, body, **headers)
            assert response.status_code == 503, (method, path, response.content[:200])
            assert response.json() == {"error": "the service is unavailable, try again"}
        if save_every_request:
            # The view needs no database; the session save in middleware fails after it.
            response = client.get("/api/openapi.json")
            assert (response.status_code, response.json()) == (
                503,
                {"error": "the service is unavailable, try again"},
            )
    response = send(client, "get", "/api/settings/", None, **headers)
    assert (response.status_code, response.json()) == (
        200,
        {"enable_memory": True, "memory_write_approval": False},
    )


@pytest.mark.django_db
def test_every_api_response_is_never_stored_by_the_browser(api_client):
    for path in ["/api/memory/", "/api/settings/", "/api/threads/", "/api/export/", "/api/nope/"]:
        response = api_client.get(path)
        assert "no-store" in response.get("Cache-Control", ""), path
        response.close()
    assert "no-store" in Client().get("/api/memory/")["Cache-Control"]  # a 401 too


@pytest.mark.django_db
def test_the_api_says_its_errors_in_the_language_of_accept_language(api_client):
    headers = {"HTTP_X_CSRFTOKEN": "x", "HTTP_ACCEPT_LANGUAGE": "zh-CN"}
    api_client.cookies[settings.CSRF_COOKIE_NAME] = "x" * 32
    headers["HTTP_X_CSRFTOKEN"] = "x" * 32
    stale = api_client.put(
        "/api/memory/",
        {"text": "b"},
        content_type="application/json",
        HTTP_IF_MATCH='"sha256:' + "0" * 64 + '"',
        **headers,
    )
    assert stale.status_code == 412
    assert stale.json()["error"] == "你读取记忆后它已被更改：请重新获取后再试"
    missing = api_client.patch(
        "/api/threads/nope/", {"status": "archived"}, content_type="application/json", **headers
    )
    assert missing.json() == {"error": "没有这个对话"}
    english = api_client.patch(
        "/api/threads/nope/",
        {"status": "archived"},
        content_type="application/json",
        HTTP_X_CSRFTOKEN="x" * 32,
        HTTP_ACCEPT_LANGUAGE="en",
    )
    assert english.json() == {"error": "no such thread"}
    anonymous = Client().get("/api/memory/", HTTP_ACCEPT_LANGUAGE="zh-CN")
    assert anonymous.json() == {"error": "需要登录"}


@pytest.mark.django_db
def test_the_api_documents_need_a_login(client):
    for path in ["/api/docs", "/api/openapi.json"]:
        anonymous = client.get(path)
        assert anonymous.status_code in (302, 401), path
        assert b"Yuxi Memory API" not in anonymous.content, path
    client.force_login(UserFactory())
    assert client.get("/api/openapi.json").status_code == 200
    assert client.get("/api/docs").status_code == 200
