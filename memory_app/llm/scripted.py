"""`ScriptedChatModel`: a deterministic stand-in for an LLM (tests, the demo), driven by the
user's phrasing, its tool results said in words, in the user's language.
"""

import json
import re
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from django.utils import translation
from django.utils.translation import gettext, gettext_noop
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    ToolMessage,
)
from langchain_core.messages.tool import tool_call_chunk
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from memory_app.llm.language import reply_language
from memory_app.middleware import injected_memory
from memory_app.tool_names import (
    REMEMBER_MEMORY_TOOL,
    SEARCH_THREAD_MESSAGES_TOOL,
    SUBAGENT_TOOL_NAME,
)

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
# With translations off, the reply's language is the message's script: Chinese if it holds a
# Han character (the CJK blocks and their compatibility ideographs), else English.
_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
HAN_SCRIPT_LANGUAGE = "zh-hans"
OTHER_SCRIPT_LANGUAGE = "en"


class ScriptedChatModel(BaseChatModel):
    """A deterministic stand-in for an LLM (tests, the demo), driven by the user's phrasing.

    On a user turn: "remember ..." / "记住 ..." calls `remember_memory`, "search my history
    for X" calls `search_thread_messages`, "ask the subagent: ..." calls
    `delegate_to_subagent` (each only when that tool is bound); "what do you remember?"
    quotes the memory the memory middleware injected; anything else is echoed. After tool
    results it says what they were in words ("Saved to memory."), never their JSON.

    Its words are in the language of the turn (`reply_language`): a served turn's is its
    request's (the page's and the API's, from the user's choice or `Accept-Language`). With
    translations off (`manage.py chat`), they follow the script of the user's message.

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
        """The scripted answer to `messages`, in the turn's language, else (translations off) in
        the one of the user's script."""
        language = reply_language()
        if language is None:
            han = _HAN.search(_user_text(messages))
            language = HAN_SCRIPT_LANGUAGE if han else OTHER_SCRIPT_LANGUAGE
        with translation.override(language):
            return self._answer(messages)

    def _answer(self, messages: list[BaseMessage]) -> AIMessage:
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
                return AIMessage(content=gettext("I have no saved memory."))
            return AIMessage(content=gettext("From memory:") + "\n" + memory.rstrip("\n"))
        return AIMessage(content=gettext("You said: %(text)s") % {"text": text})


def _user_text(messages: list[BaseMessage]) -> str:
    """The text of the user's last message (before any tool results that answer it)."""
    for message in reversed(messages):
        if isinstance(message, HumanMessage):
            return message.text
    return ""


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
    "added": gettext_noop("Saved to memory."),
    "replaced": gettext_noop("Memory corrected."),
    "unchanged": gettext_noop("That is already in memory."),
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
        return gettext(_WRITE_WORDS[status])
    if status not in (None, "success", "ok"):
        reason = result.get("message") or status
        return gettext("Not done (%(tool)s): %(reason)s.") % {
            "tool": message.name,
            "reason": reason,
        }
    if isinstance(result.get("answer"), str):  # a sub-agent's answer, reported as it is
        return result["answer"]
    for key, words in (
        ("results", gettext_noop("Found %(count)s matching messages.")),
        ("messages", gettext_noop("Read %(count)s messages.")),
    ):
        if isinstance(result.get(key), list):
            return gettext(words) % {"count": len(result[key])}
    return gettext("%(tool)s: done.") % {"tool": message.name or "tool"}


def _report_tool_results(messages: list[BaseMessage]) -> str:
    results = []
    for message in reversed(messages):
        if not isinstance(message, ToolMessage):
            break
        results.append(_said(message))
    return "\n".join(reversed(results))
