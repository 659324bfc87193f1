"""Modules stay small enough to own one concern: no module of the two apps over 500 lines
(migrations aside), none of the runtime over 300. A module that grows past its bound is split
into a package by concern rather than let through."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
APP_MODULE_MAX_LINES = 500
RUNTIME_MODULE_MAX_LINES = 300


def _modules(folder: str) -> list[Path]:
    return sorted(path for path in (ROOT / folder).rglob("*.py") if "migrations" not in path.parts)


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


@pytest.mark.parametrize(
    ("folder", "bound"),
    [
        ("memory_app", APP_MODULE_MAX_LINES),
        ("conversations", APP_MODULE_MAX_LINES),
        ("memory_app/runtime", RUNTIME_MODULE_MAX_LINES),
    ],
)
def test_no_module_passes_its_bound(folder, bound):
    modules = _modules(folder)
    assert modules
    sizes = {path.relative_to(ROOT).as_posix(): _lines(path) for path in modules}
    assert {name: n for name, n in sizes.items() if n > bound} == {}
