"""Operations: the settings, and the workspace root read at call time."""

from pathlib import Path

import pytest
from django.conf import settings as django_settings

from memory_app.services import remember_memory
from tests.factories import context_for


def test_the_spec_settings_exist_and_are_listed_in_env_example():
    example = (Path(django_settings.BASE_DIR) / ".env.example").read_text()
    for name in (
        "DATABASE_URL",
        "WORKSPACE_ROOT",
        "SECRET_KEY",
        "DEBUG",
        "AGENT_RUN_LEASE_SECONDS",
        "MEMORY_LOCK_TIMEOUT_MS",
    ):
        assert f"\n{name}=" in f"\n{example}"
    assert "MEMORY_LOCK_TIMEOUT_MS=5000" in example.split("\n")
    for name in ("WORKSPACE_ROOT", "SECRET_KEY", "DEBUG", "AGENT_RUN_LEASE_SECONDS"):
        assert hasattr(django_settings, name)
    assert django_settings.DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql"


@pytest.mark.django_db
def test_workspace_root_is_read_at_call_time(settings, run, tmp_path):
    settings.WORKSPACE_ROOT = tmp_path / "moved"
    remember_memory(context_for(run), "Moved fact.")
    assert (tmp_path / "moved" / str(run.user_id) / "agents" / "MEMORY.md").read_bytes() == (
        b"Moved fact.\n"
    )


def test_the_pooling_settings_are_listed_in_env_example_with_their_defaults():
    example = (Path(django_settings.BASE_DIR) / ".env.example").read_text().split("\n")
    for line in (
        "DATABASE_POOL_MODE=session",
        "DATABASE_DIRECT_URL=",
        "DATABASE_POOL_MAX_SIZE=16",
        "DATABASE_POOL_MIN_SIZE=1",
        "DATABASE_POOL_TIMEOUT=10",
    ):
        assert line in example
    assert django_settings.DATABASE_POOL_MODE == "session"
