"""Reads of memory settings."""

from conversations.models import AgentRun
from conversations.runs import tool_run_refusal
from memory_app.models import UserConfig


def memory_enabled(uid: int | str) -> bool:
    """Current value of the switch, read fresh from the database (no row means off)."""
    return UserConfig.objects.filter(user_id=uid, enable_memory=True).exists()


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
