"""The agent's memory tools: thin adapters from JSON arguments to the services and repository.

Each tool is closed over a trusted `ToolRuntimeContext`; its schema exposes no identity, path,
run or worker field. Typed service errors become `{"status", "message"}` here and only here.
"""

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Tool:
    """A tool as the model sees it (name, description, JSON schema) plus its bound call."""

    name: str
    description: str
    schema: dict[str, Any]
    invoke: Callable[[dict[str, Any]], str]


def tool_result(status: str, message: str, **extra: Any) -> str:
    """The JSON text a tool returns for a status outcome."""
    return json.dumps({"status": status, "message": message, **extra}, ensure_ascii=False)
