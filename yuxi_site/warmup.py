"""Warming a server process before it serves: `warm_up()` then `is_warm()` (what `/healthz`
reports).

A fresh worker would otherwise pay on its first request for importing the URLconf and every
module it routes to (the API, the runtime, LangChain: seconds), and under ASGI Django resolves
the URL on the event loop, so every request of that worker would wait. `yuxi_site.asgi` and
`yuxi_site.wsgi` warm the process when the server loads them, before it accepts a connection.
"""

import logging
import threading

from django.db import DatabaseError, connections
from django.urls import reverse
from django.utils.module_loading import import_string

__all__ = ["is_warm", "warm_up"]

logger = logging.getLogger("yuxi.warmup")

_warm = threading.Event()

# What the apps prepare before the process serves, by name: the entry points import this
# module before Django is set up, when the apps' modules cannot be imported yet.
APP_WARM_UPS = ("memory_app.runtime.warm_up_graphs",)


def warm_up() -> None:
    """Import the URLconf and everything it routes to, build its reverse index, compile the
    chat agent's graphs for the configured model, and open the database pool (a connection
    taken and handed back). A database that is down does not keep the process cold:
    `/healthz` reports it on its own round trip, and the pool opens once the database is
    back."""
    reverse("healthz")  # imports ROOT_URLCONF and its includes, and indexes every route
    for name in APP_WARM_UPS:  # the chat agent's graphs: a burst of first turns compiles none
        import_string(name)()
    # On a thread of its own: a server may load the application from inside its event loop
    # (plain `uvicorn` does), where Django refuses database calls.
    opener = threading.Thread(target=_open_pools, name="yuxi-warmup")
    opener.start()
    opener.join()
    _warm.set()


def _open_pools() -> None:
    """Open each database's pool; a database without one (the `direct` database, for
    `migrate` only) is not connected: nothing of such a connection outlives its close, and
    behind a pooler it would be one more PostgreSQL backend per worker start."""
    for alias in connections:
        if not connections[alias].settings_dict.get("OPTIONS", {}).get("pool"):
            continue
        try:
            connections[alias].ensure_connection()
        except DatabaseError:
            logger.warning("database %r unreachable while warming up", alias)
        finally:
            connections[alias].close()  # back to the pool, which stays open


def is_warm() -> bool:
    """Whether `warm_up()` has finished in this process."""
    return _warm.is_set()
