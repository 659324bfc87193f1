"""A server process warms up (URLconf, app registry, graphs, database pool) before it serves,
and `/healthz` answers only once it has."""

import json
import os
import subprocess
import sys
import threading

import pytest
from django.conf import settings
from django.db import connections
from django.test import Client

from tests.database import closed_port
from tests.servers import test_database_url
from yuxi_site import warmup

ROOT = settings.BASE_DIR

# Loads the entry point as a server does (plain uvicorn loads it from inside its event loop),
# then reports what the process holds before its first request.
_LOAD = """
import asyncio, importlib, json, sys
from django.db import connections
async def serve():
    importlib.import_module(sys.argv[1])
asyncio.run(serve()) if sys.argv[1].endswith("asgi") else importlib.import_module(sys.argv[1])
from yuxi_site.warmup import is_warm
from memory_app.runtime.graphs import _SHARED_GRAPHS
stats = connections["default"].pool.get_stats()
print(json.dumps({
    "warm": is_warm(),
    "modules": sorted(m for m in ("yuxi_site.urls", "memory_app.api", "memory_app.runtime",
                                  "langchain.agents", "langchain_openai") if m in sys.modules),
    "pooled": stats["pool_size"],
    "graphs": len(_SHARED_GRAPHS),
}))
"""


@pytest.mark.django_db
@pytest.mark.parametrize("entry_point", ["yuxi_site.asgi", "yuxi_site.wsgi"])
def test_loading_the_application_warms_the_process_before_its_first_request(entry_point):
    env = {**os.environ, "DATABASE_URL": test_database_url()}
    loaded = subprocess.run(
        [sys.executable, "-c", _LOAD, entry_point],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    report = json.loads(loaded.stdout.strip().splitlines()[-1])
    assert report["warm"] is True
    assert report["modules"] == [
        "langchain.agents",
        "langchain_openai",
        "memory_app.api",
        "memory_app.runtime",
        "yuxi_site.urls",
    ]
    assert report["pooled"] >= 1  # the pool is open, a connection made
    assert report["graphs"] == 3  # the chat agent's, memory on and off, and the sub-agent's


@pytest.mark.django_db
def test_healthz_answers_503_until_the_process_is_warm(monkeypatch):
    monkeypatch.setattr(warmup, "_warm", threading.Event())
    response = Client().get("/healthz")
    assert (response.status_code, response.json()) == (503, {"warm": False})
    assert response["Content-Type"] == "application/json"
    warmup.warm_up()
    response = Client().get("/healthz")
    assert (response.status_code, response.json()) == (200, {"database": "ok"})


@pytest.mark.django_db(transaction=True)
def test_a_database_without_a_pool_is_not_connected_while_warming_up(settings, monkeypatch, caplog):
    # The `direct` database for migrate, here on a port nothing listens on: a connection
    # attempt would be logged as unreachable.
    direct = {**settings.DATABASES["default"], "OPTIONS": {}, "PORT": str(closed_port())}
    monkeypatch.setitem(settings.DATABASES, "direct", direct)
    monkeypatch.setattr(connections, "_settings", connections.configure_settings(None))
    with caplog.at_level("WARNING", logger=warmup.logger.name):
        warmup._open_pools()
    assert "unreachable" not in caplog.text
