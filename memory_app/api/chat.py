"""The chat operations: one turn as JSON (`/chat/`) and the same turn as Server-Sent Events
(`/chat/stream/`), with the plumbing that frames the events and closes a stream its client left.

Its own module because a stream is the API's one long-lived answer: under ASGI it runs on the
server's loop and must be closed there when the client goes away, which no other operation
has to care about. A turn's refusal is told from the Chat service's one table
(`CHAT_HTTP_ERRORS`).
"""

import json
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, StreamingHttpResponse
from ninja import Router, Status

from conversations.utils.connections import release_connection
from memory_app.api.schemas import UNSAFE, ChatIn, ChatOut, Error
from memory_app.api_edge import STREAM_CHAT_URL_NAME
from memory_app.runtime import (
    INTERNAL_ERROR,
    ChatError,
    ChatEvent,
    astream_chat,
    chat,
    http_error,
    stream_chat,
)

router = Router()


def _refusal(exc: ChatError) -> Status:
    """The JSON answer to a turn's refusal (`CHAT_HTTP_ERRORS`); a refusal the table does not
    name is the server's fault and is raised on."""
    status, text = http_error(exc)
    if (status, text) == INTERNAL_ERROR:
        raise exc
    return Status(status, {"error": text})  # already in the request's language


@router.post(
    "/chat/", response={200: ChatOut, 404: Error, 409: Error, 502: Error, **UNSAFE}, tags=["chat"]
)
def post_chat(request: HttpRequest, body: ChatIn) -> Any:
    """One turn as the session's user; a new thread unless `thread_id` names one of theirs.
    With `resume` instead of `message`: your decision about the memory write pending in
    `thread_id` (409 when none is, or when an `approve`/`edit` cannot be carried out now: it
    stays pending; 400 for an `edit` without `content`)."""
    resume = body.resume.model_dump(exclude_unset=True) if body.resume is not None else None
    try:
        return chat(
            user_id=request.auth.pk, message=body.message, thread_id=body.thread_id, resume=resume
        )
    except ChatError as exc:
        return _refusal(exc)


@router.post(
    "/chat/stream/",
    url_name=STREAM_CHAT_URL_NAME,
    response={200: None, 404: Error, 409: Error, **UNSAFE},
    tags=["chat"],
    openapi_extra={
        "responses": {200: {"description": "the turn as Server-Sent Events (text/event-stream)"}}
    },
)
async def post_chat_stream(request: HttpRequest, body: ChatIn) -> Any:
    """`/chat/` as Server-Sent Events while the turn happens: `run`, then `token`, `tool_call`
    and `tool_result` events, last one `done` (the turn, as `/chat/` answers it) or `error`
    (`error`, `status_code`). With `resume` instead of `message`, the decision's turn (409 when
    no write is pending). A refusal before the run starts is the usual JSON error; a client
    that disconnects cancels the turn.

    Under ASGI the events come from `astream_chat` on the server's loop; under WSGI (the
    development server) from `stream_chat`, since Django would buffer an async stream there."""
    turn = {
        "user_id": request.auth.pk,
        "message": body.message,
        "thread_id": body.thread_id,
        "resume": body.resume.model_dump(exclude_unset=True) if body.resume is not None else None,
    }
    # The session and the user are read; the request's own thread would otherwise keep its
    # pooled connection until the stream ends, one per open stream.
    await sync_to_async(release_connection)()
    try:
        if isinstance(request, ASGIRequest):
            events: Any = astream_chat(**turn)
            stream: Any = _ClosingStream(_sse_async(await anext(events), events))
        else:
            events = stream_chat(**turn)
            # Thread-sensitive: the WSGI request's own thread, which then reads the rest.
            stream = _sse(await sync_to_async(next)(events), events)
    except ChatError as exc:
        return _refusal(exc)
    response = StreamingHttpResponse(stream, content_type="text/event-stream")
    response["X-Accel-Buffering"] = "no"  # a proxy in front must not buffer the stream
    return response


def _sse_frame(event: ChatEvent) -> bytes:
    """One Server-Sent Event: its name, the event as one line of JSON, a blank line."""
    return f"event: {event['event']}\ndata: {json.dumps(event, ensure_ascii=False)}\n\n".encode()


def _sse(first: ChatEvent, events: Iterator[ChatEvent]) -> Iterator[bytes]:
    try:
        yield _sse_frame(first)
        for event in events:
            yield _sse_frame(event)
    finally:
        events.close()  # the client went away: the turn is cancelled


async def _sse_async(first: ChatEvent, events: AsyncIterator[ChatEvent]) -> AsyncIterator[bytes]:
    try:
        yield _sse_frame(first)
        async for event in events:
            yield _sse_frame(event)
    finally:
        await events.aclose()  # the client went away: the turn is cancelled


class _ClosingStream:
    """An async stream that Django closes with its response. Django's ASGI handler closes the
    response after sending it, a client's disconnect included, but it cannot close an async
    generator that was waiting to send when the client went away: that one would be left to
    the garbage collector, and its turn with it."""

    def __init__(self, frames: AsyncGenerator[bytes, None]) -> None:
        self.frames = frames

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self.frames

    def close(self) -> None:  # called on a thread by Django: the generator closes on its loop
        if self.frames.ag_frame is None:  # it ran to its end (or was closed): nothing to close
            return
        async_to_sync(self._aclose)()

    async def _aclose(self) -> None:
        await self.frames.aclose()
