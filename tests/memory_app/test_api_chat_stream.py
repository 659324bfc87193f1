"""`POST /api/chat/stream/`: the same auth, CSRF, body and refusals as `/api/chat/`, then the
turn as Server-Sent Events, over ASGI (`AsyncClient`, the ASGI application) and WSGI."""

import asyncio
import json
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connections
from django.test import AsyncClient, Client

from conversations.models import AgentRun, Message
from tests.factories import ConversationFactory, UserConfigFactory
from tests.wire_model import text_reply

T = TypeVar("T")
URL = "/api/chat/stream/"
# Any 32 alphanumerics form a valid CSRF secret; Django checks that cookie and header agree.
CSRF_TOKEN = "a" * 32

# The turn's database work runs on worker threads, which cannot see a test's transaction.
pytestmark = pytest.mark.django_db(transaction=True)


def parse_sse(body: bytes) -> list[tuple[str, dict]]:
    """(event name, data) of each Server-Sent Event in `body`."""
    events = []
    for frame in body.decode().split("\n\n"):
        if not frame:
            continue
        name_line, data_line = frame.split("\n")
        assert name_line.startswith("event: ") and data_line.startswith("data: ")
        events.append((name_line[len("event: ") :], json.loads(data_line[len("data: ") :])))
    return events


async def logged_in_async_client(user, *, csrf: bool = True) -> AsyncClient:
    client = AsyncClient(enforce_csrf_checks=True)
    await client.aforce_login(user)
    if csrf:
        client.cookies[settings.CSRF_COOKIE_NAME] = CSRF_TOKEN
    return client


async def apost(client: AsyncClient, body: object, *, csrf: bool = True):
    headers = {"X-CSRFToken": CSRF_TOKEN} if csrf else {}
    data = body if isinstance(body, str) else json.dumps(body)
    return await client.post(URL, data=data, content_type="application/json", headers=headers)


def run_client(scenario: Callable[[], Awaitable[T]]) -> T:
    """Run an `AsyncClient` scenario, then close the connection its sync work used: outside a
    server, that work runs on asgiref's one shared thread, and the test client keeps Django
    from closing connections when a request ends."""

    async def and_close() -> T:
        try:
            return await scenario()
        finally:
            await sync_to_async(connections.close_all)()

    return asyncio.run(and_close())


async def body_of(response) -> bytes:
    return b"".join([chunk async for chunk in response.streaming_content])


def test_an_anonymous_caller_gets_401_json():
    response = run_client(lambda: apost(AsyncClient(enforce_csrf_checks=True), {"message": "hi"}))
    assert response.status_code == 401
    assert response.json() == {"error": "authentication required"}
    assert not AgentRun.objects.exists()


def test_another_users_thread_gets_404_json_and_no_run():
    user = UserConfigFactory().user
    foreign = ConversationFactory(user=UserConfigFactory().user)

    async def scenario():
        client = await logged_in_async_client(user)
        return await apost(client, {"message": "hi", "thread_id": foreign.thread_id})

    response = run_client(scenario)
    assert response.status_code == 404
    assert response.json() == {"error": "no such thread"}
    assert not AgentRun.objects.filter(user=user).exists()


@pytest.mark.parametrize(
    ("body", "csrf", "status"),
    [({"message": "hi"}, False, 403), ({"thread_id": None}, True, 400), ("{", True, 400)],
)
def test_refusals_before_the_run_are_json_like_chat(body, csrf, status):
    user = UserConfigFactory().user

    async def scenario():
        client = await logged_in_async_client(user, csrf=csrf)
        return await apost(client, body, csrf=csrf)

    response = run_client(scenario)
    assert response.status_code == status
    # A body with neither message nor decision is refused by the Chat service, not the schema.
    assert response["Content-Type"].split(";")[0] == "application/json"
    assert set(response.json()) == {"error"}
    assert not AgentRun.objects.filter(user=user).exists()


