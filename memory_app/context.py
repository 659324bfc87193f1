"""The agent input context shared by every agent of a user: AGENTS.md and USER.md only.

It serves chat, resume, agent state and sub-agents alike, so it must never carry MEMORY.md:
user-level memory reaches only the top-level chat agent, through `YuxiMemoryMiddleware`.
"""

import logging
from dataclasses import dataclass

from memory_app.workspace import Workspace, WorkspaceError, WorkspaceUnavailable
from memory_app.workspace.paths import AGENTS_RELPATH, USER_RELPATH

__all__ = [
    "build_agent_input_context",
    "AgentInputContext",
]

logger = logging.getLogger(__name__)

# How much of each of AGENTS.md and USER.md reaches the prompt.
AGENT_FILE_MAX_BYTES = 16384


@dataclass(frozen=True)
class AgentInputContext:
    """AGENTS.md and USER.md as the agent sees them (bounded, decoded, possibly cut)."""

    agents_md: str
    user_md: str
    agents_md_truncated: bool = False
    user_md_truncated: bool = False

    def render(self) -> str:
        """The prompt section for these files; empty when both are empty."""
        sections = []
        for title, text, truncated in (
            (
                "AGENTS.md (the user's instructions for agents)",
                self.agents_md,
                self.agents_md_truncated,
            ),
            (
                "USER.md (what the user tells agents about themselves)",
                self.user_md,
                self.user_md_truncated,
            ),
        ):
            if not text.strip():
                continue
            marker = (
                f"\n[cut: only the first {AGENT_FILE_MAX_BYTES} bytes are shown]"
                if truncated
                else ""
            )
            sections.append(f"## {title}\n{text}{marker}")
        return "\n\n".join(sections)


def build_agent_input_context(uid: int | str) -> AgentInputContext:
    """Read AGENTS.md and USER.md of `uid`'s workspace (bounded, no-follow); never MEMORY.md.

    A uid that names no workspace reads as empty files, like an unreadable file does.
    """
    try:
        workspace = Workspace.for_user(uid)
    except WorkspaceError:
        logger.warning("no agent input files: the uid names no workspace")
        return AgentInputContext(agents_md="", user_md="")
    agents_md, agents_cut = _read_text(workspace, AGENTS_RELPATH)
    user_md, user_cut = _read_text(workspace, USER_RELPATH)
    return AgentInputContext(
        agents_md=agents_md,
        user_md=user_md,
        agents_md_truncated=agents_cut,
        user_md_truncated=user_cut,
    )


def _read_text(workspace: Workspace, relpath: str) -> tuple[str, bool]:
    """A file that cannot be read safely (symlink, not regular, I/O error) counts as empty; a
    workspace root that cannot be used at all (`WorkspaceUnavailable`) fails the turn."""
    try:
        return workspace.read_text_bounded(relpath, AGENT_FILE_MAX_BYTES)
    except WorkspaceUnavailable:
        raise
    except WorkspaceError:
        logger.warning("skipped an unreadable agent input file", exc_info=True)
        return "", False
