"""Agent runtime: the trusted tool context handed to every tool of a run."""

from conversations.runs import ToolRuntimeContext

__all__ = ["ToolRuntimeContext"]
