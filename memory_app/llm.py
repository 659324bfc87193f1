"""The chat model interface and its two implementations.

A model takes OpenAI-style chat messages plus tool specs and answers with text and/or tool
calls; it never runs a tool itself. `ScriptedModel` is deterministic (tests, demo);
`OpenAIChatModel` speaks the chat-completions wire format over HTTP.
"""

import json
import re
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from django.conf import settings

from memory_app.middleware import MEMORY_BLOCK_BEGIN, MEMORY_BLOCK_END
from memory_app.tools import Tool

# Upper bound on a chat-completions response body; a larger one is refused, not parsed.
MODEL_RESPONSE_MAX_BYTES = 4 * 1024 * 1024


class ModelError(Exception):
    """The model could not produce a reply (transport, HTTP status or malformed answer)."""


@dataclass(frozen=True)
class ModelToolCall:
    """One tool call the model asked for; `arguments` is None when they were not a JSON object."""

    id: str
    name: str
    arguments: dict[str, Any] | None


@dataclass(frozen=True)
class ModelReply:
    """What one model step produced."""

    text: str
    tool_calls: list[ModelToolCall] = field(default_factory=list)


class ChatModel(Protocol):
    """Messages and the offered tools in, one reply out."""

    def complete(self, *, messages: Sequence[dict[str, Any]], tools: Sequence[Tool]) -> ModelReply:
        """One model step."""
        ...


def chat_model_from_settings() -> ChatModel:
    """The configured model: the HTTP client when `LLM_BASE_URL` is set, else the scripted one."""
    if settings.LLM_BASE_URL:
        return OpenAIChatModel(
            base_url=settings.LLM_BASE_URL,
            api_key=settings.LLM_API_KEY,
            model=settings.LLM_MODEL,
            timeout=settings.LLM_TIMEOUT_SECONDS,
        )
    return ScriptedModel()


