"""A real OpenAI-compatible chat-completions server on 127.0.0.1, for tests over the wire.

`WireModel` runs `POST /v1/chat/completions` in a thread (HTTP/1.1 keep-alive, one thread per
connection): a JSON reply, or Server-Sent Events when the request says `"stream": true`, as
real servers send them — a role-only first chunk, the text a word at a time, tool-call chunks
in each shape servers use (`SHAPES`), a finish chunk, usage-only last chunks, `[DONE]`. What
each request gets is decided by a script: replies queued with `answer(...)` first, in order,
then the server's `script(request)` (by default `echo_script`, which answers like the scripted
model: "remember that X" calls `remember_memory`, a tool result is reported, anything else
echoed). A `Reply` can also be an HTTP error, come late (`first_token_after`), or drop the
connection. Every request is recorded (`requests`), so a test can assert what went over the
wire: the messages, the tools offered, which connection carried it.
"""

import contextlib
import json
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# How a reply's tool calls are streamed:
# - "openai": the id, type and name in the call's first chunk, the arguments in later pieces;
# - "whole": each call in one chunk, arguments included;
# - "no_id" / "empty_id": as "openai", with no `id` key / an empty `id`;
# - "repeated": the id and the name repeated in every chunk of a call (llama.cpp's server);
# - "no_index": as "openai" without an `index` on the chunks (one call only).
SHAPES = ("openai", "whole", "no_id", "empty_id", "repeated", "no_index")
# How many pieces a call's arguments are cut into when streamed.
ARGUMENT_PIECES = 3
MODEL_NAME = "wire-model"


@dataclass(frozen=True)
class Call:
    """A tool call the model asks for: `arguments` is the JSON text it sends."""

    name: str
    arguments: str
    id: str = ""  # "" gets a fresh `call_<n>` from the server (unless the shape sends none)


@dataclass(frozen=True)
class Reply:
    """One answer of the server.

    `status` other than 200 answers that HTTP error with an OpenAI-style error body (and
    `headers`, e.g. `retry-after-ms`). `first_token_after` waits that many seconds before the
    first chunk (before the JSON body, unstreamed). `drop_after` closes the connection after
    that many SSE chunks (0: before any answer, streamed or not).
    """

    text: str = ""
    calls: tuple[Call, ...] = ()
    shape: str = "openai"
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    first_token_after: float = 0.0
    drop_after: int | None = None
    # A stream that stops after this many SSE chunks for `pause_seconds`, then goes on.
    pause_after: int | None = None
    pause_seconds: float = 0.0
    role_chunk: bool = True
    usage_chunks: int = 1


@dataclass(frozen=True)
class Received:
    """One request as the server read it: `client_port` tells which connection carried it."""

    path: str
    authorization: str | None
    body: dict[str, Any]
    client_port: int

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))

    @property
    def tool_names(self) -> list[str]:
        return [tool["function"]["name"] for tool in self.body.get("tools", ())]

    @property
    def last_message(self) -> dict[str, Any]:
        return self.body["messages"][-1]


def text_reply(text: str, **options: Any) -> Reply:
    return Reply(text=text, **options)


def call_reply(name: str, arguments: dict[str, Any], **options: Any) -> Reply:
    """A reply asking for one tool call with `arguments` (sent as JSON text)."""
    return Reply(calls=(Call(name, json.dumps(arguments, ensure_ascii=False)),), **options)


_REMEMBER = re.compile(r"^\s*(?:please\s+)?remember(?:\s+that)?[\s:,]+(?P<fact>\S.*)$", re.I | re.S)


def echo_script(request: Received, *, shape: str = "openai") -> Reply:
    """The default behaviour: a tool result is reported ("Saved: <result>"), "remember that X"
    asks for `remember_memory` (when it is offered), anything else is echoed."""
    last = request.last_message
    if last["role"] == "tool":
        return text_reply(f"Saved: {last['content']}")
    text = last.get("content") or ""
    if isinstance(text, list):  # content blocks
        text = "".join(block.get("text", "") for block in text)
    match = _REMEMBER.match(text)
    if match and "remember_memory" in request.tool_names:
        return call_reply("remember_memory", {"content": match["fact"].strip()}, shape=shape)
    return text_reply(f"You said: {text}")


