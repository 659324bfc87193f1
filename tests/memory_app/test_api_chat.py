import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from django.conf import settings
from django.db import OperationalError, connection
from django.test import Client, override_settings
from langchain_core.messages import AIMessage

from conversations.models import AgentRun, Conversation, Message, ToolCall
from conversations.utils.string_utils import STORABLE_TEXT_REQUIREMENT
from memory_app.api_auth import CSRF_FAILED_MESSAGE
from memory_app.llm import ScriptedChatModel
from memory_app.models import UserConfig
from memory_app.runtime import graphs
from memory_app.runtime.limits import ASSISTANT_TEXT_MAX_BYTES
from tests.factories import ConversationFactory, UserConfigFactory, UserFactory

URL = "/api/chat/"
# Any 32 alphanumerics form a valid CSRF secret; Django checks that cookie and header agree.
CSRF_TOKEN = "a" * 32


def memory_path(uid: int) -> Path:
    return Path(settings.WORKSPACE_ROOT) / str(uid) / "agents" / "MEMORY.md"


def post(client: Client, body: object, csrf: bool = True):
    headers = {"HTTP_X_CSRFTOKEN": CSRF_TOKEN} if csrf else {}
    data = body if isinstance(body, str) else json.dumps(body)
    return client.post(URL, data=data, content_type="application/json", **headers)


@pytest.fixture
def logged_in():
    """A session-authenticated client that enforces CSRF like a browser would face it."""
    client = Client(enforce_csrf_checks=True)
    user = UserConfigFactory().user
    client.force_login(user)
    client.cookies[settings.CSRF_COOKIE_NAME] = CSRF_TOKEN
    client.user = user
    return client


