import pytest

from tests.factories import StaffUserFactory


@pytest.fixture(autouse=True)
def _fast_and_isolated(settings, tmp_path):
    """Cheap password hashing, a private workspace root and the scripted model for every test."""
    settings.LLM_BASE_URL = ""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.WORKSPACE_ROOT = tmp_path / "workspaces"


@pytest.fixture
def staff_client(client):
    """A test client logged in as a staff superuser, who may view every admin page."""
    client.force_login(StaffUserFactory())
    return client
