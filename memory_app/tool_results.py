"""What a tool call answers: `ToolResult` (one `ToolStatus` enum, JSON only where the model
sees it), and `MEMORY_REFUSALS`, the one table of memory errors as results: the tool result
the model sees for each, and the reason a person deciding an approved write is told.

Keyed by the errors' own types (`ConflictReason` for a conflict), so every error has its row
and none can miss the table. A leaf below the tools: the tools and the approval check use it.
"""

import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from django.utils.translation import gettext_noop

from conversations.repository.budgets import to_json as history_json
from conversations.utils.string_utils import STORABLE_TEXT_REQUIREMENT
from memory_app.errors import (
    ConflictReason,
    MemoryAccessDenied,
    MemoryApprovalRequired,
    MemoryConflict,
    MemoryFileTooLarge,
    MemoryInputError,
    MemoryInvisibleText,
    MemorySensitiveContent,
    MemoryUnavailable,
    MemoryWriteError,
)
from memory_app.services.plan import MEMORY_ARG_MAX_BYTES, MemoryWriteStatus


class ToolStatus(StrEnum):
    """Every status a tool result can carry (the `status` the model sees)."""

    ADDED = MemoryWriteStatus.ADDED.value
    UNCHANGED = MemoryWriteStatus.UNCHANGED.value
    REPLACED = MemoryWriteStatus.REPLACED.value
    OK = "ok"
    CONFLICT = "conflict"
    REJECTED = "rejected"
    DENIED = "denied"
    UNAVAILABLE = "unavailable"
    NOT_FOUND = "not_found"

    @property
    def is_refusal(self) -> bool:
        """Whether the call did not do what was asked (its ToolCall row is an `error`)."""
        return self in _REFUSALS


_REFUSALS = frozenset(
    {
        ToolStatus.CONFLICT,
        ToolStatus.REJECTED,
        ToolStatus.DENIED,
        ToolStatus.UNAVAILABLE,
        ToolStatus.NOT_FOUND,
    }
)


@dataclass(frozen=True)
class ToolResult:
    """A tool's outcome. `body` is a successful read's response, sent as it is."""

    status: ToolStatus
    message: str = ""
    body: dict[str, Any] | None = field(default=None)

    def to_json(self) -> str:
        """The JSON text the model sees: the body on success, else `{"status", "message"}`."""
        if self.body is not None:
            return history_json(self.body)
        return json.dumps({"status": self.status, "message": self.message}, ensure_ascii=False)


# Fixed texts for the model after a write: a service error's own message never reaches it.
_WRITTEN = {
    ToolStatus.ADDED: "Saved to long-term memory.",
    ToolStatus.UNCHANGED: "This fact is already in long-term memory; nothing changed.",
    ToolStatus.REPLACED: "The old text was replaced in long-term memory.",
}


@dataclass(frozen=True)
class MemoryRefusal:
    """How a memory error is told: `status` and `text` the tool result the model sees, and
    `reason` what the person deciding an approved write is told. None for either: the
    error's own message (it names a credential's kind, a cap or the switch, never a secret)."""

    status: ToolStatus
    text: str | None
    reason: str | None = None


# The one table of memory errors as results: by conflict reason, else by the most specific
# error class (`memory_refusal` walks the class's bases).
MEMORY_REFUSALS: dict[type[MemoryWriteError] | ConflictReason, MemoryRefusal] = {
    ConflictReason.NOT_FOUND: MemoryRefusal(
        ToolStatus.CONFLICT,
        "The text to replace is not in long-term memory; re-read it and retry.",
        gettext_noop("the text to replace is not in the memory file"),
    ),
    ConflictReason.AMBIGUOUS: MemoryRefusal(
        ToolStatus.CONFLICT,
        "The text to replace occurs more than once; quote a longer, unique passage.",
        gettext_noop("the text to replace occurs more than once in the memory file"),
    ),
    ConflictReason.INVALID_ENCODING: MemoryRefusal(
        ToolStatus.CONFLICT,
        "The memory file is not valid UTF-8; the user must repair it.",
        gettext_noop("the memory file is not valid UTF-8"),
    ),
    ConflictReason.STALE: MemoryRefusal(
        ToolStatus.CONFLICT,
        "Long-term memory changed while this write was made; re-read it and retry.",
        gettext_noop("the memory changed since this write was proposed"),
    ),
    MemorySensitiveContent: MemoryRefusal(ToolStatus.REJECTED, None),
    MemoryInvisibleText: MemoryRefusal(ToolStatus.REJECTED, None),
    MemoryInputError: MemoryRefusal(
        ToolStatus.REJECTED,
        "The arguments were refused: content must be non-empty text and "
        f"replaces, if given, text; each at most {MEMORY_ARG_MAX_BYTES} bytes of "
        f"{STORABLE_TEXT_REQUIREMENT}.",
    ),
    MemoryFileTooLarge: MemoryRefusal(
        ToolStatus.REJECTED,
        "Long-term memory is full or too large to edit; ask the user to tidy it.",
    ),
    MemoryApprovalRequired: MemoryRefusal(
        ToolStatus.DENIED, "This memory write needs the user's approval; nothing was saved."
    ),
    MemoryAccessDenied: MemoryRefusal(
        ToolStatus.DENIED, "Long-term memory is not available to this run."
    ),
    MemoryUnavailable: MemoryRefusal(
        ToolStatus.UNAVAILABLE, "Long-term memory is temporarily unavailable; nothing was saved."
    ),
}


def memory_refusal(exc: MemoryWriteError) -> MemoryRefusal:
    """`exc`'s row of `MEMORY_REFUSALS` (every conflict reason and every error class has
    one: `MemoryWriteError` itself is told as unavailable)."""
    if isinstance(exc, MemoryConflict):
        return MEMORY_REFUSALS[exc.reason]
    for kind in type(exc).__mro__:
        if kind in MEMORY_REFUSALS:
            return MEMORY_REFUSALS[kind]
    return MEMORY_REFUSALS[MemoryUnavailable]


# What the model is told of a memory write the user declined (or left undecided until it
# expired): stored as the call's output and as its tool message, so every stored call is
# answered. The conversations app stores it as given (`decline_approval`).
DECLINED_RESULT = ToolResult(
    ToolStatus.REJECTED, "The user declined this memory write; nothing was saved."
).to_json()


def decided_write_not_run(ended: str) -> ToolResult:
    """The result of a decided memory write whose resume run `ended` ("cancelled", "failed")
    before the write ran: the decision was spent, nothing was saved."""
    return ToolResult(
        ToolStatus.REJECTED, f"The run was {ended} before this memory write ran; nothing was saved."
    )


def memory_error_result(exc: MemoryWriteError) -> ToolResult:
    """The tool result the model sees for `exc`."""
    refusal = memory_refusal(exc)
    return ToolResult(refusal.status, refusal.text if refusal.text is not None else str(exc))


def written_result(status: MemoryWriteStatus) -> ToolResult:
    """The tool result of a memory write that ran (`added`, `unchanged`, `replaced`)."""
    tool_status = ToolStatus(status)
    return ToolResult(tool_status, _WRITTEN[tool_status])
