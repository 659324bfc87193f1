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
turn: the run ends `cancelled`, nothing the agent produced is stored.
"""

import asyncio
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
from contextlib import aclosing
from typing import Any, TypeVar

from django.db import DatabaseError
from langchain_core.language_models import BaseChatModel

from conversations import checkpoints
from conversations.utils.connections import in_worker_thread
from memory_app.runtime.errors import ChatModelUnavailable, ChatRunLost
from memory_app.runtime.service import ChatRequest, ChatTurn, chat_turn
from memory_app.runtime.turns import (
    CANCELLED_BY_READER,
    ChatEvent,
    TurnOutcome,
    aopen,
    astream_agent,
    cancel_turn,
    close_turn,
)

T = TypeVar("T")

# A failure after the run opened → (HTTP status, message): what `/api/chat/` answers for it.
_FAILURES: tuple[tuple[type[BaseException], int, str], ...] = (
    (ChatModelUnavailable, 502, "the model is unavailable, try again"),
    (ChatRunLost, 503, "the run was interrupted, try again"),
    (DatabaseError, 503, "the service is unavailable, try again"),
)


def error_event(exc: BaseException) -> ChatEvent:
    """The `error` event that ends a stream whose turn failed with `exc`."""
    for kind, status_code, message in _FAILURES:
        if isinstance(exc, kind):
            return {"event": "error", "error": message, "status_code": status_code}
    return {"event": "error", "error": "internal error", "status_code": 500}


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


async def astream_chat(
    *,
    user_id: int,
    message: str | None = None,
    thread_id: str | None = None,
    resume: dict[str, Any] | None = None,
    model: BaseChatModel | None = None,
) -> AsyncIterator[ChatEvent]:
    """`chat` as an async iterator of `ChatEvent`s (same arguments, same turn); no database
    call on the event loop.

    Raises, from its first step, what `chat` raises before the run opens (`ChatInputError`,
    `ChatError`, `ChatThreadNotFound`, `django.db.DatabaseError`).
    """
    request = ChatRequest(
        user_id=user_id,
        message=message,
        thread_id=thread_id,
        resume=resume,
        model=model,
        checkpointer=await checkpoints.async_checkpointer(),
    )
    turn = await aopen(in_worker_thread(request.open)(), reason=CANCELLED_BY_READER)
    outcome = TurnOutcome()
    try:
        yield {
            "event": "run",
            "thread_id": turn.handle.conversation.thread_id,
            "run_id": turn.handle.run_id,
        }
        async with aclosing(astream_agent(turn, prepare=request.prepare)) as steps:
            async for step in steps:
                if isinstance(step, TurnOutcome):
                    outcome = step
                else:
                    yield step
    except (asyncio.CancelledError, GeneratorExit):
        await in_worker_thread(cancel_turn)(turn, reason=CANCELLED_BY_READER)
        raise
    try:
        tool_calls = await in_worker_thread(close_turn)(turn, outcome)
    except Exception as exc:  # the turn failed: the stream says so, as its last event
        yield error_event(exc)
        return
    yield done_event(chat_turn(turn, outcome, tool_calls))


def stream_chat(
    *,
    user_id: int,
    message: str | None = None,
    thread_id: str | None = None,
    resume: dict[str, Any] | None = None,
    model: BaseChatModel | None = None,
) -> Iterator[ChatEvent]:
    """`astream_chat` for sync code: the same events, from an iterator.

    It drives `astream_chat` on a private event loop in a helper thread, one event per step
    asked for, so a consumer that stops reading stops the turn there. (The agent's own sync
    `stream` cannot give tokens: LangGraph 1.2's sync `stream` in `messages` or `custom` mode
    deadlocks at `max_concurrency=1`, its stream waiter taking the pool's only slot.)

    Raises what `astream_chat` raises.
    """
    loop = asyncio.new_event_loop()
    helper = threading.Thread(target=loop.run_forever, name="yuxi-stream-chat", daemon=True)
    helper.start()

    def on_loop(step: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(step, loop).result()

    events = astream_chat(
        user_id=user_id, message=message, thread_id=thread_id, resume=resume, model=model
    )
    try:
        while True:
            try:
                event = on_loop(_next(events))
            except StopAsyncIteration:
                return
            yield event
    finally:
        try:
            on_loop(events.aclose())
            on_loop(checkpoints.close_async_checkpointer())  # its pool belongs to this loop
            on_loop(loop.shutdown_asyncgens())
            on_loop(loop.shutdown_default_executor())
        finally:
            loop.call_soon_threadsafe(loop.stop)
            helper.join()
            loop.close()


async def _next(events: AsyncIterator[ChatEvent]) -> ChatEvent:
    return await anext(events)
