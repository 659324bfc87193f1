"""The database made unreachable for a test, the way an outage looks to the app, or reached
through a pooler, the way a host behind PgBouncer reaches it."""

import contextlib
import copy
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection

from conversations import checkpoints
from memory_app.runtime.concurrency.loop import run_sync

# How long a request waits for a pooled connection while the database is down (seconds).
OUTAGE_POOL_TIMEOUT = 0.5


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def unreachable_database() -> Iterator[None]:
    """Point this thread's default connection at a closed port, then back.

    The connection pool keeps the parameters it was built with, so it is closed on the way in
    and out: the outage starts at once, and recovery is the app connecting afresh.
    """
    saved = copy.deepcopy(connection.settings_dict)
    connection.close()
    connection.close_pool()
    connection.settings_dict.update(HOST="127.0.0.1", PORT=str(closed_port()))
    pool = connection.settings_dict["OPTIONS"].get("pool")
    if isinstance(pool, dict):
        connection.settings_dict["OPTIONS"]["pool"] = {**pool, "timeout": OUTAGE_POOL_TIMEOUT}
    try:
        yield
    finally:
        connection.close()
        connection.close_pool()
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)


@contextmanager
def through_pgbouncer(port: int) -> Iterator[None]:
    """Point the default connection (Django's pool, the checkpointers' pools, every direct
    connection) at a PgBouncer on `port`, as a host behind one has it: the same database,
    `DISABLE_SERVER_SIDE_CURSORS`. The caller sets `DATABASE_POOL_MODE` itself."""
    saved = copy.deepcopy(connection.settings_dict)
    connection.close()
    connection.close_pool()
    checkpoints.close_checkpointer()
    run_sync(checkpoints.close_async_checkpointer())  # the process loop's saver
    connection.settings_dict.update(
        HOST="127.0.0.1", PORT=str(port), DISABLE_SERVER_SIDE_CURSORS=True
    )
    try:
        yield
    finally:
        connection.close()
        connection.close_pool()
        checkpoints.close_checkpointer()
        run_sync(checkpoints.close_async_checkpointer())
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)


class Relay:
    """A TCP relay on a loopback `port` to PostgreSQL at `target`, which a test stops (every
    relayed connection cut, new ones refused: the server restarting, or refusing clients) and
    starts again."""

    def __init__(self, port: int, target: tuple[str, int]) -> None:
        self.port = port
        self.target = target
        self._listener: socket.socket | None = None
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()

    def start(self) -> None:
        if self._listener is not None:
            return
        listener = socket.create_server(("127.0.0.1", self.port), reuse_port=False)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def stop(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            sockets, self._open = self._open, set()
        if listener is not None:
            listener.close()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # stopped
            try:
                server = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._listener is not listener:
                    client.close()
                    server.close()
                    return
                self._open |= {client, server}
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