class WireModel:
    """The server: start it with `with WireModel() as model:` (or the `wire_model` fixture),
    point `LLM_BASE_URL` at `model.url`."""

    def __init__(
        self, script: Callable[[Received], Reply] | None = None, *, shape: str = "openai"
    ) -> None:
        # `shape`: how the default script's tool calls are streamed (tests may change it).
        self.shape = shape
        self.script = script or (lambda request: echo_script(request, shape=self.shape))
        self.requests: list[Received] = []
        self._queued: list[Reply] = []
        self._lock = threading.Lock()
        self._next_id = 0
        self._closing = threading.Event()
        # `think()`: a script's request says the model is thinking, then waits for `release`.
        self.thinking = threading.Event()
        self.release = threading.Event()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        self.httpd.request_queue_size = 256
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, name="wire-model", daemon=True
        )

    def __enter__(self) -> "WireModel":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._closing.set()
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def answer(self, *replies: Reply) -> None:
        """Queue replies for the next requests, in order (the script answers the rest)."""
        with self._lock:
            self._queued.extend(replies)

    def think(self, timeout: float = 20) -> None:
        """In a script: say the model is thinking (`thinking`), then wait until the test
        sets `release` (or the server closes, or `timeout`)."""
        self.thinking.set()
        self.release.wait(timeout)

    def streamed_requests(self) -> list[Received]:
        return [request for request in self.requests if request.stream]

    def _reply_to(self, request: Received) -> Reply:
        with self._lock:
            self.requests.append(request)
            queued = self._queued.pop(0) if self._queued else None
        return queued or self.script(request)

    def _call_id(self) -> str:
        with self._lock:
            self._next_id += 1
            return f"call_wire_{self._next_id}"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        model = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                request = Received(
                    path=self.path,
                    authorization=self.headers.get("Authorization"),
                    body=json.loads(self.rfile.read(length) or b"{}"),
                    client_port=self.client_address[1],
                )
                reply = model._reply_to(request)
                if reply.drop_after == 0:
                    return self._drop()
                if reply.status != 200:
                    return self._error(reply)
                calls = [Call(c.name, c.arguments, c.id or model._call_id()) for c in reply.calls]
                if request.stream:
                    return self._stream(reply, calls)
                if model._closing.wait(reply.first_token_after):
                    return self._drop()
                self._json(200, completion(reply, calls), reply.headers)

            def _json(self, status: int, body: dict, headers: dict[str, str]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def _error(self, reply: Reply) -> None:
                error = {"message": f"wire model error {reply.status}", "type": "server_error"}
                self._json(reply.status, {"error": error}, reply.headers)

            def _stream(self, reply: Reply, calls: list[Call]) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                self.wfile.flush()
                if model._closing.wait(reply.first_token_after):
                    return self._drop()
                for sent, chunk in enumerate(stream_chunks(reply, calls)):
                    if sent == reply.drop_after:
                        return self._drop()
                    if sent == reply.pause_after and model._closing.wait(reply.pause_seconds):
                        return self._drop()
                    self._send(f"data: {json.dumps(chunk)}\n\n".encode())
                self._send(b"data: [DONE]\n\n")
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

            def _send(self, data: bytes) -> None:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def _drop(self) -> None:
                """Close the connection with no (further) answer: a server that went away."""
                self.close_connection = True
                with contextlib.suppress(OSError):
                    self.connection.shutdown(socket.SHUT_RDWR)

            def log_message(self, *args: object) -> None:
                pass

        return Handler


def _envelope(delta: dict | None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {
        "id": "chatcmpl-wire",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": MODEL_NAME,
        "choices": choices,
        **extra,
    }


_USAGE = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}


def _pieces(text: str, count: int) -> list[str]:
    size = max(1, -(-len(text) // count))
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _call_chunks(index: int, call: Call, shape: str) -> Iterator[dict[str, Any]]:
    """The `tool_calls` delta items of one call, streamed in `shape`."""
    head: dict[str, Any] = {"index": index}
    if shape in ("openai", "whole", "repeated", "no_index"):
        head["id"] = call.id
    elif shape == "empty_id":
        head["id"] = ""
    head["type"] = "function"
    if shape == "no_index":
        del head["index"]
    if shape == "whole":
        yield {**head, "function": {"name": call.name, "arguments": call.arguments}}
        return
    pieces = _pieces(call.arguments, ARGUMENT_PIECES)
    if shape == "repeated":
        for piece in pieces:
            yield {**head, "function": {"name": call.name, "arguments": piece}}
        return
    yield {**head, "function": {"name": call.name, "arguments": ""}}
    for piece in pieces:
        item: dict[str, Any] = {"function": {"arguments": piece}}
        if shape != "no_index":
            item = {"index": index, **item}
        yield item


def stream_chunks(reply: Reply, calls: list[Call]) -> Iterator[dict[str, Any]]:
    """The SSE `data` objects of `reply` (`[DONE]` not included)."""
    if reply.shape not in SHAPES:
        raise ValueError(f"unknown shape {reply.shape!r}")
    if reply.shape == "no_index" and len(calls) > 1:
        raise ValueError("a server sends calls without an index only one at a time")
    role = {"role": "assistant"}
    if reply.role_chunk:
        yield _envelope({**role, "content": ""})
        role = {}
    for word in re.findall(r"\s*\S+\s*", reply.text):
        yield _envelope({**role, "content": word})
        role = {}
    for index, call in enumerate(calls):
        for item in _call_chunks(index, call, reply.shape):
            yield _envelope({**role, "tool_calls": [item]})
            role = {}
    yield _envelope({}, "tool_calls" if calls else "stop")
    for _ in range(reply.usage_chunks):
        yield _envelope(None, usage=_USAGE)


def completion(reply: Reply, calls: list[Call]) -> dict[str, Any]:
    """The unstreamed JSON body of `reply` (an id as its shape sends one: none for "no_id",
    empty for "empty_id")."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if calls:
        message["tool_calls"] = []
        for call in calls:
            item: dict[str, Any] = {
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            if reply.shape != "no_id":
                item["id"] = "" if reply.shape == "empty_id" else call.id
            message["tool_calls"].append(item)
    return {
        "id": "chatcmpl-wire",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": MODEL_NAME,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if calls else "stop",
            }
        ],
        "usage": _USAGE,
    }
