"""The language a turn's replies are for: its caller's active Django language, carried into
the turn.

Django keeps the active language per thread (asgiref's `Local` hides it from any other thread
a context is copied to), and a turn runs on the runtime's own threads (the process loop,
LangChain's executor for a model call), where the caller's language is not active. A context
variable goes wherever the turn's context is copied.
"""

from contextvars import ContextVar

from django.utils import translation

_TURN_LANGUAGE: ContextVar[str | None] = ContextVar("yuxi_turn_language")


def carry_language(language: str | None) -> None:
    """Make `language` (the caller's `translation.get_language()`: None with translations
    off) the language of the turn running in this context."""
    _TURN_LANGUAGE.set(language)


def reply_language() -> str | None:
    """The language of the turn running in this context, else (outside a turn) the one active
    in this thread; None when translations are off."""
    return _TURN_LANGUAGE.get(translation.get_language())
