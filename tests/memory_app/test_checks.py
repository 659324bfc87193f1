"""`manage.py check` names what a host forgot to give the apps."""

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from memory_app.checks import host_settings_check


def test_the_reference_settings_pass():
    assert host_settings_check() == []


def test_a_missing_workspace_root_fails_the_check_with_its_name(settings):
    del settings.WORKSPACE_ROOT
    assert [error.id for error in host_settings_check()] == ["memory_app.E001"]
    with pytest.raises(SystemCheckError, match="WORKSPACE_ROOT is not set"):
        call_command("check")


def test_a_database_that_is_not_postgresql_fails_the_check(monkeypatch):
    # Only the settings' entry changes: the open connections keep their own copy.
    monkeypatch.setitem(settings.DATABASES["default"], "ENGINE", "django.db.backends.sqlite3")
    [error] = host_settings_check()
    assert error.id == "memory_app.E002"
    assert "sqlite3" in error.msg


def test_transaction_pooling_without_djangos_server_side_cursors_off_fails_the_check(
    settings, monkeypatch
):
    settings.DATABASE_POOL_MODE = "transaction"
    monkeypatch.delitem(settings.DATABASES["default"], "DISABLE_SERVER_SIDE_CURSORS", raising=False)
    [error] = host_settings_check()
    assert error.id == "memory_app.E003" and "DISABLE_SERVER_SIDE_CURSORS" in error.hint
    monkeypatch.setitem(settings.DATABASES["default"], "DISABLE_SERVER_SIDE_CURSORS", True)
    assert host_settings_check() == []


def test_an_unknown_pool_mode_fails_the_check(settings):
    settings.DATABASE_POOL_MODE = "statement"
    [error] = host_settings_check()
    assert error.id == "memory_app.E004" and "'statement'" in error.msg
