"""Every public name the README, `docs/` and the product contract list is importable from the
path they give it, and each app's public list is the one pinned here.

The documents are read for every backticked dotted path into the three packages (a stale
path fails here). Each app lists its public names by module in one place, `PUBLIC_API` in its
package's `__init__`: that list equals the copy pinned below (so a change to it is deliberate),
every name in it imports from its module, each module listed declares exactly those names in
`__all__`, and no other module of the app declares `__all__` (everything else is internal).
"""

import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import conversations
import memory_app

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# A backticked dotted path into one of the packages, e.g. `memory_app.runtime.chat(...)`.
_DOTTED = re.compile(r"`((?:memory_app|conversations|yuxi_site)(?:\.[A-Za-z_]\w*)+)")
# A system check's id (`memory_app.E005`) is written like a path but names a check.
_CHECK_ID = re.compile(r"\.[EWI]\d{3}$")

# The pinned copies of the apps' `PUBLIC_API`: a change to either list is made twice, here and
# in the app, and `docs/python-api.md` says it in words.
MEMORY_APP_PUBLIC = {
    "memory_app.admission": ("StreamAdmission", "STREAM_OPENINGS_AT_ONCE", "OPENING_HOLD_SECONDS"),
    "memory_app.api_auth": ("SessionCsrfAuth",),
    "memory_app.api_edge": (
        "ApiEdgeMiddleware",
        "not_found",
        "server_error",
        "API_UNAVAILABLE_MESSAGE",
        "URL_NAMESPACE",
        "API_NAMESPACE",
    ),
    "memory_app.conf": ("setting", "DEFAULTS"),
    "memory_app.context": ("build_agent_input_context", "AgentInputContext"),
    "memory_app.llm": ("chat_model_from_settings", "CompatibleChatOpenAI", "ScriptedChatModel"),
    "memory_app.middleware": ("YuxiMemoryMiddleware", "injected_memory"),
    "memory_app.models": ("UserConfig", "MemoryEvent"),
    "memory_app.runtime": (
        # the entry points and what they answer
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
        # the context a run's tools and middleware read
        "ToolRuntimeContext",
        "RunContext",
        # the graph and middleware builders
        "AgentGraph",
        "build_chatbot_graph",
        "build_subagent_graph",
        "agent_middleware",
        "run_guards",
        # the refusals, and what HTTP answers each
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
    ),
    "memory_app.runtime.call_limit": ("ModelCallLimit",),
    "memory_app.selectors": (
        "memory_enabled",
        "read_memory_file",
        "read_memory_for_prompt",
        "memory_write_refusal",
        "user_ledger",
        "export_user_data",
        "list_memory_versions",
        "read_memory_version",
        "memory_line_origins",
        "memory_lines",
        "MemoryFile",
        "memory_etag",
    ),
    "memory_app.services": (
        # the agent's write, and the user's own writes
        "remember_memory",
        "MemoryWriteResult",
        "set_memory_enabled",
        "set_memory_write_approval",
        "write_memory_file",
        "delete_memory_line",
        "edit_memory_line",
        "clear_memory",
        "restore_memory_version",
        "forget_memory_versions",
        "hold_memory_locks",
        "erase_user",
        "ErasureReport",
        "MEMORY_FILE_MAX_BYTES",
        # the refusals (`MemoryWriteError` and its children) and the two lookups that find nothing
        "MemoryWriteError",
        "MemoryInputError",
        "MemorySensitiveContent",
        "MemoryInvisibleText",
        "MemoryConflict",
        "MemoryFileTooLarge",
        "MemoryAccessDenied",
        "MemoryApprovalRequired",
        "MemoryUnavailable",
        "MemoryLineNotFound",
        "MemoryVersionNotFound",
    ),
    "memory_app.tools": (
        "build_memory_tools",
        "make_remember_memory_tool",
        "make_search_thread_messages_tool",
        "make_read_thread_messages_tool",
        "ToolResult",
        "ToolStatus",
    ),
    "memory_app.user_admin": ("ErasingUserAdminMixin",),
    "memory_app.workspace": (
        "Workspace",
        "WorkspaceError",
        "WorkspacePathRefused",
        "WorkspaceUnavailable",
    ),
}
CONVERSATIONS_PUBLIC = {
    "conversations.admin_base": ("ReadOnlyAdmin",),
    "conversations.checkpoints": ("checkpointer",),
    "conversations.conf": ("setting", "DEFAULTS"),
    "conversations.models": ("Conversation", "Message", "ToolCall", "AgentRun", "VISIBLE_THREAD"),
    "conversations.repository": (
        "search_thread_messages",
        "read_thread_messages",
        "HistoryNotFound",
        "HistoryQueryError",
    ),
    "conversations.runs": (
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
    ),
    "conversations.services": ("add_message", "record_tool_call", "complete_tool_call"),
    "conversations.utils.connections": (
        "release_connection",
        "direct_connection",
        "in_worker_thread",
    ),
    "conversations.utils.db_functions": ("ClockTimestamp",),
    "conversations.utils.ids": ("parse_uid",),
    "conversations.utils.log_format": ("KeyValueFormatter",),
    "conversations.utils.statements": ("count_statements",),
    "conversations.utils.string_utils": ("truncate_utf8", "is_storable_text"),
}
# At most this many public names per app: tens, not hundreds.
PUBLIC_NAMES_MAX = {"memory_app": 100, "conversations": 40}
APPS = {
    "memory_app": (memory_app, MEMORY_APP_PUBLIC),
    "conversations": (conversations, CONVERSATIONS_PUBLIC),
}

