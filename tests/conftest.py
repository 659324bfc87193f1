import pytest
from django.db import connection, connections

from conversations import checkpoints
from memory_app.runtime.loop import run_sync
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


@pytest.fixture(autouse=True)
def _fresh_pool_after_a_leak():
    """A test thread that ends without closing its connection takes a pool slot for good
    (psycopg_pool never reclaims a connection dropped while checked out): after such a test,
    the next one gets a fresh pool rather than a depleted one. Only this test thread's own
    connection may still be out once a test is over."""
    yield
    pool = connections["default"].pool
    if pool is None or pool.closed or connection.in_atomic_block:
        return
    stats = pool.get_stats()
    if stats["pool_size"] - stats["pool_available"] > 1:
        connections["default"].close_pool()


@pytest.fixture(autouse=True, scope="session")
def _checkpoint_pool_closed_at_the_end(django_db_setup):
    """The checkpointers' own pools hold connections to the test database: close them before
    pytest-django drops that database."""
    yield
    checkpoints.close_checkpointer()
    run_sync(checkpoints.close_async_checkpointer())  # the process loop's saver