def test_a_turn_over_asgi_streams_server_sent_events_from_run_to_done():
    user = UserConfigFactory(enable_memory=True).user

    async def scenario():
        client = await logged_in_async_client(user)
        response = await apost(client, {"message": "remember that I like tea"})
        return response, await body_of(response)

    response, body = run_client(scenario)
    assert response.status_code == 200
    assert response["Content-Type"] == "text/event-stream"
    assert response.is_async
    events = parse_sse(body)
    names = [name for name, _ in events]
    assert names[0] == "run" and names[-1] == "done"
    assert names.index("tool_call") < names.index("tool_result")
    assert all(name == data["event"] for name, data in events)
    run = AgentRun.objects.get(run_id=events[0][1]["run_id"])
    assert run.status == "succeeded"
    reply = events[-1][1]["reply"]
    assert Message.objects.filter(conversation=run.conversation).last().content == reply


def post_over_wsgi(user, message: str, headers: dict[str, str] | None = None):
    """`POST /api/chat/stream/` of `message` through the WSGI handler as `user` (a session,
    CSRF), with `headers` besides."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    client.cookies[settings.CSRF_COOKIE_NAME] = CSRF_TOKEN
    return client.post(
        URL,
        data=json.dumps({"message": message}),
        content_type="application/json",
        headers={"X-CSRFToken": CSRF_TOKEN, **(headers or {})},
    )


def test_a_turn_over_wsgi_streams_the_same_events_from_a_sync_iterator():
    response = post_over_wsgi(UserConfigFactory(enable_memory=True).user, "hello there")
    assert response.status_code == 200
    assert response["Content-Type"] == "text/event-stream"
    assert not response.is_async
    events = parse_sse(b"".join(response.streaming_content))
    assert [name for name, _ in events if name != "token"] == ["run", "done"]
    tokens = "".join(data["text"] for name, data in events if name == "token")
    assert tokens == events[-1][1]["reply"] == "You said: hello there"


@pytest.mark.parametrize(
    ("language", "reply"), [("en", "You said: hello there"), ("zh-hans", "你说：hello there")]
)
def test_the_demo_model_streams_over_wsgi_in_the_language_of_accept_language(language, reply):
    user = UserConfigFactory().user
    response = post_over_wsgi(user, "hello there", {"Accept-Language": language})
    events = parse_sse(b"".join(response.streaming_content))
    tokens = "".join(data["text"] for name, data in events if name == "token")
    assert tokens == events[-1][1]["reply"] == reply


@pytest.mark.parametrize(
    ("language", "reply"), [("en", "Saved to memory."), ("zh-hans", "已保存到记忆。")]
)
def test_the_demo_model_streams_over_asgi_in_the_language_of_accept_language(language, reply):
    user = UserConfigFactory(enable_memory=True).user

    async def scenario():
        client = await logged_in_async_client(user)
        response = await client.post(
            URL,
            data=json.dumps({"message": "remember that I like tea"}),
            content_type="application/json",
            headers={"X-CSRFToken": CSRF_TOKEN, "Accept-Language": language},
        )
        return await body_of(response)

    events = parse_sse(run_client(scenario))
    assert [data["status"] for name, data in events if name == "tool_result"] == ["success"]
    assert events[-1][1]["reply"] == reply


def asgi_chat_stream(user, message: str) -> tuple[dict, bytes]:
    """An ASGI scope for `POST /api/chat/stream/` as `user` (a real session, CSRF), and its
    body: the request as a server hands it to the ASGI application."""
    session = Client()
    session.force_login(user)
    cookie = (
        f"{settings.SESSION_COOKIE_NAME}={session.cookies[settings.SESSION_COOKIE_NAME].value}; "
        f"{settings.CSRF_COOKIE_NAME}={CSRF_TOKEN}"
    )
    body = json.dumps({"message": message}).encode()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": URL,
        "raw_path": URL.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"testserver"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"x-csrftoken", CSRF_TOKEN.encode()),
            (b"cookie", cookie.encode()),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }
    return scope, body


def client_receive(body: bytes, *, disconnect_after: asyncio.Event):
    """The ASGI `receive` of a client that sends `body`, then disconnects once the event is
    set (as the server reports a client that went away, or one whose response ended)."""
    requests = iter([{"type": "http.request", "body": body, "more_body": False}])

    async def receive() -> dict:
        try:
            return next(requests)
        except StopIteration:
            await disconnect_after.wait()
            return {"type": "http.disconnect"}

    return receive


@pytest.fixture
def application():
    """`yuxi_site.asgi`'s application. Imported by a test, not at collection: the import warms
    the process, which opens the database pool, and collection may not reach the database."""
    from yuxi_site.asgi import application

    return application


def test_an_open_stream_holds_no_pooled_connection_while_the_turn_runs(wire_model, application):
    """The request's own thread reads the session and the user, then hands its connection
    back: a stream whose turn waits on the model ties up no connection of the pool."""
    wire_model.script = lambda request: wire_model.think() or text_reply("hello back")
    user = UserConfigFactory(enable_memory=True).user
    scope, body = asgi_chat_stream(user, "hello")
    pool = connections["default"].pool
    out_before = pool.get_stats()["pool_size"] - pool.get_stats()["pool_available"]
    out_while_waiting: list[int] = []

    async def scenario():
        finished = asyncio.Event()
        receive = client_receive(body, disconnect_after=finished)

        async def send(message):
            if message["type"] == "http.response.body" and message.get("body"):
                if not out_while_waiting:  # the first event is out, the turn waits on the model
                    assert await asyncio.to_thread(wire_model.thinking.wait, 20)
                    stats = pool.get_stats()
                    out_while_waiting.append(stats["pool_size"] - stats["pool_available"])
                    wire_model.release.set()
            elif message["type"] == "http.response.body":
                finished.set()

        await asyncio.wait_for(application(scope, receive, send), timeout=60)

    asyncio.run(scenario())
    assert out_while_waiting == [out_before]  # this test thread's own, if any
    assert AgentRun.objects.get(user=user).status == "succeeded"


def test_a_client_that_disconnects_mid_stream_cancels_the_turn(application):
    """Driven through the ASGI application as a server would: the client goes away once the
    first event is out, while the response is still being sent. The run is cancelled by the
    time the application returns, not later by the garbage collector."""
    user = UserConfigFactory(enable_memory=True).user
    scope, body = asgi_chat_stream(user, "remember that I like tea")
    sent: list[dict] = []

    async def scenario():
        first_event_out = asyncio.Event()
        receive = client_receive(body, disconnect_after=first_event_out)

        async def send(message):
            sent.append(message)
            if message["type"] == "http.response.body" and message.get("body"):
                first_event_out.set()
                await asyncio.sleep(30)  # the client is gone: this send never completes

        await asyncio.wait_for(application(scope, receive, send), timeout=60)
        return await sync_to_async(AgentRun.objects.get)(user=user)

    run = run_client(scenario)
    assert sent[0]["status"] == 200
    assert sent[1]["body"].startswith(b"event: run\n")
    assert (run.status, run.worker_id) == ("cancelled", None)
    assert run.error == "cancelled: the consumer stopped reading the stream"
    assert list(
        Message.objects.filter(conversation=run.conversation).values_list("role", flat=True)
    ) == ["user"]


def _documented(pattern: str) -> str:
    """The first line of docs/http-api.md matching `pattern`."""
    page = (Path(settings.BASE_DIR) / "docs" / "http-api.md").read_text()
    return re.search(pattern, page, re.MULTILINE).group(0)


def test_the_docs_show_an_interrupted_streams_done_event_and_the_409_of_a_second_decision():
    user = UserConfigFactory(enable_memory=True, memory_write_approval=True).user

    async def scenario():
        client = await logged_in_async_client(user)
        asked = await apost(client, {"message": "remember that I take the 8:10 train"})
        events = parse_sse(await body_of(asked))
        thread = events[0][1]["thread_id"]
        await apost(client, {"thread_id": thread, "resume": {"decision": "reject"}})
        again = await apost(client, {"thread_id": thread, "resume": {"decision": "approve"}})
        return events, again

    events, again = run_client(scenario)
    name, done = events[-1]
    documented = json.loads(
        _documented(r'^    data: \{"event": "done", "status": "interrupted".*$').strip()[6:]
    )
    assert name == "done" and done["status"] == "interrupted"
    assert set(documented) == set(done) and set(documented["approval"]) == set(done["approval"])
    assert documented["approval"]["content"] == done["approval"]["content"]
    assert documented["tool_calls"] == done["tool_calls"]
    assert again.status_code == 409
    assert _documented(r"^    \{\"error\": .*\} 409$").strip() == f"{json.dumps(again.json())} 409"
