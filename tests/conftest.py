from collections.abc import Iterator

import pytest
from django.db import connection, connections
from django.test import override_settings
from django.utils import translation

from conversations import checkpoints
from memory_app.runtime.concurrency.loop import run_sync
from tests.database import through_pgbouncer
from tests.factories import StaffUserFactory
from tests.pgbouncer import TEST_PORT, PgBouncer, pgbouncer_missing
from tests.wire_model import WireModel
from yuxi_site import warmup


@pytest.fixture(scope="session", autouse=True)
def _apps_own_static_files(tmp_path_factory) -> Iterator[None]:
    """Static files as the apps hold them, never a developer's collected copy: whitenoise
    serves STATIC_ROOT first, which `./scripts/serve` fills (var/static), so a browser test
    after an edit of the page's script would run the old one. Session-wide: the live server's
    middleware reads it once, when it starts."""
    with override_settings(STATIC_ROOT=str(tmp_path_factory.mktemp("static-root"))):
        yield


@pytest.fixture(autouse=True)
def _fast_and_isolated(settings, tmp_path):
    """Cheap password hashing, a private workspace root and the scripted model for every test."""
    settings.LLM_BASE_URL = ""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.WORKSPACE_ROOT = tmp_path / "workspaces"


@pytest.fixture(autouse=True)
def _default_language():
    """Every test starts in the default language: the one a request activated stays active in
    the test's thread (Django's LocaleMiddleware never deactivates it), and a turn run outside
    a request answers in the active one (the demo model speaks it)."""
    translation.deactivate()


@pytest.fixture
def wire_model(settings, _fast_and_isolated) -> Iterator[WireModel]:
    """A local OpenAI-compatible server the app's model talks to (`LLM_BASE_URL` points at it),
    answering like the scripted model unless the test queues or scripts its replies."""
    with WireModel() as model:
        settings.LLM_BASE_URL = model.url
        settings.LLM_API_KEY = "wire-key"
        settings.LLM_MODEL = "wire-model"
        settings.LLM_TIMEOUT_SECONDS = 10.0
        settings.LLM_MAX_RETRIES = 1
        yield model


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
def _a_warm_process(django_db_setup, django_db_blocker):
    """The test process answers requests as a server's warm worker does (`/healthz` answers
    only once the process has warmed up, as `yuxi_site.asgi` and `yuxi_site.wsgi` do on load)."""
    with django_db_blocker.unblock():
        warmup.warm_up()


@pytest.fixture(autouse=True, scope="session")
def _checkpoint_pool_closed_at_the_end(django_db_setup):
    """The checkpointers' own pools hold connections to the test database: close them before
    pytest-django drops that database."""
    yield
    checkpoints.close_checkpointer()
    run_sync(checkpoints.close_async_checkpointer())  # the process loop's saver


@pytest.fixture(scope="session")
def pgbouncer(django_db_setup) -> Iterator[PgBouncer]:
    """A real PgBouncer in transaction mode in front of the test database's server (skipped,
    saying why, only where Debian's pgbouncer is not installed: CI installs it)."""
    if reason := pgbouncer_missing():
        pytest.skip(reason)
    params = connection.settings_dict
    with PgBouncer(
        port=TEST_PORT,
        server_host=params["HOST"] or "127.0.0.1",
        server_port=int(params["PORT"] or 5432),
        pool_size=4,
    ) as bouncer:
        yield bouncer


@pytest.fixture
def transaction_pooled(pgbouncer, settings) -> Iterator[PgBouncer]:
    """This test's database work through `pgbouncer`, configured as docs/integration.md tells
    a host behind a transaction-mode pooler: `DATABASE_POOL_MODE = "transaction"` and
    Django's `DISABLE_SERVER_SIDE_CURSORS`."""
    settings.DATABASE_POOL_MODE = "transaction"
    with through_pgbouncer(pgbouncer.port):
        pgbouncer.warm(connection.settings_dict["NAME"])
        yield pgbouncer
