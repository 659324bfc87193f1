"""The chat model the settings configure: the OpenAI-compatible one at `LLM_BASE_URL`, else the
scripted one; and the settings that make it, so a model built from them can be reused."""

from typing import Any

from langchain_core.language_models import BaseChatModel

from memory_app.conf import DEFAULTS, setting
from memory_app.llm.openai_compatible import CompatibleChatOpenAI
from memory_app.llm.scripted import ScriptedChatModel


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