# The public names by module: the apps' lists, and the reference site's old paths (forwarding
# to the apps, with a DeprecationWarning, for one release).
DOCUMENTED = {
    "yuxi_site.utils.string_utils": ("truncate_utf8",),
    "yuxi_site.utils.connections": ("release_connection", "direct_connection"),
    "yuxi_site.utils.statements": ("count_statements",),
    **memory_app.PUBLIC_API,
    **conversations.PUBLIC_API,
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


@pytest.mark.parametrize("app", APPS)
def test_each_apps_public_list_is_the_pinned_one_and_small(app):
    package, pinned = APPS[app]
    assert pinned == package.PUBLIC_API
    names = [name for names in package.PUBLIC_API.values() for name in names]
    assert len(names) <= PUBLIC_NAMES_MAX[app], f"{app}: {len(names)} public names"
    for module, listed in package.PUBLIC_API.items():
        assert module.split(".")[0] == app
        assert len(set(listed)) == len(listed), f"{module} lists a name twice"


def _app_modules(app: str) -> list[str]:
    """Every module of the app, its migrations aside (importing each package to walk it)."""
    package = APPS[app][0]
    return [app] + [
        found.name
        for found in pkgutil.walk_packages(package.__path__, f"{app}.")
        if ".migrations" not in f"{found.name}."
    ]


@pytest.mark.parametrize(
    "module",
    [module for app in APPS for module in APPS[app][0].PUBLIC_API],
)
def test_each_listed_module_declares_exactly_its_public_names(module):
    declared = importlib.import_module(module).__all__
    app = module.split(".")[0]
    assert sorted(declared) == sorted(APPS[app][0].PUBLIC_API[module])
    assert len(set(declared)) == len(declared)


@pytest.mark.parametrize("app", APPS)
def test_no_other_module_of_an_app_declares_all(app):
    listed = APPS[app][0].PUBLIC_API
    declaring = [
        module
        for module in _app_modules(app)
        if module not in listed and hasattr(importlib.import_module(module), "__all__")
    ]
    assert declaring == []


def test_the_runtimes_public_list_is_small():
    from memory_app import runtime

    assert len(runtime.__all__) == len(set(runtime.__all__)) <= 30
    for name in runtime.__all__:
        assert getattr(runtime, name) is not None


def _listed_in_python_api_doc() -> dict[str, set[str]]:
    """The names `docs/python-api.md`'s tables give by module: the apps' tables (module, names,
    what for) and the runtime's (names, what)."""
    listed: dict[str, set[str]] = {}
    text = (ROOT / "docs" / "python-api.md").read_text(encoding="utf-8")
    runtime_table = False
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not line.startswith("| ") or len(cells) < 2:
            runtime_table = False
            continue
        if cells[0] == "`from memory_app.runtime import ...`":
            runtime_table = True
        elif runtime_table:
            listed.setdefault("memory_app.runtime", set()).update(re.findall(r"`(\w+)`", cells[0]))
        elif re.fullmatch(r"`(?:memory_app|conversations)[\w.]*`", cells[0]) and len(cells) == 3:
            module = cells[0].strip("`")
            listed.setdefault(module, set()).update(re.findall(r"`(\w+)`", cells[1]))
    return listed


def test_the_python_api_document_lists_exactly_each_apps_public_names():
    listed = _listed_in_python_api_doc()
    for package, _ in APPS.values():
        for module, names in package.PUBLIC_API.items():
            assert listed.get(module) == set(names), module
