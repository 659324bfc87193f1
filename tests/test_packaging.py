"""The distribution `yuxi-memory` (pyproject.toml's `[project]`) declares what the two apps
import, in ranges that admit the versions requirements.txt pins (the ones every test here runs
on; what they pull in, as installed). `scripts/check-install` builds the wheel itself and
installs it into a host."""

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import memory_app

ROOT = Path(__file__).resolve().parent.parent
APPS = ("memory_app", "conversations")
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
DECLARED = {
    canonicalize_name(Requirement(line).name): Requirement(line) for line in PROJECT["dependencies"]
}


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        if "==" in line:
            requirement = Requirement(line)
            pins[canonicalize_name(requirement.name)] = str(requirement.specifier).removeprefix(
                "=="
            )
    return pins


def _imported_top_levels() -> set[str]:
    found = set()
    for app in APPS:
        for path in (ROOT / app).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    found |= {alias.name.split(".")[0] for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and not node.level:
                    found.add((node.module or "").split(".")[0])
    return found - set(APPS) - set(sys.stdlib_module_names)


def test_the_distribution_is_yuxi_memory_with_one_version_source():
    assert PROJECT["name"] == "yuxi-memory"
    assert "version" not in PROJECT and PROJECT["dynamic"] == ["version"]
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    source = pyproject["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    assert source == "memory_app.__version__"


def test_the_changelogs_newest_entry_is_the_version():
    headings = re.findall(r"^## (\S+)$", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert headings[0] == memory_app.__version__


def test_psycopg_is_required_without_forcing_its_binary_build():
    assert "binary" not in DECLARED["psycopg"].extras
    [binary] = PROJECT["optional-dependencies"]["binary"]
    assert Requirement(binary).extras == {"binary"}


def test_the_distribution_has_licence_metadata():
    assert PROJECT["license"] and (ROOT / "LICENSE").is_file()
    assert all((ROOT / name).is_file() for name in PROJECT["license-files"])


@pytest.mark.parametrize("name", sorted(DECLARED))
def test_each_dependency_range_admits_the_pinned_or_installed_version(name):
    """Pinned in requirements.txt, or pulled in by what is pinned there (then as installed)."""
    version = _pins().get(name) or importlib.metadata.version(name)
    assert DECLARED[name].specifier.contains(version, prereleases=True)


def test_every_package_the_apps_import_comes_from_a_declared_dependency():
    providers = importlib.metadata.packages_distributions()
    undeclared = {
        module: providers.get(module)
        for module in _imported_top_levels()
        if not {canonicalize_name(d) for d in providers.get(module, [])} & set(DECLARED)
    }
    assert undeclared == {}


def test_the_apps_import_third_party_packages_at_all():
    assert {"django", "langchain", "psycopg"} <= _imported_top_levels()
