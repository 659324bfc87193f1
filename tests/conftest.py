import pytest


@pytest.fixture(autouse=True)
def _fast_and_isolated(settings, tmp_path):
    """Cheap password hashing, a private workspace root and the scripted model for every test."""
    settings.LLM_BASE_URL = ""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.WORKSPACE_ROOT = tmp_path / "workspaces"
