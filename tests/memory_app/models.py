"""Chat models for runtime tests: the scripted model recording what it was shown, the
replies a test scripts for it, and a real HTTP model server (`WireModel`)."""

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field

from memory_app.llm import ScriptedChatModel


class RecordingModel(ScriptedChatModel):
    """The scripted model, recording what each call was shown; `before_step(n)` runs first and
    `replies` (AIMessages) answer before the script does."""

    calls: list = Field(default_factory=list)
    replies: list = Field(default_factory=list)
    before_step: object = None

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        self.calls.append({"messages": list(messages), "tools": list(self.bound_tools)})
        if self.before_step:
            self.before_step(len(self.calls))
        if self.replies:
            return ChatResult(generations=[ChatGeneration(message=self.replies.pop(0))])
        return super()._generate(messages, stop, run_manager, **kwargs)

    def system_prompt(self, step: int = 0) -> str:
        return self.calls[step]["messages"][0].text

    def tool_names(self, step: int = 0) -> list[str]:
        return self.calls[step]["tools"]


def tool_reply(*calls: tuple) -> AIMessage:
    """A model reply asking for tool calls `(id, name, args)`."""
    return AIMessage(content="", tool_calls=[{"id": i, "name": n, "args": a} for i, n, a in calls])


class WireModel:
    """A real HTTP/1.1 server speaking the chat-completions wire format, keeping connections
    open between requests (as hosted APIs and llama.cpp do). `script(n, body)` answers the
    n-th request (from 1): `{"text": str}`, `{"tool_calls": [(id, name, args)]}` or
    `{"status": int}`; it may act first (signal the test, wait on `release`). Default: the
    text `reply`. A client that streams gets SSE."""

    def __init__(self, reply: str = "hello from the wire", script=None):
        self.script = script or (lambda n, body: {"text": reply})
        self.requests = 0
        self.thinking = threading.Event()
        self.release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests += 1
                answer = server.script(server.requests, body)
                status = answer.get("status", 200)
                if status != 200:
                    payload, kind = b'{"error": {"message": "failed"}}', "application/json"
                elif body.get("stream"):
                    payload, kind = _sse(answer), "text/event-stream"
                else:
                    payload, kind = _completion(answer), "application/json"
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def think(self, timeout: float = 20) -> None:
        """In `script`: say the model is thinking, then wait until released (or `timeout`)."""
        self.thinking.set()
        self.release.wait(timeout)

    def __enter__(self):
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def _wire_calls(answer: dict) -> list[dict]:
    return [
        {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
        for i, n, a in answer.get("tool_calls", ())
    ]


def _completion(answer: dict) -> bytes:
    message = {"role": "assistant", "content": answer.get("text")}
    if answer.get("tool_calls"):
        message["tool_calls"] = _wire_calls(answer)
    finish = "tool_calls" if answer.get("tool_calls") else "stop"
    choice = {"index": 0, "message": message, "finish_reason": finish}
    body = {"id": "x", "object": "chat.completion", "created": 0, "model": "m"}
    return json.dumps({**body, "choices": [choice]}).encode()


def _sse(answer: dict) -> bytes:
    def chunk(delta: dict, finish: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        body = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m"}
        return f"data: {json.dumps({**body, 'choices': [choice]})}\n\n"

    frames = [chunk({"role": "assistant", "content": ""})]
    text = answer.get("text") or ""
    frames += [chunk({"content": word}) for word in re.findall(r"\s*\S+\s*", text)]
    calls = _wire_calls(answer)
    frames += [chunk({"tool_calls": [{"index": i, **call}]}) for i, call in enumerate(calls)]
    frames += [chunk({}, "tool_calls" if calls else "stop"), "data: [DONE]\n\n"]
    return "".join(frames).encode()
