"""Chat models: the configured one, and a deterministic scripted one for tests and the demo.

Everything else (messages, tool binding, the wire format, retries) is LangChain's. The
sub-modules: `settings` (the model the settings configure), `openai_compatible`
(`CompatibleChatOpenAI`), `http_client` (its per-loop async HTTP client), `endpoint` (which
model a call went to), `scripted` (`ScriptedChatModel`) and `language` (the language of a
turn's replies, carried from its caller).
"""

from memory_app.llm.openai_compatible import CompatibleChatOpenAI
from memory_app.llm.scripted import ScriptedChatModel
from memory_app.llm.settings import chat_model_from_settings

__all__ = ["CompatibleChatOpenAI", "ScriptedChatModel", "chat_model_from_settings"]