@pytest.mark.django_db
class TestChatEndpoint:
    def test_anonymous_caller_gets_401_json(self):
        response = post(Client(enforce_csrf_checks=True), {"message": "hi"}, csrf=False)
        assert response.status_code == 401
        assert response.json() == {"error": "authentication required"}
        assert not AgentRun.objects.exists()

    def test_session_without_csrf_token_gets_403_json(self, logged_in):
        response = post(logged_in, {"message": "hi"}, csrf=False)
        assert response.status_code == 403
        assert response.json() == {"error": CSRF_FAILED_MESSAGE}
        assert not AgentRun.objects.exists()

    def test_get_is_not_allowed(self, logged_in):
        response = logged_in.get(URL)
        assert (response.status_code, response["Allow"]) == (405, "POST")

    @pytest.mark.parametrize(
        "body",
        [
            "{not json",
            "[1, 2]",
            "[" * 100_000,
            {"message": ""},
            {"message": 5},
            {"message": "hi", "thread_id": 3},
            {"message": "a lone surrogate \ud800"},
        ],
    )
    def test_bad_bodies_get_400_json(self, logged_in, body):
        response = post(logged_in, body)
        assert response.status_code == 400
        assert set(response.json()) == {"error"}

    @pytest.mark.parametrize("message", ["a lone surrogate \ud800", "a NUL \x00"])
    def test_unstorable_text_is_refused_as_not_valid_unicode_text(self, logged_in, message):
        response = post(logged_in, {"message": message})
        assert (response.status_code, response.json()) == (
            400,
            {"error": f"message must be {STORABLE_TEXT_REQUIREMENT}"},
        )
        assert "valid Unicode text" in STORABLE_TEXT_REQUIREMENT
        assert "lone surrogate" in STORABLE_TEXT_REQUIREMENT

    def test_another_users_thread_and_an_unknown_thread_get_the_same_404(self, logged_in):
        foreign = ConversationFactory()
        answers = [
            post(logged_in, {"message": "hi", "thread_id": thread_id})
            for thread_id in (foreign.thread_id, "thread-unknown")
        ]
        assert [a.status_code for a in answers] == [404, 404]
        assert answers[0].json() == answers[1].json() == {"error": "no such thread"}

    def test_a_body_over_the_upload_limit_gets_413_json(self, logged_in, settings):
        settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1024
        response = post(logged_in, {"message": "x" * 2048})
        assert (response.status_code, set(response.json())) == (413, {"error"})
        assert not AgentRun.objects.exists()

    def test_a_database_failure_gets_503_json_without_internals(self, logged_in):
        def refuse_writes(execute, sql, params, many, context):
            if sql.lstrip().upper().startswith("INSERT"):
                raise OperationalError('relation "conversations_conversation": server closed')
            return execute(sql, params, many, context)

        with connection.execute_wrapper(refuse_writes):
            response = post(logged_in, {"message": "hi"})
        assert (response.status_code, response.json()) == (
            503,
            {"error": "the service is unavailable, try again"},
        )

    def test_a_reply_over_the_text_cap_gets_502_json_and_nothing_of_it_is_stored(
        self, logged_in, monkeypatch
    ):
        class FloodingModel(ScriptedChatModel):
            def reply(self, messages):
                return AIMessage(content="x" * (ASSISTANT_TEXT_MAX_BYTES + 1))

        monkeypatch.setattr(graphs, "chat_model_from_settings", FloodingModel)
        # A model setting of its own, so the flooding model gets its own shared graph.
        with override_settings(LLM_MODEL="flooding"):
            response = post(logged_in, {"message": "hi"})
        assert (response.status_code, response.json()) == (
            502,
            {"error": "the model is unavailable, try again"},
        )
        assert AgentRun.objects.get().status == "failed"
        assert list(Message.objects.values_list("role", flat=True)) == ["user"]

    @pytest.mark.parametrize("thread_id", ["thread-\x00", "thread-\udc00"])
    def test_a_thread_id_no_database_can_store_gets_the_unknown_thread_404(
        self, logged_in, thread_id
    ):
        response = post(logged_in, {"message": "hi", "thread_id": thread_id})
        assert (response.status_code, response.json()) == (404, {"error": "no such thread"})
        assert not AgentRun.objects.exists()

    def test_the_user_comes_from_the_session_never_from_the_body(self, logged_in):
        other = UserFactory()
        # A body naming a user is refused outright (an unknown field), not quietly ignored.
        response = post(logged_in, {"message": "hi", "user_id": other.pk, "uid": other.pk})
        assert response.status_code == 400
        assert "user_id" in response.json()["error"]
        assert not Conversation.objects.exists()
        response = post(logged_in, {"message": "hi"})
        assert response.status_code == 200
        thread = Conversation.objects.get(thread_id=response.json()["thread_id"])
        assert thread.user_id == logged_in.user.pk

    # The remember tool runs on a LangGraph pool thread, which cannot see a test transaction.
    @pytest.mark.django_db(transaction=True)
    def test_a_turn_answers_with_thread_run_reply_and_tool_statuses(self, logged_in):
        response = post(logged_in, {"message": "remember that I drink oolong tea"})
        assert response.status_code == 200
        body = response.json()
        assert set(body) == {"thread_id", "run_id", "status", "reply", "tool_calls", "approval"}
        assert body["status"] == "succeeded" and body["approval"] is None
        assert body["tool_calls"] == [{"name": "remember_memory", "status": "success"}]
        follow_up = post(logged_in, {"message": "thanks", "thread_id": body["thread_id"]})
        assert follow_up.json()["thread_id"] == body["thread_id"]
        assert follow_up.json()["reply"] == "You said: thanks"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("language", "reply"), [("en", "You said: hello"), ("zh-hans", "你说：hello")]
)
def test_the_demo_model_answers_in_the_language_of_accept_language(logged_in, language, reply):
    response = logged_in.post(
        URL,
        data=json.dumps({"message": "hello"}),
        content_type="application/json",
        headers={"X-CSRFToken": CSRF_TOKEN, "Accept-Language": language},
    )
    assert response.json()["reply"] == reply


