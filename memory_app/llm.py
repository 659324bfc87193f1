"""Chat models: the configured one, and a deterministic scripted one for tests and the demo.

Everything else (messages, tool binding, the wire format, retries) is LangChain's.
"""

import asyncio
import atexit
import contextlib
import json
import os
import re
import threading
import weakref
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any, NoReturn, Self
from urllib.parse import urlsplit

import aiohttp
import httpx2
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    ToolMessage,
)
from langchain_core.messages.tool import ToolCallChunk, tool_call_chunk
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langchain_openai import ChatOpenAI
from openai import (
    APITimeoutError,
    AsyncStream,
    DefaultAioHttpClient,
    DefaultAsyncHttpxClient,
    Stream,
)
from pydantic import Field, PrivateAttr, model_validator

from memory_app.conf import DEFAULTS, setting
from memory_app.middleware import injected_memory
from memory_app.tool_names import (
    REMEMBER_MEMORY_TOOL,
    SEARCH_THREAD_MESSAGES_TOOL,
    SUBAGENT_TOOL_NAME,
)

__all__ = [
    "CompatibleChatOpenAI",
    "PerLoopAsyncHttpClient",
    "ScriptedChatModel",
    "chat_model_from_settings",
    "model_endpoint",
    "model_settings",
]


def chat_model_from_settings() -> BaseChatModel:
    """`CompatibleChatOpenAI` for the OpenAI-compatible endpoint at `LLM_BASE_URL`, else the
    scripted model. Each request is bounded by `LLM_TIMEOUT_SECONDS` and retried at most
    `LLM_MAX_RETRIES` times; a streamed reply (async turns stream) may also go silent for at
    most `LLM_TIMEOUT_SECONDS` between chunks (its `silence_timeout`; langchain-openai's
    default would be 120 s)."""
    if setting("LLM_BASE_URL"):
        return CompatibleChatOpenAI(
            base_url=setting("LLM_BASE_URL"),
            # The client refuses to start without a key; a keyless local endpoint ignores it.
            api_key=setting("LLM_API_KEY") or "unused",
            model=setting("LLM_MODEL"),
            timeout=setting("LLM_TIMEOUT_SECONDS"),
            stream_chunk_timeout=setting("LLM_TIMEOUT_SECONDS"),
            max_retries=setting("LLM_MAX_RETRIES"),
        )
    return ScriptedChatModel()


def model_settings() -> tuple[tuple[str, Any], ...]:
    """Every setting `chat_model_from_settings` reads (each `LLM_*`), with its value now: a
    model built from settings is the same model while these are the same."""
    return tuple((name, setting(name)) for name in sorted(DEFAULTS) if name.startswith("LLM_"))


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
_ASYNC_HTTP_CLIENT = PerLoopAsyncHttpClient()


# `create`'s request options, as the OpenAI SDK's own `create` sets them from its arguments.
_REQUEST_OPTIONS = {
    "extra_headers": "headers",
    "extra_query": "params",
    "extra_body": "extra_json",
    "timeout": "timeout",
}


def _post_arguments(payload: dict[str, Any]) -> dict[str, Any]:
    """The client's `post` arguments for a streamed chat completion of `payload` (what
    langchain-openai passes to `create`): the body as it is, the request options as the SDK's
    `create` builds them (its bearer key included)."""
    body = dict(payload)
    options: dict[str, Any] = {"security": {"bearer_auth": True}}
    for argument, option in _REQUEST_OPTIONS.items():
        value = body.pop(argument, None)
        if value is not None:
            options[option] = value
    return {"path": "/chat/completions", "body": body, "options": options, "cast_to": object}


class _StreamedCompletions:
    """A client's chat completions for `CompatibleChatOpenAI`: a streamed `create` posts the
    body langchain-openai built as it is and hands back each chunk as the JSON the server
    sent, the way langchain-openai reads it anyway.

    The OpenAI SDK's own `create` first walks the whole body against its typed parameters
    (about 1 ms per request with the memory tools offered, a sixth of the process loop's CPU
    under 64 streamed chats) and builds a typed object of every chunk, which langchain-openai
    turns back into a dict: on a JSON body that holds nothing to convert, neither changes
    the request. Unstreamed requests, and everything else, are the SDK's own."""

    def __init__(self, completions: Any, client: Any) -> None:
        self._completions = completions
        self._client = client

    def __getattr__(self, name: str) -> Any:
        return getattr(self._completions, name)

    def create(self, **payload: Any) -> Any:
        if not payload.get("stream"):
            return self._completions.create(**payload)
        return self._client.post(**_post_arguments(payload), stream=True, stream_cls=Stream[object])


