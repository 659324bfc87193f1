"""Every module says what it owns, in its docstring."""

import ast

import pytest

from tests.test_import_direction import _modules


@pytest.mark.parametrize("name", sorted(_modules()))
def test_every_module_has_a_docstring(name):
    tree = ast.parse(_modules()[name].read_text(encoding="utf-8"))
    assert (ast.get_docstring(tree) or "").strip()
