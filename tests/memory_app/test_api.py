"""The JSON API as a client sees it: session auth, CSRF, one error shape, threads, settings."""

import json
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client

from conversations.models import AgentRun, Conversation, Message
from memory_app.models import MemoryEvent, UserConfig
from tests.database import unreachable_database
from tests.factories import ConversationFactory, UserConfigFactory, UserFactory

# Any 32 alphanumerics form a valid CSRF secret; Django checks that cookie and header agree.
CSRF_TOKEN = "a" * 32
FOREIGN = "{foreign}"  # replaced by another user's thread id

# Every operation: method, path, a valid body.
OPERATIONS = [
    ("post", "/api/chat/", {"message": "hi"}),
    ("get", "/api/memory/", None),
    ("put", "/api/memory/", {"text": "a fact\n"}),
    ("delete", "/api/memory/", None),
    ("get", "/api/settings/", None),
    ("patch", "/api/settings/", {"enable_memory": True}),
    ("get", "/api/threads/", None),
    ("patch", f"/api/threads/{FOREIGN}/", {"status": "archived"}),
    ("get", "/api/export/", None),
]
UNSAFE = [operation for operation in OPERATIONS if operation[0] != "get"]


def send(client: Client, method: str, path: str, body: object = None, **headers: str):
    data = body if isinstance(body, str) or body is None else json.dumps(body)
    kwargs = {"content_type": "application/json"} if data is not None else {}
    return getattr(client, method)(path, data=data, **kwargs, **headers)


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
        assert (response.status_code, response.json()) == (403, {"error": "CSRF check failed"})
        assert snapshot() == before

    @pytest.mark.parametrize(
        ("method", "path", "allowed"),
        [
            ("get", "/api/chat/", "POST"),
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
        ConversationFactory(user=user, status="archived", title="old")
        ConversationFactory(user=user, status="deleted", title="gone")
        for status, title in (("archived", "old"), ("deleted", "gone")):
            page = api_client.get(f"/api/threads/?status={status}").json()
            assert [thread["title"] for thread in page["threads"]] == [title]

    def test_patch_archives_deletes_and_restores_an_own_thread(self, api_client, user):
        thread = ConversationFactory(user=user)
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


@pytest.mark.django_db
class TestDocuments:
    def test_openapi_document_lists_every_operation(self, client):
        document = client.get("/api/openapi.json").json()
        operations = {
            (method.upper(), path)
            for path, item in document["paths"].items()
            for method in item
            if method != "parameters"
        }
        assert operations == {
            (method.upper(), path.replace(FOREIGN, "{thread_id}")) for method, path, _ in OPERATIONS
        }

    def test_docs_page_is_served(self, client):
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
    assert (login.status_code, login["Location"]) == (302, "/api/docs")
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
