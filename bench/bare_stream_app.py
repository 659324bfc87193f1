"""The floor of a streamed chat: LangChain's `create_agent` with `ChatOpenAI`, served as a bare
ASGI application, no Django, no database, no memory. bench/chat_turn.py's `streams` section
runs it beside the site, in the same kind of worker (gunicorn.conf.py, one uvicorn worker)
against the same wire model, so the site's worker CPU per chat reads as a multiple of what
the stack it is built on costs alone.

`POST /api/chat/stream/` with `{"message": ...}` streams Server-Sent Events as the site's
endpoint does (`run`, `token`s, `tool_result`s, `done` with the turn's `tool_calls`). Its one
tool has `remember_memory`'s name and arguments, and answers as the site's does when a fact
is added ("Saved to long-term memory."), so the wire model's script makes the same two model
calls. The agent is compiled once per process, as the site's graphs are. `GET /healthz`
answers 200 once the module is loaded (the bench waits for it).

Run: `gunicorn -c gunicorn.conf.py --pythonpath bench bare_stream_app:application`, with
`LLM_BASE_URL` set.
"""

import json
import os
from collections.abc import AsyncIterator
from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import AIMessageChunk, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

# What the site's remember_memory answers when it adds a fact.
SAVED = "Saved to long-term memory."


@tool
def remember_memory(content: str, replaces: str | None = None) -> str:
    """Remember a fact about the user (`replaces`: the remembered text it corrects)."""
    return SAVED


AGENT = create_agent(
    model=ChatOpenAI(
        base_url=os.environ["LLM_BASE_URL"],
        api_key=os.environ.get("LLM_API_KEY") or "unused",
        model=os.environ.get("LLM_MODEL") or "wire-model",
        streaming=True,
    ),
    tools=[remember_memory],
    system_prompt="You are a helpful assistant.",
)


async def _body(receive: Any) -> bytes:
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


async def _lifespan(receive: Any, send: Any) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def agent_frames(message: str) -> AsyncIterator[bytes]:
    """The chat's Server-Sent Events as the site's endpoint sends them, one frame each: `run`,
    the model's `token`s, each `tool_result`, `done` with the turn's `tool_calls`."""

    def frame(payload: dict) -> bytes:
        return f"event: {payload['event']}\ndata: {json.dumps(payload)}\n\n".encode()

    yield frame({"event": "run"})
    calls = []
    stream = AGENT.astream({"messages": [HumanMessage(message)]}, stream_mode="messages")
    async for chunk, _metadata in stream:
        if isinstance(chunk, AIMessageChunk) and chunk.text:
            yield frame({"event": "token", "text": chunk.text})
        elif isinstance(chunk, ToolMessage):
            calls.append({"name": chunk.name, "status": "success"})
            yield frame({"event": "tool_result", "name": chunk.name})
    yield frame({"event": "done", "status": "succeeded", "tool_calls": calls})


async def application(scope: dict, receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        await _lifespan(receive, send)
        return
    if scope["path"] == "/healthz":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})
        return
    message = json.loads(await _body(receive))["message"]
    headers = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    async for frame in agent_frames(message):
        await send({"type": "http.response.body", "body": frame, "more_body": True})
    await send({"type": "http.response.body", "body": b""})