class _AsyncStreamedCompletions(_StreamedCompletions):
    """`_StreamedCompletions` for the async client; its streams wait at most `silence`
    seconds for each chunk (`_SilenceBoundStream`)."""

    def __init__(self, completions: Any, client: Any, *, silence: float | None, model: str):
        super().__init__(completions, client)
        self._silence = silence
        self._model = model

    async def create(self, **payload: Any) -> Any:
        if not payload.get("stream"):
            return await self._completions.create(**payload)
        stream = await self._client.post(
            **_post_arguments(payload), stream=True, stream_cls=AsyncStream[object]
        )
        return _SilenceBoundStream(stream, seconds=self._silence, model=self._model)


# The error of a streamed reply that sent no chunk for `silence_timeout` seconds.
SILENT_STREAM = "{model} sent nothing for {seconds:g} s in a streamed reply (after {chunks} chunks)"


class _SilenceBoundStream:
    """An `AsyncStream` whose every chunk is awaited for at most `seconds` (None: unbounded
    but for the HTTP client's read timeout; SSE keep-alive comments do not count), with one
    timer per wait: the bound langchain-openai's `stream_chunk_timeout` sets, over the same
    span (the chunks, once the response has begun), without its `asyncio.wait_for` and the
    task that makes per chunk.

    The HTTP client's read timeout, when it is this bound or longer (from settings both are
    `LLM_TIMEOUT_SECONDS`), can fire a moment before this bound's timer, since aiohttp times a
    read from the last bytes received: the same silence, so the same error."""

    def __init__(self, stream: AsyncStream, *, seconds: float | None, model: str) -> None:
        self._stream = stream
        self._chunks = stream.__aiter__()
        self._seconds = seconds
        self._model = model
        self._received = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    async def __aenter__(self) -> Self:
        await self._stream.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self._stream.__aexit__(*exc_info)

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Any:
        try:
            async with asyncio.timeout(self._seconds):
                chunk = await anext(self._chunks)
        except TimeoutError as exc:
            raise self._silent() from exc
        except APITimeoutError as exc:
            if not self._read_timeout_is_silence():
                raise
            raise self._silent() from exc
        self._received += 1
        return chunk

    def _silent(self) -> TimeoutError:
        return TimeoutError(
            SILENT_STREAM.format(model=self._model, seconds=self._seconds, chunks=self._received)
        )

    def _read_timeout_is_silence(self) -> bool:
        """Whether the stream's HTTP read timeout is at least this bound (then its firing
        means the stream was silent for this bound)."""
        if self._seconds is None:
            return False
        read = self._stream.response.request.extensions.get("timeout", {}).get("read")
        return read is not None and read >= self._seconds


