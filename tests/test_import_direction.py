"""Imports run one way: memory_app -> conversations -> yuxi_site.

`conversations` never imports `memory_app`; `yuxi_site` imports neither app, except where it
wires the site together (stated below). Every import statement counts, including those inside
functions.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("memory_app", "conversations", "yuxi_site")
# What each package may not import.
FORBIDDEN = {
    "memory_app": set(),
    "conversations": {"memory_app"},
    "yuxi_site": {"memory_app", "conversations"},
}
# The URL configuration routes requests to the apps' views: site wiring, not a dependency of
# the site's utilities on an app.
WIRING = {"yuxi_site/urls.py"}


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
            if name in WIRING:
                continue
            for imported in _imported_packages(path, package) & FORBIDDEN[package]:
                violations.add((name, imported))
    return violations


def test_imports_run_from_memory_app_to_conversations_to_yuxi_site():
    assert _violations() == set()


@pytest.mark.parametrize(
    ("source", "package", "found"),
    [
        ("from memory_app.selectors import x", "conversations", {"memory_app"}),
        ("def f():\n    import memory_app.services\n", "conversations", {"memory_app"}),
        ("from . import models", "conversations", {"conversations"}),
        ("from .utils import ids", "yuxi_site", {"yuxi_site"}),
    ],
)
def test_every_kind_of_import_is_seen(tmp_path, source, package, found):
    path = tmp_path / "module.py"
    path.write_text(source, encoding="utf-8")
    assert _imported_packages(path, package) == found