class LiveSession:
    """A client of the live server over real HTTP, carrying a session and a CSRF cookie."""

    def __init__(self, live_server, user):
        client = Client()
        client.force_login(user)
        self.url = live_server.url + URL
        self.cookie = (
            f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}; "
            f"{settings.CSRF_COOKIE_NAME}={CSRF_TOKEN}"
        )

    def say(self, message: str, thread_id: str | None = None) -> dict:
        body = {"message": message}
        if thread_id:
            body["thread_id"] = thread_id
        request = urllib.request.Request(
            self.url,
            data=json.dumps(body).encode(),
            headers={
                "Content-Type": "application/json",
                "Cookie": self.cookie,
                "X-CSRFToken": CSRF_TOKEN,
            },
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 200
            return json.loads(response.read())


@pytest.mark.django_db(transaction=True)
def test_end_to_end_remembered_fact_reaches_a_new_thread_and_history_finds_it(live_server):
    user = UserConfigFactory().user
    session = LiveSession(live_server, user)

    first = session.say("Please remember that I drink oolong tea")
    assert first["tool_calls"] == [{"name": "remember_memory", "status": "success"}]
    assert memory_path(user.pk).read_text() == "I drink oolong tea\n"
    remember_run = AgentRun.objects.get(run_id=first["run_id"])
    assert (remember_run.status, remember_run.worker_id) == ("succeeded", None)

    recall = session.say("What do you remember?")
    assert recall["thread_id"] != first["thread_id"]
    assert recall["reply"] == "From memory:\nI drink oolong tea"

    search = session.say("search my history for oolong")
    assert search["tool_calls"] == [{"name": "search_thread_messages", "status": "success"}]
    output = json.loads(ToolCall.objects.get(name="search_thread_messages").output)
    found = {hit["thread_id"] for hit in output["results"]}
    assert first["thread_id"] in found
    assert any("oolong" in hit["snippet"] for hit in output["results"])


@pytest.mark.django_db(transaction=True)
def test_end_to_end_with_memory_off_offers_no_tool_and_writes_no_file(live_server):
    user = UserConfigFactory(enable_memory=False).user
    memory_path(user.pk).parent.mkdir(parents=True)
    memory_path(user.pk).write_text("an old fact\n")
    session = LiveSession(live_server, user)
    turn = session.say("Please remember that I drink oolong tea")
    assert turn["tool_calls"] == []
    assert turn["reply"] == "You said: Please remember that I drink oolong tea"
    assert memory_path(user.pk).read_text() == "an old fact\n"
    assert session.say("What do you remember?")["reply"] == "I have no saved memory."
    assert not ToolCall.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_end_to_end_anonymous_request_is_refused_with_401(live_server):
    request = urllib.request.Request(
        live_server.url + URL,
        data=b'{"message": "hi"}',
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 401
    assert json.loads(refused.value.read()) == {"error": "authentication required"}


@pytest.mark.django_db(transaction=True)
def test_approval_round_trip_over_http_settings_interrupted_resume_then_409(logged_in):
    user = logged_in.user
    settings_response = logged_in.patch(
        "/api/settings/",
        data=json.dumps({"memory_write_approval": True}),
        content_type="application/json",
        HTTP_X_CSRFTOKEN=CSRF_TOKEN,
    )
    assert settings_response.json() == {"enable_memory": True, "memory_write_approval": True}
    assert logged_in.get("/api/settings/").json()["memory_write_approval"] is True

    asked = post(logged_in, {"message": "remember that I drink oolong tea"})
    assert asked.status_code == 200
    body = asked.json()
    assert body["status"] == "interrupted"
    assert body["approval"]["content"] == "I drink oolong tea"
    assert body["approval"]["replaces"] is None
    assert not memory_path(user.pk).exists()
    [listed] = logged_in.get("/api/threads/").json()["threads"]
    assert listed["pending_approval"]["tool_call_id"] == body["approval"]["tool_call_id"]
    assert listed["pending_approval"]["run_id"] == body["run_id"]

    decided = post(logged_in, {"thread_id": body["thread_id"], "resume": {"decision": "approve"}})
    assert decided.status_code == 200
    assert decided.json()["status"] == "succeeded"
    assert decided.json()["tool_calls"][0] == {"name": "remember_memory", "status": "success"}
    assert memory_path(user.pk).read_bytes() == b"I drink oolong tea\n"
    [listed] = logged_in.get("/api/threads/").json()["threads"]
    assert listed["pending_approval"] is None

    again = post(logged_in, {"thread_id": body["thread_id"], "resume": {"decision": "approve"}})
    assert again.status_code == 409
    assert set(again.json()) == {"error"}
    assert memory_path(user.pk).read_bytes() == b"I drink oolong tea\n"


@pytest.mark.django_db
@pytest.mark.parametrize(
    "body",
    [
        {"thread_id": "thread-x"},
        {"message": "hi", "resume": {"decision": "approve"}, "thread_id": "thread-x"},
        {"thread_id": "thread-x", "resume": {"decision": "maybe"}},
        {"thread_id": "thread-x", "resume": {"decision": "edit", "content": 5}},
        {"thread_id": "thread-x", "resume": {"decision": "approve", "content": "x"}},
    ],
)
def test_a_bad_decision_body_is_400_and_starts_no_run(logged_in, body):
    ConversationFactory(user=logged_in.user, thread_id="thread-x")
    response = post(logged_in, body)
    assert response.status_code == 400 and set(response.json()) == {"error"}
    assert not AgentRun.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_decision_that_cannot_be_carried_out_is_refused_over_http_and_stays_pending(logged_in):
    user = logged_in.user
    UserConfig.objects.filter(user=user).update(memory_write_approval=True)
    memory_path(user.pk).parent.mkdir(parents=True, exist_ok=True)
    memory_path(user.pk).write_bytes(b"I drink black tea\n")
    asked = post(logged_in, {"message": "remember that I drink oolong tea"}).json()
    thread = asked["thread_id"]

    no_content = post(logged_in, {"thread_id": thread, "resume": {"decision": "edit"}})
    assert (no_content.status_code, no_content.json()) == (
        400,
        {"error": "content is required for an edit"},
    )
    missing = post(
        logged_in,
        {"thread_id": thread, "resume": {"decision": "edit", "content": "x", "replaces": "cola"}},
    )
    assert (missing.status_code, missing.json()) == (
        409,
        {"error": "the text to replace is not in the memory file"},
    )
    [listed] = logged_in.get("/api/threads/").json()["threads"]
    assert listed["pending_approval"]["tool_call_id"] == asked["approval"]["tool_call_id"]
    assert not AgentRun.objects.filter(run_type="resume").exists()

    logged_in.patch(
        "/api/settings/",
        data=json.dumps({"enable_memory": False}),
        content_type="application/json",
        HTTP_X_CSRFTOKEN=CSRF_TOKEN,
    )
    off = post(logged_in, {"thread_id": thread, "resume": {"decision": "approve"}})
    assert (off.status_code, off.json()) == (409, {"error": "memory is off"})
    logged_in.patch(
        "/api/settings/",
        data=json.dumps({"enable_memory": True}),
        content_type="application/json",
        HTTP_X_CSRFTOKEN=CSRF_TOKEN,
    )
    edited = post(
        logged_in,
        {
            "thread_id": thread,
            "resume": {"decision": "edit", "content": "oolong tea", "replaces": "black tea"},
        },
    )
    assert edited.status_code == 200 and edited.json()["status"] == "succeeded"
    assert memory_path(user.pk).read_bytes() == b"I drink oolong tea\n"


@pytest.mark.django_db(transaction=True)
def test_a_streamed_decision_that_cannot_be_carried_out_is_a_json_409(logged_in):
    user = logged_in.user
    UserConfig.objects.filter(user=user).update(memory_write_approval=True)
    asked = post(logged_in, {"message": "remember that I drink oolong tea"}).json()
    UserConfig.objects.filter(user=user).update(enable_memory=False)
    response = logged_in.post(
        "/api/chat/stream/",
        data=json.dumps({"thread_id": asked["thread_id"], "resume": {"decision": "approve"}}),
        content_type="application/json",
        HTTP_X_CSRFTOKEN=CSRF_TOKEN,
    )
    assert (response.status_code, response.json()) == (409, {"error": "memory is off"})
    assert not AgentRun.objects.filter(run_type="resume").exists()
