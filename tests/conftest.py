import pytest


@pytest.fixture(autouse=True)
def _fast_and_isolated(settings, tmp_path):
    """Cheap password hashing, and a private workspace root for every test."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.WORKSPACE_ROOT = tmp_path / "workspaces"
