"""Reads of memory settings and of MEMORY.md as the agent sees it."""

from dataclasses import dataclass

from conversations.models import AgentRun
from conversations.runs import tool_run_refusal
from memory_app.models import UserConfig
from memory_app.workspace import MEMORY_RELPATH, Workspace
from yuxi_site.utils.ids import parse_uid

# How much of MEMORY.md reaches the prompt (and the admin preview that shows the same view).
MEMORY_PROMPT_MAX_BYTES = 24576


@dataclass(frozen=True)
class MemorySnapshot:
    """MEMORY.md as the agent sees it: text kept, its UTF-8 size, and whether more was there."""

    text: str
    size_bytes: int
    truncated: bool

    @property
    def is_empty(self) -> bool:
        """Nothing but whitespace: the agent gets no memory block (and the preview says so)."""
        return not self.text.strip()


def memory_enabled(uid: int | str) -> bool:
    """Current value of the switch, read fresh from the database (no row means off).

    A uid that is no user's key reads as off, so a malformed run context fails closed (SPEC §4).
    """
    user_id = parse_uid(uid)
    return user_id is not None and (
        UserConfig.objects.filter(user_id=user_id, enable_memory=True).exists()
    )


def memory_write_refusal(run: AgentRun) -> str | None:
    """Why a memory write by `run`'s own worker would be refused right now; None if allowed.

    For previews: it composes the run repository's rule and the switch without locking, so
    the answer can change the moment after it is given.
    """
    refusal = tool_run_refusal(run, run.worker_id)
    if refusal:
        return refusal
    if not memory_enabled(run.user_id):
        return "memory is switched off for this user"
    return None


def read_memory_for_prompt(uid: int | str) -> MemorySnapshot:
    """The one bounded, no-follow read of `uid`'s MEMORY.md for the prompt and its previews.

    Reads at most `MEMORY_PROMPT_MAX_BYTES + 1` bytes whatever the file's size, drops a code
    point split by the cut, and replaces invalid bytes. Renders no marker: callers do.
    """
    text, truncated = Workspace.for_user(uid).read_text_bounded(
        MEMORY_RELPATH, MEMORY_PROMPT_MAX_BYTES
    )
    return MemorySnapshot(text=text, size_bytes=len(text.encode("utf-8")), truncated=truncated)


from memory_app.lifecycle import export_user_data as export_user_data  # noqa: E402
