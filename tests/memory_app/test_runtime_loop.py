"""The process's event loop: turns run on one loop whoever calls them, so a model client's
connection pool (bound to the loop that opened it) works on every call; sync callers keep
their database work on their own thread; a caller's cancellation reaches the turn."""

import asyncio
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conversations.models import AgentRun
from memory_app.runtime import achat, astream_chat, chat, stream_chat
from memory_app.runtime.loop import on_process_loop, process_loop, run_sync
from tests.factories import UserFactory


class KeepAliveModel:
    """A real HTTP/1.1 server speaking the chat-completions wire format, keeping connections
    open between requests (as hosted APIs and llama.cpp do), answering every request with
    `reply` (SSE when the client streams)."""

    def __init__(self, reply: str = "hello from the wire"):
        self.reply = reply
        self.requests = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests += 1
                if body.get("stream"):
                    payload, kind = server._sse(), "text/event-stream"
                else:
                    payload, kind = server._json(), "application/json"
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def _json(self) -> bytes:
        message = {"role": "assistant", "content": self.reply}
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        body = {"id": "x", "object": "chat.completion", "created": 0, "model": "m"}
        return json.dumps({**body, "choices": [choice]}).encode()

    def _sse(self) -> bytes:
        def chunk(delta: dict, finish: str | None = None) -> str:
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            body = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m"}
            return f"data: {json.dumps({**body, 'choices': [choice]})}\n\n"

        words = [w + " " for w in self.reply.split(" ")]
        words[-1] = words[-1].rstrip()
        frames = [chunk({"role": "assistant", "content": ""})]
        frames += [chunk({"content": word}) for word in words]
        frames += [chunk({}, "stop"), "data: [DONE]\n\n"]
        return "".join(frames).encode()

    def __enter__(self):
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def wire_model(settings):
    with KeepAliveModel() as model:
        settings.LLM_BASE_URL = model.url
        settings.LLM_API_KEY = "local"
        settings.LLM_MODEL = "m"
        yield model


def _run_status(run_id: str) -> tuple[str, str]:
    run = AgentRun.objects.get(run_id=run_id)
    return run.status, run.error


@pytest.mark.django_db(transaction=True)
def test_achat_in_a_fresh_asyncio_run_each_time_succeeds_every_time(wire_model):
    user = UserFactory()
    turns = [asyncio.run(achat(user_id=user.pk, message=f"hello {i}")) for i in range(3)]
    assert [(t.status, t.reply) for t in turns] == [("succeeded", "hello from the wire")] * 3
    assert [_run_status(t.run_id) for t in turns] == [("succeeded", "")] * 3


@pytest.mark.django_db(transaction=True)
def test_stream_chat_called_again_and_again_in_one_process_succeeds_every_time(wire_model):
    user = UserFactory()
    for i in range(3):
        events = list(stream_chat(user_id=user.pk, message=f"hello {i}"))
        assert events[-1]["event"] == "done", events[-1]
        assert "".join(e["text"] for e in events if e["event"] == "token") == (
            "hello from the wire"
        )


@pytest.mark.django_db(transaction=True)
def test_every_entry_point_in_any_order_shares_one_model_connection_pool(wire_model):
    user = UserFactory()

    async def streamed() -> list[dict]:
        return [event async for event in astream_chat(user_id=user.pk, message="hi")]

    assert chat(user_id=user.pk, message="hi").status == "succeeded"
    assert asyncio.run(achat(user_id=user.pk, message="hi")).status == "succeeded"
    assert list(stream_chat(user_id=user.pk, message="hi"))[-1]["event"] == "done"
    assert asyncio.run(streamed())[-1]["event"] == "done"
    assert chat(user_id=user.pk, message="hi").status == "succeeded"
    assert wire_model.requests == 5


def test_the_process_loop_is_one_loop_in_a_daemon_thread_for_every_caller():
    async def running() -> asyncio.AbstractEventLoop:
        return asyncio.get_running_loop()

    loop = process_loop()
    assert run_sync(running()) is loop
    assert asyncio.run(on_process_loop(running())) is loop
    assert process_loop() is loop
    [thread] = [t for t in threading.enumerate() if t.name == f"yuxi-loop-{os.getpid()}"]
    assert thread.daemon


def test_a_forked_child_starts_its_own_process_loop():
    parent = process_loop()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its copy of the parent's loop thread does not run
        try:

            async def running() -> int:
                return id(asyncio.get_running_loop())

            answer = b"ok" if run_sync(running()) != id(parent) else b"same loop"
        except BaseException:
            answer = b"failed"
        os.write(write, answer)
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    assert os.read(read, 100) == b"ok"