def assistant_message(reply: ModelReply) -> dict[str, Any]:
    """The OpenAI-style assistant message recording `reply` in the conversation sent back."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.text}
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {
                    "name": call.name,
                    "arguments": json.dumps(call.arguments or {}, ensure_ascii=False),
                },
            }
            for call in reply.tool_calls
        ]
    return message


class OpenAIChatModel:
    """A client of an OpenAI-compatible `POST {base_url}/chat/completions` endpoint."""

    def __init__(self, *, base_url: str, api_key: str, model: str, timeout: float) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.api_key = api_key
        self.model = model
        self.timeout = timeout

    def complete(self, *, messages: Sequence[dict[str, Any]], tools: Sequence[Tool]) -> ModelReply:
        body: dict[str, Any] = {"model": self.model, "messages": list(messages)}
        if tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": tool.schema,
                    },
                }
                for tool in tools
            ]
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(
            self.url,
            data=json.dumps(body, ensure_ascii=False).encode("utf-8"),
            headers=headers,
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                raw = response.read(MODEL_RESPONSE_MAX_BYTES + 1)
        except urllib.error.HTTPError as exc:
            raise ModelError(f"model endpoint answered HTTP {exc.code}") from exc
        except (urllib.error.URLError, OSError) as exc:
            raise ModelError("model endpoint unreachable") from exc
        if len(raw) > MODEL_RESPONSE_MAX_BYTES:
            raise ModelError("model response is too large")
        return _parse_completion(raw)


def _parse_completion(raw: bytes) -> ModelReply:
    try:
        message = json.loads(raw)["choices"][0]["message"]
        text = message.get("content") or ""
        calls = [
            ModelToolCall(
                id=str(call["id"]),
                name=str(call["function"]["name"]),
                arguments=_json_object(call["function"].get("arguments")),
            )
            for call in message.get("tool_calls") or []
        ]
    except (ValueError, KeyError, IndexError, TypeError, AttributeError, RecursionError) as exc:
        raise ModelError("model response is not a chat completion") from exc
    if not isinstance(text, str):
        raise ModelError("model response content is not text")
    return ModelReply(text=text, tool_calls=calls)


def _json_object(arguments: object) -> dict[str, Any] | None:
    if isinstance(arguments, dict):
        return arguments
    try:
        parsed = json.loads(arguments) if isinstance(arguments, str) else None
    except (ValueError, RecursionError):
        return None
    return parsed if isinstance(parsed, dict) else None


_REMEMBER = re.compile(r"^\s*(?:please\s+)?remember(?:\s+that)?[\s:,]+(?P<arg>\S.*)$", re.I | re.S)
_REMEMBER_ZH = re.compile(r"^\s*(?:请)?记住[\s:：，,]*(?P<arg>\S.*)$", re.S)
_SEARCH = re.compile(
    r"^\s*(?:search|find)(?:\s+my)?(?:\s+(?:history|past conversations))?(?:\s+for)?[\s:]+"
    r"(?P<arg>\S.*)$",
    re.I | re.S,
)
_DELEGATE = re.compile(r"^\s*ask\s+(?:the\s+)?sub-?agent[\s:,]+(?P<arg>\S.*)$", re.I | re.S)
_RECALL = re.compile(r"what\s+do\s+you\s+remember|你记得什么", re.I)


def _block_line(template: str, nonce_pattern: str) -> str:
    return "^" + re.escape(template).replace(re.escape("{nonce}"), nonce_pattern) + "$"


# The memory data block exactly as the memory middleware renders it.
_MEMORY_BLOCK = re.compile(
    _block_line(MEMORY_BLOCK_BEGIN, r"(?P<nonce>\w+)")
    + r"\n(?P<body>.*?)\n"
    + _block_line(MEMORY_BLOCK_END, r"(?P=nonce)"),
    re.M | re.S,
)


class ScriptedModel:
    """A deterministic stand-in for an LLM, for tests and the demo.

    On a user turn: "remember ..." / "记住 ..." calls `remember_memory`, "search ... for X"
    calls `search_thread_messages`, "ask the subagent ..." calls `delegate_to_subagent` (each
    only when that tool is offered); "what do you remember" quotes the memory block of the
    system prompt; anything else is echoed. After tool results it reports them verbatim.
    """

    def complete(self, *, messages: Sequence[dict[str, Any]], tools: Sequence[Tool]) -> ModelReply:
        last = messages[-1]
        if last["role"] == "tool":
            return ModelReply(text=self._report_tool_results(messages))
        text = last.get("content") or ""
        offered = {tool.name for tool in tools}
        for pattern, tool_name, argument in (
            (_REMEMBER, "remember_memory", "content"),
            (_REMEMBER_ZH, "remember_memory", "content"),
            (_SEARCH, "search_thread_messages", "query"),
            (_DELEGATE, "delegate_to_subagent", "task"),
        ):
            match = pattern.match(text)
            if match and tool_name in offered:
                call_id = f"call_{len(messages)}_{tool_name}"
                arguments = {argument: match["arg"].strip()}
                return ModelReply(
                    text="", tool_calls=[ModelToolCall(call_id, tool_name, arguments)]
                )
        if _RECALL.search(text):
            return ModelReply(text=self._recall(messages))
        return ModelReply(text=f"You said: {text}")

    @staticmethod
    def _report_tool_results(messages: Sequence[dict[str, Any]]) -> str:
        names = {
            call["id"]: call["function"]["name"]
            for message in messages
            for call in message.get("tool_calls") or []
        }
        results = []
        for message in reversed(messages):
            if message["role"] != "tool":
                break
            results.append(f"{names.get(message['tool_call_id'], 'tool')}: {message['content']}")
        return "Tool results:\n" + "\n".join(reversed(results))

    @staticmethod
    def _recall(messages: Sequence[dict[str, Any]]) -> str:
        system = next((m["content"] for m in messages if m["role"] == "system"), "")
        block = _MEMORY_BLOCK.search(system)
        if block is None or not block["body"].strip():
            return "I have no saved memory."
        return "From memory:\n" + block["body"]
