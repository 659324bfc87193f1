"""Imports run one way: yuxi_site (the reference site, a host) -> memory_app -> conversations,
and down the layers inside each app; there is no import circle, and no import inside a function
or below a module's code.

Neither app imports `yuxi_site` (migrations included): they install without it, into any host.
`conversations` never imports `memory_app`. Inside a package every module has a layer
(`LAYERS`): it imports only modules of lower layers, so leaves stay leaves and a new module
must be placed. Every import statement counts, including those inside functions.
"""

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("memory_app", "conversations", "yuxi_site")
# What each package may not import.
FORBIDDEN = {
    "memory_app": {"yuxi_site"},
    "conversations": {"memory_app", "yuxi_site"},
    "yuxi_site": set(),
}


def _imported_packages(path: Path, package: str) -> set[str]:
    """Top-level packages `path` imports (relative imports stay in `package`)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            found.add(package if node.level else (node.module or "").split(".")[0])
    return found


def _violations() -> set[tuple[str, str]]:
    violations = set()
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            for imported in _imported_packages(path, package) & FORBIDDEN[package]:
                violations.add((name, imported))
    return violations


def test_neither_app_imports_the_site_and_conversations_never_imports_memory_app():
    assert _violations() == set()


@pytest.mark.parametrize(
    ("source", "package", "found"),
    [
        ("from memory_app.selectors import x", "conversations", {"memory_app"}),
        ("def f():\n    import memory_app.services\n", "conversations", {"memory_app"}),
        ("from . import models", "conversations", {"conversations"}),
        ("from .utils import ids", "yuxi_site", {"yuxi_site"}),
        ("import yuxi_site.utils.db_functions\n", "memory_app", {"yuxi_site"}),
    ],
)
def test_every_kind_of_import_is_seen(tmp_path, source, package, found):
    path = tmp_path / "module.py"
    path.write_text(source, encoding="utf-8")
    assert _imported_packages(path, package) == found


# --- modules and their imports ---------------------------------------------------------------

# Each app's modules by layer, lowest first: a module imports only modules of lower layers of
# its own app (package `__init__`s count as modules; `runtime` is ranked inside memory_app).
LAYERS = {
    "memory_app": [
        # the settings the app reads, each with its default, and the check of those a host sets
        {"memory_app.conf"},
        {"memory_app.checks"},
        # the credential detector's format plugins and its rules about numbers
        {"memory_app.credential_formats", "memory_app.credential_numbers"},
        # the workspace files: their errors, their places and the no-follow walk, then what is
        # done with them (reads, locks, writes), then one user's `Workspace` with all of them
        {"memory_app.workspace.errors"},
        {"memory_app.workspace.paths"},
        {
            "memory_app.workspace.reads",
            "memory_app.workspace.locking",
            "memory_app.workspace.writes",
        },
        {"memory_app.workspace.user"},
        # leaves: the models, the file system, the names and limits everything shares
        {"memory_app", "memory_app.models", "memory_app.workspace", "memory_app.credentials"},
        {
            "memory_app.tool_names",
            "memory_app.memory_file",
            "memory_app.errors",
            "memory_app.api_edge",
            "memory_app.api_auth",
        },
        {
            "memory_app.context",
            "memory_app.authorization",
            "memory_app.locks",
            "memory_app.versions",
        },
        {"memory_app.login_sessions", "memory_app.line_origins"},
        # export and erasure: leaves and the conversations app only
        {"memory_app.user_data"},
        # the memory write and the reads: what an agent's write makes of the file and the
        # publish every writer shares; the agent's write, the user's writes, the switches
        {"memory_app.services.plan", "memory_app.services.publish", "memory_app.selectors"},
        {
            "memory_app.services.agent_write",
            "memory_app.services.user_writes",
            "memory_app.services.switches",
        },
        {"memory_app.services"},
        # what the agent is given: what a tool call answers, then the tools
        {"memory_app.tool_results"},
        {"memory_app.tools"},
        {"memory_app.middleware"},
        # the chat models: the scripted one, the OpenAI-compatible one on its HTTP client, and
        # the one the settings configure
        {"memory_app.llm.endpoint", "memory_app.llm.http_client", "memory_app.llm.language"},
        {"memory_app.llm.openai_compatible", "memory_app.llm.scripted"},
        {"memory_app.llm.settings"},
        {"memory_app.llm"},
        # the Chat service, part by part
        # the concurrency helpers: no run, graph or model
        {"memory_app.runtime.concurrency.caller_thread", "memory_app.runtime.graph_cache"},
        {"memory_app.runtime.concurrency.loop", "memory_app.runtime.limits"},
        {"memory_app.runtime.concurrency.relay", "memory_app.runtime.concurrency.settling"},
        {"memory_app.runtime.concurrency", "memory_app.runtime.context"},
        {"memory_app.runtime.errors", "memory_app.runtime.credential_check"},
        {"memory_app.runtime.replies", "memory_app.runtime.call_limit"},
        {"memory_app.runtime.guards"},
        {"memory_app.runtime.approval"},
        {"memory_app.runtime.entry_checks"},
        {"memory_app.runtime.graphs"},
        {"memory_app.runtime.turns"},
        {"memory_app.runtime.opening", "memory_app.runtime.agent_phase"},
        {"memory_app.runtime.closing"},
        {"memory_app.runtime.team", "memory_app.runtime.subagent"},
        {"memory_app.runtime.service"},
        {"memory_app.runtime.streaming"},
        {"memory_app.runtime"},
        # the page's template filters (leaves the templates load)
        {"memory_app.templatetags", "memory_app.templatetags.page_text"},
        # the HTTP API's parts: the shapes and how an error is answered, then the operations
        {"memory_app.api.schemas", "memory_app.api.errors"},
        {"memory_app.api.chat", "memory_app.api.memory", "memory_app.api.threads"},
        # the edges: HTTP, admin, commands, and the app configuration that wires signals
        {
            "memory_app.apps",
            "memory_app.api",
            "memory_app.admission",
            "memory_app.views",
            "memory_app.user_admin",
            "memory_app.management",
            "memory_app.management.commands",
            "memory_app.management.commands.memory",
        },
        # the per-user staff pages (the admin serves them; they link the mixin's records)
        {"memory_app.user_pages"},
        # the staff pages: the ledger's cells, the pages that show them, then the admin package
        {"memory_app.admin.ledger"},
        {"memory_app.admin.user_config", "memory_app.admin.runs"},
        {
            "memory_app.admin",
            "memory_app.management.commands.chat",
            "memory_app.management.commands.erase_user",
            # the app's URLs: the page and the API, for a host to include
            "memory_app.urls",
        },
    ],
    "conversations": [
        # the settings the app reads, each with its default
        {"conversations.conf"},
        # helpers both apps use
        {
            "conversations.utils",
            "conversations.utils.connections",
            "conversations.utils.db_functions",
            "conversations.utils.ids",
            "conversations.utils.invisible_text",
            "conversations.utils.log_format",
            "conversations.utils.statements",
            "conversations.utils.string_utils",
        },
        # a queryset compiled once, run through a prepared cursor
        {"conversations.utils.prepared"},
        {"conversations", "conversations.apps", "conversations.models"},
        # the host's user model: its name field, who counts as active (the erasure fence)
        {"conversations.users"},
        # how lookback reads a query's terms (standard library only)
        {"conversations.repository.terms"},
        # lookback's statements, its caps and the checks of what a caller passes
        {
            "conversations.repository.arguments",
            "conversations.repository.budgets",
            "conversations.repository.sql",
        },
        # lookback's two calls
        {"conversations.repository.read", "conversations.repository.search"},
        # the other reads: the memory writes waiting for a decision, and those that need not
        # know of them
        {
            "conversations.selectors.approvals",
            "conversations.selectors.staff",
            "conversations.selectors.stated_messages",
        },
        # the chat turn's reads, the thread pages and the export (each shows pending approvals)
        {
            "conversations.selectors.dialogue",
            "conversations.selectors.export",
            "conversations.selectors.pages",
        },
        # the owners of lookback, of the other reads and of the checkpoints: none imports another
        {"conversations.checkpoints", "conversations.repository", "conversations.selectors"},
        # the writes (settling or declining an approval reads its pending call and deletes
        # its checkpoints)
        {"conversations.services"},
        # run identity and leases, part by part: the refusals and the run row, the context its
        # tools receive and the lease rule, then starting, finishing, the run-for-tool check and
        # the lease keeper; the reaper (it declines expired approvals through the writes)
        {"conversations.runs.errors", "conversations.runs.rows"},
        {"conversations.runs.context", "conversations.runs.leases"},
        {
            "conversations.runs.starting",
            "conversations.runs.finishing",
            "conversations.runs.tool_lock",
            "conversations.runs.keeper",
        },
        {"conversations.runs.reaping"},
        {"conversations.runs"},
        # the read-only admin base both apps' admins build on
        {"conversations.admin_base"},
        # the staff pages: the columns and filters they share, then one module per model's page
        {"conversations.admin.columns"},
        {
            "conversations.admin.conversation",
            "conversations.admin.message",
            "conversations.admin.tool_call",
            "conversations.admin.agent_run",
            "conversations.management",
            "conversations.management.commands",
            "conversations.management.commands.fail_expired_runs",
        },
        # the package Django's admin autodiscovery imports: it imports the pages
        {"conversations.admin"},
    ],
    "yuxi_site": [
        {"yuxi_site", "yuxi_site.moved", "yuxi_site.utils"},
        # old paths of what moved into the apps, forwarding there for one release
        {
            "yuxi_site.admin",
            "yuxi_site.api_edge",
            "yuxi_site.errors",
            "yuxi_site.log_format",
            "yuxi_site.utils.connections",
            "yuxi_site.utils.db_functions",
            "yuxi_site.utils.ids",
            "yuxi_site.utils.statements",
            "yuxi_site.utils.string_utils",
        },
        # the login throttle and the middleware the settings name
        {
            "yuxi_site.content_security",
            "yuxi_site.login_throttle",
            "yuxi_site.middleware_chain",
            "yuxi_site.user_admin",
        },
        # warming a server process before it serves (health reports it, the entry points run it)
        {"yuxi_site.warmup"},
        {"yuxi_site.health", "yuxi_site.settings", "yuxi_site.wsgi", "yuxi_site.asgi"},
        {"yuxi_site.favicon"},
        # the demo data
        {
            "yuxi_site.demo",
            "yuxi_site.demo.apps",
            "yuxi_site.demo.management",
            "yuxi_site.demo.management.commands",
            "yuxi_site.demo.management.commands.seed_demo",
        },
        {"yuxi_site.urls"},
    ],
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    """Every module of the three packages, migrations aside (Django writes those)."""
    return {
        _module_name(path): path
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if "migrations" not in path.parts
    }


def _imported_modules(
    name: str, tree: ast.Module, known: set[str], *, is_package: bool = False
) -> set[str]:
    """The modules of `known` that module `name` imports (`from a import b` names the module
    `a.b` when that is one; a relative import is resolved from `name`'s package)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".") if is_package else name.split(".")[:-1]
                package = parts[: len(parts) - node.level + 1]
                base = ".".join([*package, *([base] if base else [])])
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                found.add(submodule if submodule in known else base)
    return (found & known) - {name}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {
        name: _imported_modules(
            name,
            ast.parse(path.read_text(encoding="utf-8")),
            known,
            is_package=path.name == "__init__.py",
        )
        for name, path in modules.items()
    }


def _circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(group)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _late_imports(tree: ast.Module, *, app_config: bool = False) -> Iterator[int]:
    """Lines of imports inside a function or class, or below a module's first statement that
    is not an import (its docstring and `__future__` aside).

    An app configuration's `ready()` is the one exception (`app_config`): Django documents it as
    the place to import what connects signals, since models cannot load before the registry.
    """
    ready = {
        id(inner)
        for node in ast.walk(tree)
        if app_config and isinstance(node, ast.ClassDef)
        for item in node.body
        if isinstance(item, ast.FunctionDef) and item.name == "ready"
        for inner in ast.walk(item)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            for inner in ast.walk(node):
                if isinstance(inner, ast.Import | ast.ImportFrom) and id(inner) not in ready:
                    yield inner.lineno
    code_started = False
    for index, node in enumerate(tree.body):
        is_docstring = (
            index == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        )
        if isinstance(node, ast.Import | ast.ImportFrom):
            if code_started:
                yield node.lineno
        elif not is_docstring:
            code_started = True


def test_there_is_no_import_circle():
    assert _circles(_graph()) == []


def test_no_module_imports_inside_a_function_or_below_its_code():
    late = {
        (name, line)
        for name, path in _modules().items()
        for line in _late_imports(
            ast.parse(path.read_text(encoding="utf-8")), app_config=name.endswith(".apps")
        )
    }
    assert late == set()


def _layer_of() -> dict[str, tuple[str, int]]:
    return {
        module: (app, rank)
        for app, layers in LAYERS.items()
        for rank, modules in enumerate(layers)
        for module in modules
    }


def test_every_module_has_a_layer():
    assert set(_modules()) == set(_layer_of())


def test_inside_each_app_imports_run_down_the_layers():
    layer = _layer_of()
    upward = {
        (importer, imported)
        for importer, targets in _graph().items()
        for imported in targets
        if layer[imported][0] == layer[importer][0] and layer[imported][1] >= layer[importer][1]
    }
    assert upward == set()


@pytest.mark.parametrize(
    ("graph", "circles"),
    [
        ({"a": {"b"}, "b": {"a"}}, [{"a", "b"}]),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [{"a", "b", "c"}]),
        ({"a": {"b"}, "b": set()}, []),
    ],
)
def test_a_circle_of_any_length_is_found(graph, circles):
    assert _circles(graph) == circles


@pytest.mark.parametrize(
    ("source", "lines"),
    [
        ("import os\n\ndef f():\n    import json\n", [4]),
        ("import os\n\nX = 1\nfrom json import dumps\n", [4]),
        ('"""Doc."""\nimport os\nfrom json import dumps\n\nX = 1\n', []),
    ],
)
def test_a_function_local_or_bottom_of_file_import_is_seen(source, lines):
    assert list(_late_imports(ast.parse(source))) == lines


def test_a_relative_import_is_resolved_from_the_modules_package():
    tree = ast.parse("from . import services\nfrom .runtime import turns\n")
    known = {"memory_app.services", "memory_app.runtime.turns", "memory_app.x"}
    expected = {"memory_app.services", "memory_app.runtime.turns"}
    assert _imported_modules("memory_app.x", tree, known) == expected
    assert _imported_modules("memory_app", tree, known, is_package=True) == expected


def test_a_from_import_of_a_submodule_is_an_edge_to_that_module():
    tree = ast.parse("from memory_app import services\nfrom memory_app.runtime import chat\n")
    known = {"memory_app.services", "memory_app.runtime", "memory_app.x"}
    assert _imported_modules("memory_app.x", tree, known) == {
        "memory_app.services",
        "memory_app.runtime",
    }
