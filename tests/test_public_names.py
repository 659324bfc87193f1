"""Every public name the README, `docs/` and the product contract list is importable from the
path they give it.

The documents are read for every backticked dotted path into the three packages (a stale
path fails here); the names the contract and `docs/python-api.md` list by module are spelled
out below, each imported from its documented module.
"""

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# A backticked dotted path into one of the packages, e.g. `memory_app.runtime.chat(...)`.
_DOTTED = re.compile(r"`((?:memory_app|conversations|yuxi_site)(?:\.[A-Za-z_]\w*)+)")
# A system check's id (`memory_app.E005`) is written like a path but names a check.
_CHECK_ID = re.compile(r"\.[EWI]\d{3}$")

# The public names by module, as the contract's layout table and `docs/python-api.md` list them.
DOCUMENTED = {
    # The old paths (forwarding, with a DeprecationWarning, for one release) and the new ones.
    "yuxi_site.utils.string_utils": ["truncate_utf8"],
    "yuxi_site.utils.connections": ["release_connection", "direct_connection"],
    "yuxi_site.utils.statements": ["count_statements"],
    "conversations.utils.string_utils": ["truncate_utf8", "is_storable_text"],
    "conversations.utils.connections": [
        "release_connection",
        "direct_connection",
        "in_worker_thread",
    ],
    "conversations.utils.statements": ["count_statements"],
    "conversations.admin_base": ["ReadOnlyAdmin"],
    "memory_app.api_edge": ["ApiEdgeMiddleware", "not_found", "server_error"],
    "memory_app.admission": ["StreamAdmission", "STREAM_OPENINGS_AT_ONCE", "OPENING_HOLD_SECONDS"],
    "memory_app.conf": ["setting", "DEFAULTS"],
    "conversations.conf": ["setting", "DEFAULTS"],
    "conversations.models": ["Conversation", "Message", "ToolCall", "AgentRun", "VISIBLE_THREAD"],
    "memory_app.models": ["UserConfig", "MemoryEvent"],
    "conversations.runs": [
        "create_run",
        "claim_run",
        "start_run",
        "renew_lease",
        "finish_run",
        "check_lease_owner",
        "parse_context",
        "lock_run_for_tool",
        "lease_keeper",
        "fail_expired_runs",
        "ToolRuntimeContext",
    ],
    "conversations.repository": ["search_thread_messages", "read_thread_messages"],
    # the errors `read_memory_file` may raise (docs/memory-writes.md) and a turn's when the
    # workspace root cannot be used (the changelog's 0.2.0), for a host to catch
    "memory_app.workspace": [
        "Workspace",
        "WorkspaceError",
        "WorkspacePathRefused",
        "WorkspaceUnavailable",
    ],
    "memory_app.context": ["build_agent_input_context", "AgentInputContext"],
    "memory_app.middleware": ["YuxiMemoryMiddleware", "injected_memory"],
    "memory_app.services": [
        "remember_memory",
        "MemoryWriteResult",
        "MemoryWriteError",
        "MemoryInputError",
        "MemoryConflict",
        "MemoryFileTooLarge",
        "MemoryAccessDenied",
        "MemoryUnavailable",
        "set_memory_enabled",
        "write_memory_file",
        "clear_memory",
        "hold_memory_locks",
        "erase_user",
        "ErasureReport",
        "MEMORY_FILE_MAX_BYTES",
    ],
    "memory_app.selectors": [
        "memory_enabled",
        "read_memory_file",
        "read_memory_for_prompt",
        "memory_write_refusal",
        "user_ledger",
        "export_user_data",
        "MemoryFile",
        "memory_etag",
    ],
    "memory_app.tools": [
        "build_memory_tools",
        "make_remember_memory_tool",
        "make_search_thread_messages_tool",
        "make_read_thread_messages_tool",
        "ToolResult",
        "ToolStatus",
    ],
    "memory_app.llm": ["chat_model_from_settings", "ScriptedChatModel", "CompatibleChatOpenAI"],
    "memory_app.runtime.call_limit": ["ModelCallLimit"],
    "memory_app.runtime": [
        "ToolRuntimeContext",
        "chat",
        "ChatTurn",
        "agent_run",
        "AgentRunHandle",
        "build_chatbot_graph",
        "build_subagent_graph",
        "AgentGraph",
        "agent_middleware",
        "run_guards",
        "ChatError",
        "ChatInputError",
        "ChatThreadNotFound",
        "ChatModelUnavailable",
        "ChatRunLost",
    ],
}


def resolve(dotted: str) -> object:
    """The object a dotted path names: its longest importable module, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            found = getattr(found, attribute)
        return found
    raise ModuleNotFoundError(dotted)


def documented_paths() -> list[tuple[str, str]]:
    return sorted(
        {
            (path.relative_to(ROOT).as_posix(), dotted)
            for path in DOCUMENTS
            for dotted in _DOTTED.findall(path.read_text(encoding="utf-8"))
            if not _CHECK_ID.search(dotted)
        }
    )


def test_the_documents_name_paths_into_the_packages():
    assert len(documented_paths()) > 10


@pytest.mark.parametrize(("document", "dotted"), documented_paths())
def test_every_dotted_path_the_documents_name_resolves(document, dotted):
    assert resolve(dotted) is not None


@pytest.mark.parametrize(
    ("module", "name"), [(module, name) for module, names in DOCUMENTED.items() for name in names]
)
def test_every_documented_name_is_importable_from_its_module(module, name):
    exec(f"from {module} import {name}", {})  # the import statement itself, as a caller writes it


def test_a_stale_path_does_not_resolve():
    with pytest.raises((AttributeError, ModuleNotFoundError)):
        resolve("memory_app.views.server_error")


# The runtime's stable surface, as `memory_app.runtime.__all__` lists it: the entry points and
# their errors, the context, the graph and middleware builders. A change here is deliberate.
RUNTIME_PUBLIC = {
    "chat",
    "achat",
    "stream_chat",
    "astream_chat",
    "ChatTurn",
    "ChatEvent",
    "agent_run",
    "aagent_run",
    "TeamRun",
    "AgentRunHandle",
    "warm_up_graphs",
    "ToolRuntimeContext",
    "RunContext",
    "AgentGraph",
    "build_chatbot_graph",
    "build_subagent_graph",
    "agent_middleware",
    "run_guards",
    "ChatError",
    "ChatInputError",
    "ChatThreadNotFound",
    "ChatNothingToResume",
    "ChatDecisionInvalid",
    "ChatDecisionRefused",
    "ChatModelUnavailable",
    "ChatRunLost",
    "CHAT_HTTP_ERRORS",
    "INTERNAL_ERROR",
    "http_error",
}


def test_the_runtimes_public_list_is_the_pinned_one_and_small():
    from memory_app import runtime

    assert len(runtime.__all__) == len(set(runtime.__all__)) <= 30
    assert set(runtime.__all__) == RUNTIME_PUBLIC
    assert set(DOCUMENTED["memory_app.runtime"]) <= RUNTIME_PUBLIC
    for name in runtime.__all__:
        assert getattr(runtime, name) is not None
