"""The async HTTP client of `CompatibleChatOpenAI`: one aiohttp client (and connection pool)
per event loop, each closed on its own loop.
"""

import asyncio
import atexit
import contextlib
import os
import threading
import weakref
from collections.abc import AsyncIterator
from typing import Any, NoReturn

import aiohttp
import httpx2
from openai import DefaultAioHttpClient, DefaultAsyncHttpxClient


class PerLoopAsyncHttpClient(DefaultAsyncHttpxClient):
    """The async HTTP client of `CompatibleChatOpenAI`: one real client (and so one connection
    pool) per event loop, so a connection opened on one loop is never used from another.

    langchain-openai otherwise shares one cached async client per endpoint in the process,
    whose pooled connections belong to the loop that opened them: the next `asyncio.run(...)`
    calling the same endpoint fails with "Event loop is closed". The Chat service runs every
    turn on the process's one loop; a team's own agent may run on any loop (`aagent_run` in a
    fresh `asyncio.run`).

    Each real client is the OpenAI SDK's `DefaultAioHttpClient` (its `aiohttp` extra):
    aiohttp reads responses with its C parser and keeps its pool without probing every idle
    connection's socket at each request, as httpx's pure-Python transport does; a streamed
    request costs the loop less than half the CPU (bench/chat_turn.py `streams`). An aiohttp
    session must be closed on its own loop, so each is closed when its loop shuts its async
    generators down (`asyncio.run` and uvicorn do on their way out), or, for a loop still
    running when the interpreter exits (the runtime's process loop), at exit. The clients of
    loops closed otherwise are dropped at the next request; a forked child never uses or
    closes its parent's (their sockets are the parent's).

    The SDK's adapter reports every aiohttp connection error as a connect *timeout*; `send`
    gives back httpx's own kinds, so a refused or dropped connection reads as one
    (`APIConnectionError`), as it did over httpx. aiohttp has no write timeout: a request is
    bounded until its response begins by its connect, write and read timeouts together.
    """

    def __init__(self) -> None:
        super().__init__()
        self._by_loop: dict[asyncio.AbstractEventLoop, _LoopClient] = {}
        self._inherited: list[_LoopClient] = []  # a parent process's, kept unused and open
        self._by_loop_lock = threading.Lock()
        _CLIENTS.add(self)

    def _for_this_loop(self) -> "_LoopClient":
        loop = asyncio.get_running_loop()
        with self._by_loop_lock:
            for other, entry in list(self._by_loop.items()):
                if not entry.ours():
                    self._inherited.append(self._by_loop.pop(other))
                elif other.is_closed() or (other is loop and entry.client.is_closed):
                    del self._by_loop[other]
            if loop not in self._by_loop:
                self._by_loop[loop] = _LoopClient(DefaultAioHttpClient())
            return self._by_loop[loop]

    async def send(self, request: Any, **kwargs: Any) -> Any:
        entry = self._for_this_loop()
        await entry.close_with_loop()
        stream = kwargs.pop("stream", False)
        bound = _whole_request_bound(request)
        try:
            async with asyncio.timeout(bound):  # until the response begins
                response = await entry.client.send(request, stream=True, **kwargs)
        except TimeoutError as exc:
            if bound is None:
                raise
            raise httpx2.TimeoutException(
                f"no response within {bound:g} s (connect, write and read bounds together)",
                request=request,
            ) from exc
        except (httpx2.ConnectTimeout, aiohttp.ClientResponseError) as exc:
            _raise_as_httpx(exc, request)
        if not stream:  # read as httpx's own `send` reads an unstreamed response
            try:
                await response.aread()
            except BaseException:
                await response.aclose()
                raise
        return response

    async def aclose(self) -> None:
        """Close this loop's client (the others belong to their own loops)."""
        loop = asyncio.get_running_loop()
        with self._by_loop_lock:
            entry = self._by_loop.pop(loop, None)
        if entry is not None:
            await entry.aclose()

    def close_running(self, timeout: float = 5.0) -> None:
        """Close the client of every loop of this process still running in another thread
        (at interpreter exit the process loop's daemon thread still runs)."""
        with self._by_loop_lock:
            running = [
                (loop, entry)
                for loop, entry in self._by_loop.items()
                if entry.ours() and loop.is_running()
            ]
            for loop, _ in running:
                del self._by_loop[loop]
        for loop, entry in running:
            # The loop stopped meanwhile, or is stuck: nothing more to do at exit.
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(entry.aclose(), loop).result(timeout)


def _raise_as_httpx(exc: Exception, request: Any) -> NoReturn:
    """Raise the httpx error an aiohttp failure is: the SDK's adapter maps every aiohttp
    connection error to `ConnectTimeout` (only a real timeout stays one), and lets a response
    aiohttp could not parse escape as aiohttp's own."""
    cause = exc.__cause__ if isinstance(exc, httpx2.ConnectTimeout) else exc
    if isinstance(cause, aiohttp.ServerDisconnectedError | aiohttp.ClientResponseError):
        raise httpx2.RemoteProtocolError(str(cause), request=request) from cause
    if isinstance(cause, aiohttp.ClientConnectionError) and not isinstance(cause, TimeoutError):
        raise httpx2.ConnectError(str(cause), request=request) from cause
    raise exc


def _whole_request_bound(request: Any) -> float | None:
    """Seconds a request may take until its response begins: its connect, write and read
    timeouts together (None when one of them is unbounded). aiohttp bounds the connection and
    each read but not the writing of the body, which httpx bounds by the write timeout."""
    timeout = request.extensions.get("timeout", {})
    parts = [timeout.get(name) for name in ("connect", "write", "read")]
    return None if None in parts else sum(parts)


class _LoopClient:
    """One loop's client, made in process `pid`, and the async generator that closes it when
    its loop shuts its async generators down (`loop.shutdown_asyncgens()`, which finalises
    every generator started on the loop and not finished)."""

    def __init__(self, client: DefaultAioHttpClient) -> None:
        self.client = client
        self.pid = os.getpid()
        self._closer: AsyncIterator[None] | None = None

    def ours(self) -> bool:
        """Made in this process (not inherited across a fork)."""
        return self.pid == os.getpid()

    async def close_with_loop(self) -> None:
        """Register the closing generator with the running loop (once: its first step)."""
        if self._closer is None:
            self._closer = self._close_at_shutdown()
            await anext(self._closer)

    async def _close_at_shutdown(self) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await self.client.aclose()

    async def aclose(self) -> None:
        if self._closer is not None:
            await self._closer.aclose()  # its finally closes the client
        else:
            await self.client.aclose()


_CLIENTS: "weakref.WeakSet[PerLoopAsyncHttpClient]" = weakref.WeakSet()


@atexit.register
def _close_clients_at_exit() -> None:
    for client in list(_CLIENTS):
        client.close_running()


# One for the process: each loop's connections are kept alive across the turns on that loop.
ASYNC_HTTP_CLIENT = PerLoopAsyncHttpClient()