class CompatibleChatOpenAI(ChatOpenAI):
    """`ChatOpenAI` that takes a streamed reply's tool calls as OpenAI-compatible servers send
    them, so a streamed reply gives exactly the calls the same reply unstreamed gives.

    langchain-openai reads the stream chunk by chunk and LangChain merges the chunks of one
    call by `index`, concatenating their names: a server that repeats a call's `id` and name in
    every chunk (llama.cpp's does) would give a call named `remember_memoryremember_memory...`,
    and chunks without an `index` (one call, from some servers) would not merge at all. So
    each chunk is cleaned before it merges: a missing index is the call's position in its
    chunk, and a call's id and name are kept from its first chunk only. A call without a
    usable id (none, or empty) gets a unique one from the run (`UniqueToolCallIds`).

    Its async requests go through `PerLoopAsyncHttpClient`, so it serves any event loop, and
    its streamed requests skip the OpenAI SDK's body transform and chunk objects
    (`_StreamedCompletions`).

    `stream_chunk_timeout` (how long an async streamed reply may send no chunk; SSE keep-alive
    comments do not count) is enforced by its streams (`_SilenceBoundStream`), one timer per
    chunk awaited: langchain-openai's own wraps every chunk in `asyncio.wait_for`, a task per
    chunk, about a sixth of a streamed token's CPU. So the field reads None once the model is
    built; `silence_timeout` holds the bound.
    """

    http_async_client: Any | None = Field(default=_ASYNC_HTTP_CLIENT, exclude=True)
    _silence_timeout: float | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _stream_untransformed(self) -> Self:
        if self.client is not None and not isinstance(self.client, _StreamedCompletions):
            self.client = _StreamedCompletions(self.client, self.root_client)
        if self.stream_chunk_timeout:
            self._silence_timeout, self.stream_chunk_timeout = self.stream_chunk_timeout, None
        if self.async_client is not None and not isinstance(
            self.async_client, _StreamedCompletions
        ):
            self.async_client = _AsyncStreamedCompletions(
                self.async_client,
                self.root_async_client,
                silence=self._silence_timeout,
                model=model_endpoint(self),
            )
        return self

    @property
    def silence_timeout(self) -> float | None:
        """Seconds an async streamed reply may go without a chunk (None: unbounded but for
        the HTTP client's read timeout)."""
        return self._silence_timeout

    def _convert_chunk_to_generation_chunk(
        self,
        chunk: dict,
        default_chunk_class: type,
        base_generation_info: dict | None,
    ) -> ChatGenerationChunk | None:
        return super()._convert_chunk_to_generation_chunk(
            _indexed_tool_calls(chunk), default_chunk_class, base_generation_info
        )

    def _stream(self, *args: Any, **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        calls = _StreamedCalls()
        for chunk in super()._stream(*args, **kwargs):
            yield calls.clean(chunk)

    async def _astream(self, *args: Any, **kwargs: Any) -> AsyncIterator[ChatGenerationChunk]:
        calls = _StreamedCalls()
        async for chunk in super()._astream(*args, **kwargs):
            yield calls.clean(chunk)


def _indexed_tool_calls(chunk: dict) -> dict:
    """`chunk` (a streamed chat-completion chunk) with an `index` on every tool-call delta:
    its position in the delta when the server sent none."""
    choices = chunk.get("choices") or ()
    delta = choices[0].get("delta") if choices else None
    calls = (delta or {}).get("tool_calls") or ()
    if all(call.get("index") is not None for call in calls):
        return chunk
    indexed = [
        call if call.get("index") is not None else {**call, "index": position}
        for position, call in enumerate(calls)
    ]
    first = {**choices[0], "delta": {**delta, "tool_calls": indexed}}
    return {**chunk, "choices": [first, *choices[1:]]}


class _StreamedCalls:
    """The tool calls of one streamed reply so far: the name each has, by index (a call's id
    counts from its first chunk only)."""

    def __init__(self) -> None:
        self.names: dict[int, str] = {}

    def clean(self, chunk: ChatGenerationChunk) -> ChatGenerationChunk:
        message = chunk.message
        if not isinstance(message, AIMessageChunk) or not message.tool_call_chunks:
            return chunk
        cleaned = [self._cleaned(call) for call in message.tool_call_chunks]
        if cleaned == message.tool_call_chunks:
            return chunk
        fields = message.model_dump(exclude={"tool_calls", "invalid_tool_calls", "type"})
        return ChatGenerationChunk(
            message=AIMessageChunk(**{**fields, "tool_call_chunks": cleaned}),
            generation_info=chunk.generation_info,
        )

    def _cleaned(self, call: ToolCallChunk) -> ToolCallChunk:
        index, call_id, name = call.get("index"), call.get("id"), call.get("name")
        if index in self.names:  # a later chunk of a call: only its arguments count
            call_id = None
            if name == self.names[index]:
                name = None
            elif name:  # a name streamed in pieces
                self.names[index] += name
        else:
            self.names[index] = name or ""
        return tool_call_chunk(name=name, args=call.get("args"), id=call_id, index=index)


_REMEMBER = re.compile(r"^\s*(?:please\s+)?remember(?:\s+that)?[\s:,]+(?P<arg>\S.*)$", re.I | re.S)
_REMEMBER_ZH = re.compile(r"^\s*(?:请)?记住[\s:：，,]*(?P<arg>\S.*)$", re.S)
_SEARCH = re.compile(
    r"^\s*(?:search|find)(?:\s+my)?(?:\s+(?:history|past conversations))?(?:\s+for)?[\s:]+"
    r"(?P<arg>\S.*)$",
    re.I | re.S,
)
_DELEGATE = re.compile(r"^\s*ask\s+(?:the\s+)?sub-?agent[\s:,]+(?P<arg>\S.*)$", re.I | re.S)
_RECALL = re.compile(r"what\s+do\s+you\s+remember|你记得什么", re.I)
# The user's phrasing → (tool, its one argument).
_INTENTS = (
    (_REMEMBER, REMEMBER_MEMORY_TOOL, "content"),
    (_REMEMBER_ZH, REMEMBER_MEMORY_TOOL, "content"),
    (_SEARCH, SEARCH_THREAD_MESSAGES_TOOL, "query"),
    (_DELEGATE, SUBAGENT_TOOL_NAME, "task"),
)


def model_endpoint(model: object) -> str:
    """Which model a call went to, for errors and staff: its name and, for a remote one, the
    endpoint's host and port (`gpt-4o-mini at api.example.com`), never a key or a path."""
    name = getattr(model, "model_name", None) or type(model).__name__
    base = getattr(model, "openai_api_base", None)
    if not isinstance(base, str) or not base:
        return str(name)
    parts = urlsplit(base)
    host = parts.hostname or "?"
    return f"{name} at {host}:{parts.port}" if parts.port else f"{name} at {host}"


class ScriptedChatModel(BaseChatModel):
    """A deterministic stand-in for an LLM (tests, the demo), driven by the user's phrasing.

    On a user turn: "remember ..." / "记住 ..." calls `remember_memory`, "search my history
    for X" calls `search_thread_messages`, "ask the subagent: ..." calls
    `delegate_to_subagent` (each only when that tool is bound); "what do you remember?"
    quotes the memory the memory middleware injected; anything else is echoed. After tool
    results it says what they were in words ("Saved to memory."), never their JSON.

    Streamed (`stream`/`astream`, or a graph streamed in `messages` mode), the same reply
    comes word by word, its tool calls in one last chunk, so token streaming is exercised
    without a network model.
    """

    bound_tools: list[str] = []

    @property
    def _llm_type(self) -> str:
        return "yuxi-scripted"

    def bind_tools(
        self, tools: Sequence[dict[str, Any] | type | BaseTool | Any], **kwargs: Any
    ) -> Runnable[LanguageModelInput, AIMessage]:
        names = [convert_to_openai_tool(tool)["function"]["name"] for tool in tools]
        return self.model_copy(update={"bound_tools": names})

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self.reply(messages))])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        # LangChain reports each chunk to the callbacks (token streaming) itself. The reply is
        # `_generate`'s (`_agenerate`'s below), so a subclass that answers there streams too.
        yield from _chunks(self._generate(messages, stop, **kwargs).generations[0].message)

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        result = await self._agenerate(messages, stop, **kwargs)
        for chunk in _chunks(result.generations[0].message):
            yield chunk

    def reply(self, messages: list[BaseMessage]) -> AIMessage:
        """The scripted answer to `messages`."""
        last = messages[-1]
        if isinstance(last, ToolMessage):
            return AIMessage(content=_report_tool_results(messages))
        text = last.text if isinstance(last, HumanMessage) else ""
        for pattern, tool_name, argument in _INTENTS:
            match = pattern.match(text)
            if match and tool_name in self.bound_tools:
                call = {
                    "id": f"call_{len(messages)}_{tool_name}",
                    "name": tool_name,
                    "args": {argument: match["arg"].strip()},
                }
                return AIMessage(content="", tool_calls=[call])
        if _RECALL.search(text):
            memory = injected_memory(messages)
            if not memory or not memory.strip():
                return AIMessage(content="I have no saved memory.")
            return AIMessage(content="From memory:\n" + memory.rstrip("\n"))
        return AIMessage(content=f"You said: {text}")


