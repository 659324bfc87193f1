"""Streamed turns: `astream_chat` (an async iterator) and `stream_chat` (an iterator) give a
chat turn as `ChatEvent` dicts while the agent produces it, for a UI that shows the reply as
the model writes it.

The events, in order: `{"event": "run", "thread_id", "run_id"}` once the run is open; then
`{"event": "token", "text"}` for model text as it is generated (the token texts of one model
call concatenate to the text that call stored), `{"event": "tool_call", "id", "name"}` when
the model asks for a tool and `{"event": "tool_result", "id", "name", "status"}` once it ran;
last, exactly one `{"event": "done", "status", "reply", "tool_calls", "approval"}` (the
`ChatTurn`) or `{"event": "error", "error", "status_code"}` (what `/api/chat/` would answer).
A refusal before the run opens (bad message, unknown thread, database down) is raised by the
first step, as `chat` raises it; every later failure is the `error` event.

A consumer that stops reading (closes the iterator, or a client that disconnects) cancels the
turn: the run ends `cancelled`, nothing the agent produced is stored. Both are adapters over
the one turn (`aturn`) on the process's event loop.
"""

from collections.abc import AsyncIterator, Iterator
from contextlib import aclosing
from typing import Any

from langchain_core.language_models import BaseChatModel

from memory_app.runtime.concurrency.relay import iterate_sync, relay
from memory_app.runtime.errors import http_error
from memory_app.runtime.service import ChatRequest, ChatTurn, aturn
from memory_app.runtime.turns import CANCELLED_BY_READER, ChatEvent


def error_event(exc: BaseException) -> ChatEvent:
    """The `error` event that ends a stream whose turn failed with `exc`: what `/api/chat/`
    would answer (`CHAT_HTTP_ERRORS`)."""
    status_code, message = http_error(exc)
    return {"event": "error", "error": message, "status_code": status_code}


def done_event(turn: ChatTurn) -> ChatEvent:
    """The `done` event: the `ChatTurn`'s fields (its thread and run were in the `run` event);
    `approval` is the write an `interrupted` turn waits on, null otherwise."""
    return {
        "event": "done",
        "status": str(turn.status),
        "reply": turn.reply,
        "tool_calls": turn.tool_calls,
        "approval": turn.approval,
    }


async def _events(request: ChatRequest) -> AsyncIterator[ChatEvent]:
    """The turn's events on the process's loop: `aturn`'s, its `ChatTurn` as `done`, a
    failure after the open as `error`."""
    opened = False
    async with aclosing(aturn(request, events=True, reason=CANCELLED_BY_READER)) as steps:
        try:
            async for step in steps:
                opened = True
                yield done_event(step) if isinstance(step, ChatTurn) else step
        except Exception as exc:
            if not opened:
                raise
            yield error_event(exc)


async def astream_chat(
    *,
    user_id: int,
    message: str | None = None,
    thread_id: str | None = None,
    resume: dict[str, Any] | None = None,
    model: BaseChatModel | None = None,
) -> AsyncIterator[ChatEvent]:
    """`chat` as an async iterator of `ChatEvent`s (same arguments, same turn), from any
    event loop: the turn runs on the process's loop; no database call on an event loop.

    Raises, from its first step, what `chat` raises before the run opens (`ChatInputError`,
    `ChatError`, `ChatThreadNotFound`, `django.db.DatabaseError`).
    """
    request = ChatRequest(
        user_id=user_id, message=message, thread_id=thread_id, resume=resume, model=model
    )
    async with aclosing(relay(_events(request), reason=CANCELLED_BY_READER)) as events:
        async for event in events:
            yield event


def stream_chat(
    *,
    user_id: int,
    message: str | None = None,
    thread_id: str | None = None,
    resume: dict[str, Any] | None = None,
    model: BaseChatModel | None = None,
) -> Iterator[ChatEvent]:
    """`astream_chat` for sync code: the same events, from an iterator, one turn step per
    event asked for (on the process's loop; the turn's database work on this thread), so a
    consumer that stops reading stops the turn there. (The agent's own sync `stream` cannot
    give tokens: LangGraph 1.2's sync `stream` in `messages` or `custom` mode deadlocks at
    `max_concurrency=1`, its stream waiter taking the pool's only slot.)

    Raises what `astream_chat` raises.
    """
    request = ChatRequest(
        user_id=user_id, message=message, thread_id=thread_id, resume=resume, model=model
    )
    yield from iterate_sync(_events(request))
