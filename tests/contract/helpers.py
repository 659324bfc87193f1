"""Constants and helpers the contract tests share (fixtures are in `conftest.py`)."""

import json
from pathlib import Path

from django.conf import settings as django_settings

from memory_app.runtime import ToolRuntimeContext, build_chatbot_graph

CONTEXT_FIELDS = ("uid", "thread_id", "run_id", "request_id", "worker_id")
TOOL_NAMES = {"remember_memory", "search_thread_messages", "read_thread_messages"}
TOOL_STATUSES = {"added", "unchanged", "replaced", "conflict", "rejected", "denied", "unavailable"}
KIB = 1024
# The response shapes of history lookback, key for key.
HIT_KEYS = {
    "thread_id",
    "title",
    "message_id",
    "role",
    "created_at",
    "snippet",
    "matched_terms",
    "truncated",
}
READ_KEYS = {"thread_id", "title", "messages", "has_more_before", "has_more_after", "truncated"}
MESSAGE_KEYS = {"message_id", "role", "created_at", "content", "truncated"}
TOOL_CALL_KEYS = {"id", "name", "input", "output", "status", "error", "message_id", "truncated"}


def memory_path(uid: int | str) -> Path:
    return Path(django_settings.WORKSPACE_ROOT) / str(uid) / "agents" / "MEMORY.md"


def write_agents_file(uid: int | str, name: str, data: bytes) -> Path:
    path = Path(django_settings.WORKSPACE_ROOT) / str(uid) / "agents" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def serialized_bytes(response: dict) -> int:
    """The byte count every lookback response cap is measured in."""
    return len(json.dumps(response, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def tools_by_name(ctx: ToolRuntimeContext) -> dict:
    return {tool.name: tool for tool in build_chatbot_graph(ctx).tools}


def call(tool, arguments: dict) -> dict:
    result = tool.invoke(arguments)
    assert isinstance(result, str)
    return json.loads(result)
