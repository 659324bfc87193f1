"""The helpers that moved from the site into the apps still import from their old paths, for
one release: the same objects, with a DeprecationWarning that names the new path."""

import importlib

import pytest

MOVED = [
    ("yuxi_site.utils.string_utils", "conversations.utils.string_utils", "truncate_utf8"),
    ("yuxi_site.utils.string_utils", "conversations.utils.string_utils", "is_storable_text"),
    ("yuxi_site.utils.connections", "conversations.utils.connections", "release_connection"),
    ("yuxi_site.utils.connections", "conversations.utils.connections", "direct_connection"),
    ("yuxi_site.utils.connections", "conversations.utils.connections", "in_worker_thread"),
    ("yuxi_site.utils.statements", "conversations.utils.statements", "count_statements"),
    ("yuxi_site.utils.ids", "conversations.utils.ids", "parse_uid"),
    ("yuxi_site.utils.db_functions", "conversations.utils.db_functions", "ClockTimestamp"),
    ("yuxi_site.log_format", "conversations.utils.log_format", "KeyValueFormatter"),
    ("yuxi_site.admin", "conversations.admin_base", "ReadOnlyAdmin"),
    ("yuxi_site.api_edge", "memory_app.api_edge", "ApiEdgeMiddleware"),
    ("yuxi_site.errors", "memory_app.api_edge", "API_UNAVAILABLE_MESSAGE"),
    ("yuxi_site.errors", "memory_app.api_edge", "server_error"),
]


@pytest.mark.parametrize(("old", "new", "name"), MOVED)
def test_an_old_path_gives_the_moved_object_and_warns_with_the_new_path(old, new, name):
    with pytest.warns(DeprecationWarning, match=rf"moved to {new}\.{name}"):
        found = getattr(importlib.import_module(old), name)
    assert found is getattr(importlib.import_module(new), name)


def test_a_from_import_of_an_old_path_warns_at_the_importing_line():
    with pytest.warns(DeprecationWarning) as warned:
        exec("from yuxi_site.utils.string_utils import truncate_utf8", {"__name__": "caller"})
    assert warned[0].filename == "<string>"


def test_a_name_the_new_module_lacks_is_no_attribute_of_the_old_one():
    with pytest.raises(ImportError):
        exec("from yuxi_site.utils.string_utils import no_such_helper", {})
