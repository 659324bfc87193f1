"""Every entry point of the runtime against a real OpenAI-compatible HTTP server (the wire
model), several calls per process, one after another and interleaved: `chat`, `achat` (in its
own `asyncio.run` each time, and on one shared loop), `stream_chat`, `astream_chat`,
`agent_run` / `aagent_run` around a team's own agent, a resume with approval on, and
`POST /api/chat/` and `/api/chat/stream/` served by a real WSGI server and a real ASGI server
(uvicorn) over HTTP; then how a model that fails (429, 500, a dropped connection, a slow or a
silent first token) ends a turn at each entry point.
"""

import asyncio
import http.client
import json
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import pytest
import uvicorn
from django.conf import settings
from django.db import connections
from django.test import Client
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage, ToolMessage

from conversations.models import AgentRun, ToolCall
from conversations.utils.connections import in_worker_thread
from memory_app.llm import chat_model_from_settings
from memory_app.middleware import YuxiMemoryMiddleware
from memory_app.runtime import (
    ChatModelUnavailable,
    aagent_run,
    achat,
    agent_run,
    astream_chat,
    chat,
    stream_chat,
)
from tests.factories import UserConfigFactory
from tests.wire_model import SHAPES, Reply

# Tools run on pool threads, the servers on their own threads: all must see what tests write.
pytestmark = pytest.mark.django_db(transaction=True)

CSRF_TOKEN = "a" * 32
CALLS_PER_ENTRY_POINT = 3


@dataclass(frozen=True)
class Outcome:
    """What one entry-point call gave back, whatever its form (a `ChatTurn`, the `done` or
    `error` event of a stream, an HTTP response, a team's own run)."""

    status: str
    reply: str = ""
    tool_calls: tuple = ()
    thread_id: str | None = None
    http_status: int = 200
    events: tuple[str, ...] = ()


