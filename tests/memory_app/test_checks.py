"""`manage.py check` names what a host forgot to give the apps."""

import subprocess
import sys

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from memory_app.checks import (
    dependency_apps_check,
    deploy_model_check,
    host_settings_check,
    page_needs_check,
)


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


def _ids(messages) -> list[str]:
    return [message.id for message in messages]


def test_a_workspace_root_that_is_a_file_fails_the_check(settings, tmp_path):
    settings.WORKSPACE_ROOT = tmp_path / "a-file"
    settings.WORKSPACE_ROOT.write_text("not a directory")
    [error] = host_settings_check()
    assert error.id == "memory_app.E003" and "not a directory" in error.msg


def test_a_workspace_root_under_a_file_fails_the_check(settings, tmp_path):
    (tmp_path / "a-file").write_text("x")
    settings.WORKSPACE_ROOT = tmp_path / "a-file" / "workspaces"
    assert _ids(host_settings_check()) == ["memory_app.E003"]


def test_a_creatable_workspace_root_passes_and_the_probe_leaves_nothing(settings, tmp_path):
    settings.WORKSPACE_ROOT = tmp_path / "new" / "workspaces"
    assert host_settings_check() == []
    assert list(tmp_path.iterdir()) == []


def test_the_page_needs_are_warnings(settings):
    settings.MIDDLEWARE = [m for m in settings.MIDDLEWARE if "LocaleMiddleware" not in m]
    settings.LOGIN_URL = "no-such-url-name"
    assert _ids(page_needs_check()) == ["memory_app.W001", "memory_app.W002"]


def test_a_login_url_path_nothing_serves_is_a_warning(settings):
    settings.LOGIN_URL = "/no/such/login/"
    assert _ids(page_needs_check()) == ["memory_app.W002"]


def test_the_reference_site_meets_the_page_needs():
    assert page_needs_check() == []


def test_no_model_with_debug_off_is_a_deploy_warning(settings):
    settings.DEBUG = False
    settings.LLM_BASE_URL = ""
    assert _ids(deploy_model_check()) == ["memory_app.W003"]
    settings.LLM_BASE_URL = "http://127.0.0.1:9/v1"
    assert deploy_model_check() == []


@pytest.mark.parametrize("missing", ["ninja"])
def test_a_missing_dependency_app_is_an_error(settings, missing):
    settings.INSTALLED_APPS = [app for app in settings.INSTALLED_APPS if app != missing]
    [error] = dependency_apps_check()
    assert error.id == "memory_app.E004" and repr(missing) in error.msg


def test_transaction_pooling_without_djangos_server_side_cursors_off_fails_the_check(
    settings, monkeypatch
):
    settings.DATABASE_POOL_MODE = "transaction"
    monkeypatch.delitem(settings.DATABASES["default"], "DISABLE_SERVER_SIDE_CURSORS", raising=False)
    [error] = host_settings_check()
    assert error.id == "memory_app.E005" and "DISABLE_SERVER_SIDE_CURSORS" in error.hint
    monkeypatch.setitem(settings.DATABASES["default"], "DISABLE_SERVER_SIDE_CURSORS", True)
    assert host_settings_check() == []


def test_an_unknown_pool_mode_fails_the_check(settings):
    settings.DATABASE_POOL_MODE = "statement"
    [error] = host_settings_check()
    assert error.id == "memory_app.E006" and "'statement'" in error.msg


@pytest.mark.parametrize("missing", ["conversations", "django.contrib.sessions"])
def test_a_host_without_an_app_the_models_need_is_told_to_add_it_not_shown_a_traceback(missing):
    # The app registry loads models before any system check can run: a process of its own.
    installed = [
        "django.contrib.auth",
        "django.contrib.contenttypes",
        "django.contrib.sessions",
        "ninja",
        "conversations",
        "memory_app",
    ]
    installed.remove(missing)
    script = (
        "import django\n"
        "from django.conf import settings\n"
        f"settings.configure(INSTALLED_APPS={installed!r})\n"
        "django.setup()\n"
    )
    finished = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert finished.returncode != 0
    last_line = finished.stderr.strip().splitlines()[-1]
    assert last_line.startswith("django.core.exceptions.ImproperlyConfigured: memory_app needs")
    assert f"{missing!r} in INSTALLED_APPS" in last_line