def _chunks(reply: AIMessage) -> list[ChatGenerationChunk]:
    """`reply` as a model streams it: its text a word (and the space after it) at a time,
    then its tool calls."""
    chunks = [AIMessageChunk(content=word) for word in re.findall(r"\s*\S+\s*", reply.text)]
    if reply.tool_calls:
        calls = [
            tool_call_chunk(
                name=call["name"], args=json.dumps(call["args"]), id=call["id"], index=index
            )
            for index, call in enumerate(reply.tool_calls)
        ]
        chunks.append(AIMessageChunk(content="", tool_call_chunks=calls))
    return [ChatGenerationChunk(message=chunk) for chunk in chunks or [AIMessageChunk("")]]


# What the scripted model says after a memory write, by the write's status: a person reads the
# demo's reply, so a tool result is said in words, never as its JSON.
_WRITE_WORDS = {
    "added": "Saved to memory.",
    "replaced": "Memory corrected.",
    "unchanged": "That is already in memory.",
}


def _said(message: ToolMessage) -> str:
    """One tool result in words: a memory write's outcome, a sub-agent's answer, how many
    messages a lookback found, or (a result of any other shape) the tool's name and its text."""
    try:
        result = json.loads(message.text)
    except ValueError:
        result = None
    if not isinstance(result, dict):
        return f"{message.name or 'tool'}: {message.text}"
    status = result.get("status")
    if status in _WRITE_WORDS:
        return _WRITE_WORDS[status]
    if status not in (None, "success", "ok"):
        return f"Not done ({message.name}): {result.get('message') or status}."
    if isinstance(result.get("answer"), str):  # a sub-agent's answer, reported as it is
        return result["answer"]
    for key, words in (
        ("results", "Found {} matching messages."),
        ("messages", "Read {} messages."),
    ):
        if isinstance(result.get(key), list):
            return words.format(len(result[key]))
    return f"{message.name or 'tool'}: done."


def _report_tool_results(messages: list[BaseMessage]) -> str:
    results = []
    for message in reversed(messages):
        if not isinstance(message, ToolMessage):
            break
        results.append(_said(message))
    return "\n".join(reversed(results))
