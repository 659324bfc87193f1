"""`StreamAdmission`: under a burst of streamed chats, the first to arrive reach the model first.

An ASGI worker that receives many `POST .../api/chat/stream/` at once starts them all. Each
one's opening work (Django's middleware chain, the session and the user, the run opened in the
database) then shares the worker's one interpreter with every other, a slice at a time, so
each stream sees its `run` event, and its model call starts, only once nearly all of them are
open: with 64 at once on one worker, about a second late for the median one. Admitted a few at
a time in arrival order, each opening runs nearly alone: the first streams reach the model at
once and the median one in about half the time, and the last one no later than before (the
work is the same). Fewer openings at once also means fewer threads contending for the
interpreter, so the same work costs a little less CPU.

Only the opening waits: a stream's response starts once its run is open (the API reads the
turn's first event, `run`, before it answers), and its place is given up then, so the model's
wait and the tokens that follow are never held up. A request's body is read before it waits
(a client that sends it slowly holds up only itself), and an opening that has not started its
response within `OPENING_HOLD_SECONDS` (a database that does not answer) gives its place up
then, so the queue behind it moves on. Every other request, the non-streamed `/api/chat/`
included (its response starts only when its turn is over), passes straight through.
"""

import asyncio
import collections
import weakref
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from django.conf import settings
from django.urls import NoReverseMatch, reverse

from memory_app.api_edge import API_NAMESPACE, STREAM_CHAT_URL_NAME

__all__ = [
    "StreamAdmission",
    "STREAM_OPENINGS_AT_ONCE",
    "OPENING_HOLD_SECONDS",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApplication = Callable[[Scope, Receive, Send], Awaitable[None]]

# How many streamed chats one event loop opens at once by default: two, so that one opening's
# database round trip overlaps another's work. (1, 2 and 4 measured alike on two cores; with
# no bound, the median first token of 64 chats at once came 0.5-0.9 s later: the figures are
# in docs/performance.md.)
STREAM_OPENINGS_AT_ONCE = 2
# How long an admitted stream may take to start its response before its place is given up
# anyway (an opening takes milliseconds; this bounds the wait behind one that hangs).
OPENING_HOLD_SECONDS = 1.0
# The URL of the streamed chat endpoint, by the name the API declares for it.
_STREAM_URL_NAME = f"{API_NAMESPACE}:{STREAM_CHAT_URL_NAME}"


async def _request_body(receive: Receive) -> tuple[collections.deque[Message], bool]:
    """The request's messages up to its last body chunk (or a disconnect), read now, to be
    handed to the application in order, and whether that was all of the body. Reading stops
    past Django's `DATA_UPLOAD_MAX_MEMORY_SIZE` (the API reads JSON bodies of a few
    kilobytes; Django refuses a larger one all the same), so no body is held in memory here
    beyond what Django itself would read."""
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    messages: collections.deque[Message] = collections.deque()
    size = 0
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request" or not message.get("more_body"):
            return messages, True
        size += len(message.get("body", b""))
        if limit is not None and size > limit:
            return messages, False


class StreamAdmission:
    """An ASGI application: `application`, with at most `limit` streamed chat requests of each
    event loop between their arrival (their body read) and the start of their response at
    once; the others wait there, in arrival order. A request that ends (or fails) before its
    response starts gives its place up then, one that has not started it within
    `OPENING_HOLD_SECONDS` gives it up then too, and one cancelled while it waits never takes
    one.

    The streamed chat endpoint is found by reversing its URL name with the root URLconf, on
    the first request (under any prefix a host includes `memory_app.urls` at); where the URLs
    do not include the API, every request passes straight through.
    """

    def __init__(self, application: ASGIApplication, *, limit: int = STREAM_OPENINGS_AT_ONCE):
        if limit < 1:
            raise ValueError(f"limit must be at least 1, not {limit!r}")
        self.application = application
        self.limit = limit
        self._gates: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )
        self._stream_path: str | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self._waits(scope):
            await self.application(scope, receive, send)
            return
        # The body first, before a place is taken: a client that sends it slowly, or never,
        # holds up only its own request.
        received, whole = await _request_body(receive)

        async def replaying() -> Message:
            return received.popleft() if received else await receive()

        if not whole:  # too large to be a chat: Django refuses it, without waiting here
            await self.application(scope, replaying, send)
            return
        gate = self._gate()
        await gate.acquire()
        held = True

        def give_up_place() -> None:
            nonlocal held
            if held:
                held = False
                gate.release()

        # An opening that takes longer than this (a database that does not answer, a pool
        # that is exhausted) gives its place up anyway: the queue behind it moves on.
        timer = asyncio.get_running_loop().call_later(OPENING_HOLD_SECONDS, give_up_place)

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                give_up_place()
            await send(message)

        try:
            await self.application(scope, replaying, sending)
        finally:
            timer.cancel()
            give_up_place()

    def _waits(self, scope: Scope) -> bool:
        """Whether the request is a streamed chat: a POST to the endpoint's path (with or
        without its trailing slash, which the API's edge accepts), below the root path the
        server mounts the site under, if any."""
        if scope["type"] != "http" or scope.get("method") != "POST":
            return False
        if self._stream_path is None:
            try:
                self._stream_path = reverse(_STREAM_URL_NAME).rstrip("/")
            except NoReverseMatch:
                self._stream_path = ""
        path, root = scope["path"], scope.get("root_path", "")
        if root and path.startswith(root):  # ASGI servers include it in `path`, most of them
            path = path[len(root) :]
        return bool(self._stream_path) and path.rstrip("/") == self._stream_path

    def _gate(self) -> asyncio.Semaphore:
        """The running loop's semaphore (an asyncio one belongs to one loop; a test, or a
        server run twice in one process, may serve from several in turn)."""
        loop = asyncio.get_running_loop()
        gate = self._gates.get(loop)
        if gate is None:
            gate = self._gates[loop] = asyncio.Semaphore(self.limit)
        return gate
