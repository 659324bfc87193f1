"""`CompatibleChatOpenAI`: langchain-openai's `ChatOpenAI` for OpenAI-compatible servers, its
streamed requests posted as built and their chunks bounded in silence and cleaned of repeated
tool-call ids and names.
"""

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any, Self

from langchain_core.messages import AIMessageChunk
from langchain_core.messages.tool import ToolCallChunk, tool_call_chunk
from langchain_core.outputs import ChatGenerationChunk
from langchain_openai import ChatOpenAI
from openai import APITimeoutError, AsyncStream, Stream
from pydantic import Field, PrivateAttr, model_validator

from memory_app.llm.endpoint import model_endpoint
from memory_app.llm.http_client import ASYNC_HTTP_CLIENT

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

    http_async_client: Any | None = Field(default=ASYNC_HTTP_CLIENT, exclude=True)
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