# --- servers ---------------------------------------------------------------------------------


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def wsgi_server() -> Iterator[str]:
    """`yuxi_site.wsgi` served by a threading WSGI server (as `./scripts/serve` serves it):
    its `host:port`."""
    from yuxi_site.wsgi import application

    server = make_server(
        "127.0.0.1", 0, application, _ThreadingWSGIServer, handler_class=_QuietHandler
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def asgi_server() -> Iterator[str]:
    """`yuxi_site.asgi` served by uvicorn on its own event loop (as production serves it): its
    `host:port`."""
    from yuxi_site.asgi import application

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(
        uvicorn.Config(application, lifespan="off", log_level="warning", timeout_keep_alive=1)
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    for _ in range(500):
        if server.started:
            break
        threading.Event().wait(0.01)
    try:
        yield f"127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def _session(user) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies[settings.SESSION_COOKIE_NAME].value


def _post(address: str, user, path: str, body: dict) -> http.client.HTTPResponse:
    host, port = address.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    cookie = f"{settings.SESSION_COOKIE_NAME}={_session(user)}; csrftoken={CSRF_TOKEN}"
    connection.request(
        "POST",
        path,
        body=json.dumps(body),
        headers={"Content-Type": "application/json", "Cookie": cookie, "X-CSRFToken": CSRF_TOKEN},
    )
    return connection.getresponse()


def _sse_events(response: http.client.HTTPResponse) -> list[dict]:
    return [json.loads(line[len(b"data: ") :]) for line in response if line.startswith(b"data: ")]


# --- entry points, each as one call -------------------------------------------------------------


def _turn_outcome(turn) -> Outcome:
    return Outcome(
        status=turn.status,
        reply=turn.reply,
        tool_calls=tuple(tuple(sorted(c.items())) for c in turn.tool_calls),
        thread_id=turn.thread_id,
    )


def _events_outcome(events: list[dict]) -> Outcome:
    last = events[-1]
    names = tuple(event["event"] for event in events)
    thread_id = events[0].get("thread_id")
    if last["event"] == "error":
        return Outcome(
            status="error", http_status=last["status_code"], events=names, thread_id=thread_id
        )
    return Outcome(
        status=last["status"],
        reply=last["reply"],
        tool_calls=tuple(tuple(sorted(c.items())) for c in last["tool_calls"]),
        thread_id=thread_id,
        events=names,
    )


def _refused() -> Outcome:
    """What a refused turn gives (`/api/chat/` answers it 502)."""
    return Outcome(status="error", http_status=502)


def call_chat(user, *, thread_id=None, message=None, resume=None, **_: Any) -> Outcome:
    try:
        return _turn_outcome(
            chat(user_id=user.pk, message=message, thread_id=thread_id, resume=resume)
        )
    except ChatModelUnavailable:
        return _refused()


async def _achat(user, thread_id, message, resume) -> Outcome:
    try:
        turn = await achat(user_id=user.pk, message=message, thread_id=thread_id, resume=resume)
    except ChatModelUnavailable:
        return _refused()
    return _turn_outcome(turn)


def call_achat_own_loop(user, *, thread_id=None, message=None, resume=None, **_: Any) -> Outcome:
    return asyncio.run(_achat(user, thread_id, message, resume))


def call_achat_shared_loop(
    user, *, thread_id=None, message=None, resume=None, loop=None, **_: Any
) -> Outcome:
    return loop.run_until_complete(_achat(user, thread_id, message, resume))


def call_stream_chat(user, *, thread_id=None, message=None, resume=None, **_: Any) -> Outcome:
    events = list(stream_chat(user_id=user.pk, message=message, thread_id=thread_id, resume=resume))
    return _events_outcome(events)


def call_astream_chat(user, *, thread_id=None, message=None, resume=None, **_: Any) -> Outcome:
    async def collect() -> list[dict]:
        stream = astream_chat(user_id=user.pk, message=message, thread_id=thread_id, resume=resume)
        return [event async for event in stream]

    return _events_outcome(asyncio.run(collect()))


def _team_agent(ctx):
    """A backend team's own agent, as docs/python-api.md shows it: its model, the memory
    middleware for its run (which reads the database)."""
    middleware = [m for m in (YuxiMemoryMiddleware.for_run(ctx),) if m]
    return create_agent(chat_model_from_settings(), middleware=middleware)


def _run_outcome(run_id: str, thread_id: str, messages: list) -> Outcome:
    """A team's run: its status, and its tool calls as the agent's tool results tell them (the
    team stores its own messages)."""
    calls = tuple(
        (("name", m.name), ("status", "success" if m.status == "success" else "error"))
        for m in messages
        if isinstance(m, ToolMessage)
    )
    status = AgentRun.objects.get(run_id=run_id).status
    return Outcome(status=status, reply=messages[-1].text, tool_calls=calls, thread_id=thread_id)


def call_agent_run(user, *, thread_id=None, message=None, **_: Any) -> Outcome:
    with agent_run(user_id=user.pk, thread_id=thread_id) as run:
        agent = _team_agent(run.ctx)
        state = agent.invoke({"messages": [HumanMessage(message)]}, {"max_concurrency": 1})
    return _run_outcome(run.run_id, run.ctx.thread_id, state["messages"])


def call_aagent_run(user, *, thread_id=None, message=None, **_: Any) -> Outcome:
    async def turn() -> tuple[str, str, list]:
        async with aagent_run(user_id=user.pk, thread_id=thread_id) as run:
            agent = await in_worker_thread(_team_agent)(run.ctx)
            state = await agent.ainvoke(
                {"messages": [HumanMessage(message)]}, {"max_concurrency": 1}
            )
        return run.run_id, run.ctx.thread_id, state["messages"]

    return _run_outcome(*asyncio.run(turn()))


def _http_chat(address: str, user, body: dict) -> Outcome:
    response = _post(address, user, "/api/chat/", body)
    data = json.loads(response.read())
    if response.status != 200:
        return Outcome(status="error", http_status=response.status)
    return Outcome(
        status=data["status"],
        reply=data["reply"],
        tool_calls=tuple(tuple(sorted(c.items())) for c in data["tool_calls"]),
        thread_id=data["thread_id"],
    )


def _http_stream(address: str, user, body: dict) -> Outcome:
    response = _post(address, user, "/api/chat/stream/", body)
    if response.status != 200:
        return Outcome(status="error", http_status=response.status)
    assert response.getheader("Content-Type").startswith("text/event-stream")
    return _events_outcome(_sse_events(response))


def _body(thread_id, message, resume) -> dict:
    body: dict[str, Any] = {"thread_id": thread_id}
    body.update({"message": message} if resume is None else {"resume": resume})
    return body


def call_wsgi_chat(user, *, thread_id=None, message=None, resume=None, wsgi=None, **_: Any):
    return _http_chat(wsgi, user, _body(thread_id, message, resume))


def call_wsgi_stream(user, *, thread_id=None, message=None, resume=None, wsgi=None, **_: Any):
    return _http_stream(wsgi, user, _body(thread_id, message, resume))


def call_asgi_chat(user, *, thread_id=None, message=None, resume=None, asgi=None, **_: Any):
    return _http_chat(asgi, user, _body(thread_id, message, resume))


def call_asgi_stream(user, *, thread_id=None, message=None, resume=None, asgi=None, **_: Any):
    return _http_stream(asgi, user, _body(thread_id, message, resume))


ENTRY_POINTS: dict[str, Callable[..., Outcome]] = {
    "chat": call_chat,
    "achat, own asyncio.run": call_achat_own_loop,
    "achat, shared loop": call_achat_shared_loop,
    "stream_chat": call_stream_chat,
    "astream_chat": call_astream_chat,
    "agent_run": call_agent_run,
    "aagent_run": call_aagent_run,
    "POST /api/chat/ (WSGI)": call_wsgi_chat,
    "POST /api/chat/stream/ (WSGI)": call_wsgi_stream,
    "POST /api/chat/ (ASGI)": call_asgi_chat,
    "POST /api/chat/stream/ (ASGI)": call_asgi_stream,
}
# The Chat service's own entry points (a team's `agent_run` has no resume and no stream).
CHAT_ENTRY_POINTS = [name for name in ENTRY_POINTS if "agent_run" not in name]
STREAMS = [name for name in ENTRY_POINTS if "stream" in name]


@pytest.fixture
def servers(wsgi_server, asgi_server) -> Iterator[dict[str, Any]]:
    """What the entry points need beside the user: both HTTP servers and one shared loop."""
    loop = asyncio.new_event_loop()
    try:
        yield {"wsgi": wsgi_server, "asgi": asgi_server, "loop": loop}
    finally:
        loop.close()
        connections.close_all()


REMEMBERED = (("name", "remember_memory"), ("status", "success"))


def memory_lines(user) -> list[str]:
    path = settings.WORKSPACE_ROOT / str(user.pk) / "agents" / "MEMORY.md"
    return path.read_text().splitlines() if path.exists() else []


def assert_no_run_left_running() -> None:
    assert not AgentRun.objects.filter(status__in=["pending", "running"]).exists()


# --- the matrix -------------------------------------------------------------------------------


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_each_entry_point_answers_three_calls_in_a_row_over_the_wire(wire_model, servers, entry):
    """A plain turn, a turn that remembers, a plain turn again, in one thread."""
    user = UserConfigFactory(enable_memory=True).user
    call = ENTRY_POINTS[entry]
    first = call(user, message="hello there", **servers)
    assert (first.status, first.reply) == ("succeeded", "You said: hello there"), first
    thread_id = first.thread_id
    second = call(user, thread_id=thread_id, message="remember that I drink tea", **servers)
    assert second.status == "succeeded" and second.tool_calls == (REMEMBERED,), second
    assert second.reply.startswith("Saved: ") and '"added"' in second.reply
    third = call(user, thread_id=thread_id, message="and again", **servers)
    assert (third.status, third.reply) == ("succeeded", "You said: and again"), third
    assert memory_lines(user) == ["I drink tea"]
    assert_no_run_left_running()
    # Every call went over the wire, the tools offered on each.
    assert all("remember_memory" in r.tool_names for r in wire_model.requests)
    if "stream" in entry:
        assert first.events[0] == "run" and "token" in first.events
        assert "tool_call" in second.events and "tool_result" in second.events


@pytest.mark.parametrize("entry", CHAT_ENTRY_POINTS)
def test_a_resume_with_approval_on_works_three_times_in_a_row(wire_model, servers, entry):
    user = UserConfigFactory(enable_memory=True, memory_write_approval=True).user
    call = ENTRY_POINTS[entry]
    thread_id = None
    for i in range(CALLS_PER_ENTRY_POINT):
        asked = call(user, thread_id=thread_id, message=f"remember that fact {i}", **servers)
        assert asked.status == "interrupted", asked
        thread_id = asked.thread_id
        decided = call(user, thread_id=thread_id, resume={"decision": "approve"}, **servers)
        assert decided.status == "succeeded" and decided.tool_calls == (REMEMBERED,), decided
    assert memory_lines(user) == [f"fact {i}" for i in range(CALLS_PER_ENTRY_POINT)]
    assert_no_run_left_running()


def test_every_entry_point_interleaved_in_one_thread_twice_over(wire_model, servers):
    user = UserConfigFactory(enable_memory=True).user
    thread_id = None
    for round_ in range(2):
        for entry, call in ENTRY_POINTS.items():
            fact = f"{entry} {round_}"
            outcome = call(user, thread_id=thread_id, message=f"remember that {fact}", **servers)
            assert outcome.status == "succeeded" and outcome.tool_calls == (REMEMBERED,), (
                entry,
                outcome,
            )
            thread_id = outcome.thread_id
    expected = [f"{entry} {round_}" for round_ in range(2) for entry in ENTRY_POINTS]
    assert memory_lines(user) == expected
    assert_no_run_left_running()


def test_entry_points_at_the_same_time_from_several_threads_and_loops(wire_model, servers):
    """Sync callers, fresh `asyncio.run` callers and both servers at once, each its own user."""
    entries = [name for name in ENTRY_POINTS if name != "achat, shared loop"]
    users = {entry: UserConfigFactory(enable_memory=True).user for entry in entries}
    outcomes: dict[str, list[Outcome]] = {}
    barrier = threading.Barrier(len(entries))

    def one(entry: str) -> None:
        try:
            barrier.wait()
            outcomes[entry] = [
                ENTRY_POINTS[entry](users[entry], message=f"remember that {entry} {i}", **servers)
                for i in range(2)
            ]
        finally:
            connections.close_all()

    threads = [threading.Thread(target=one, args=(entry,)) for entry in entries]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    for entry in entries:
        assert [o.status for o in outcomes[entry]] == ["succeeded"] * 2, (entry, outcomes[entry])
        assert memory_lines(users[entry]) == [f"{entry} {i}" for i in range(2)]
    assert_no_run_left_running()


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("entry", ["chat", "astream_chat", "POST /api/chat/stream/ (ASGI)"])
def test_each_streamed_tool_call_shape_writes_memory_through_a_real_turn(
    wire_model, servers, shape, entry
):
    """Unstreamed (`chat`) and streamed, a call in each shape servers send runs the tool; a
    call without a usable id gets the run's own unique id."""
    user = UserConfigFactory(enable_memory=True).user
    wire_model.shape = shape
    outcome = ENTRY_POINTS[entry](user, message="remember that I drink tea", **servers)
    assert outcome.status == "succeeded" and outcome.tool_calls == (REMEMBERED,), outcome
    assert memory_lines(user) == ["I drink tea"]
    [row] = ToolCall.objects.filter(name="remember_memory")
    assert row.status == "success" and row.input == {"content": "I drink tea"}
    assert row.tool_call_id.startswith("call_")
    # The tool result went back to the model under that same id.
    answered = [r.last_message for r in wire_model.requests if r.last_message["role"] == "tool"]
    assert [m["tool_call_id"] for m in answered] == [row.tool_call_id]


# --- a model that fails -----------------------------------------------------------------------

RETRY_SOON = {"retry-after-ms": "10"}
ERROR_ENTRY_POINTS = ["chat", "achat, own asyncio.run", "stream_chat", "astream_chat"]


@pytest.mark.parametrize("entry", ERROR_ENTRY_POINTS)
def test_a_429_is_retried_once_and_the_turn_goes_on(wire_model, servers, entry):
    user = UserConfigFactory(enable_memory=True).user
    wire_model.answer(Reply(status=429, headers=RETRY_SOON))
    outcome = ENTRY_POINTS[entry](user, message="hello", **servers)
    assert (outcome.status, outcome.reply) == ("succeeded", "You said: hello")
    assert len(wire_model.requests) == 2


@pytest.mark.parametrize(
    "failure",
    [
        Reply(status=429, headers=RETRY_SOON),
        Reply(status=500, headers=RETRY_SOON),
        Reply(drop_after=0),
    ],
    ids=["429", "500", "dropped connection"],
)
@pytest.mark.parametrize("entry", ERROR_ENTRY_POINTS)
def test_a_model_that_keeps_failing_fails_the_turn_cleanly_and_the_next_turn_works(
    wire_model, servers, entry, failure
):
    user = UserConfigFactory(enable_memory=True).user
    wire_model.answer(failure, failure)  # the call and its one retry
    failed = ENTRY_POINTS[entry](user, message="hello", **servers)
    assert (failed.status, failed.http_status) == ("error", 502), failed
    run = AgentRun.objects.get()
    assert run.status == "failed" and run.error.startswith("the model call failed (")
    assert len(wire_model.requests) == 2
    # The process and its clients are fine: the next turn in the same thread works.
    again = ENTRY_POINTS[entry](user, thread_id=run.conversation.thread_id, message="hi", **servers)
    assert (again.status, again.reply) == ("succeeded", "You said: hi"), again
    assert_no_run_left_running()


@pytest.mark.parametrize("entry", STREAMS)
def test_a_stream_cut_by_the_model_ends_with_an_error_event(wire_model, servers, entry):
    user = UserConfigFactory(enable_memory=True).user
    wire_model.answer(Reply(text="one two three four", drop_after=3))
    outcome = ENTRY_POINTS[entry](user, message="hello", **servers)
    assert (outcome.status, outcome.http_status) == ("error", 502), outcome
    assert outcome.events[0] == "run" and outcome.events[-1] == "error"
    assert AgentRun.objects.get().status == "failed"


@pytest.mark.parametrize("entry", ERROR_ENTRY_POINTS)
def test_a_slow_first_token_within_the_timeout_is_waited_for(wire_model, servers, settings, entry):
    settings.LLM_TIMEOUT_SECONDS = 3.0
    user = UserConfigFactory(enable_memory=True).user
    wire_model.answer(Reply(text="Slow but here.", first_token_after=1.5))
    outcome = ENTRY_POINTS[entry](user, message="hello", **servers)
    assert (outcome.status, outcome.reply) == ("succeeded", "Slow but here."), outcome
    assert len(wire_model.requests) == 1


@pytest.mark.parametrize("entry", ERROR_ENTRY_POINTS)
def test_a_first_token_later_than_the_timeout_fails_the_turn(wire_model, servers, settings, entry):
    settings.LLM_TIMEOUT_SECONDS = 0.5
    settings.LLM_MAX_RETRIES = 0
    user = UserConfigFactory(enable_memory=True).user
    wire_model.answer(Reply(text="Too late.", first_token_after=5))
    outcome = ENTRY_POINTS[entry](user, message="hello", **servers)
    assert (outcome.status, outcome.http_status) == ("error", 502), outcome
    assert AgentRun.objects.get().status == "failed"


def test_the_wire_request_carries_the_dialogue_and_the_memory_tools(wire_model, servers):
    user = UserConfigFactory(enable_memory=True).user
    first = call_chat(user, message="hello there")
    call_stream_chat(user, thread_id=first.thread_id, message="and again")
    sent = wire_model.requests[-1]
    assert sent.authorization == "Bearer wire-key" and sent.body["model"] == "wire-model"
    assert sent.stream is True
    roles = [(m["role"], m.get("content")) for m in sent.body["messages"][1:]]
    assert roles == [
        ("user", "hello there"),
        ("assistant", "You said: hello there"),
        ("user", "and again"),
    ]
    assert sorted(sent.tool_names) == sorted(
        [
            "remember_memory",
            "search_thread_messages",
            "read_thread_messages",
            "delegate_to_subagent",
        ]
    )
