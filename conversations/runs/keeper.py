"""The process's lease keeper: one background thread renewing, in one statement per beat, the
lease of every run the process holds, and telling each run's owner when its lease is lost."""

import logging
import os
import threading
import time

import psycopg
from django.db import DatabaseError

from conversations.conf import setting
from conversations.runs.leases import LEASE_VALID_SQL
from conversations.runs.rows import RUN_TABLE
from conversations.utils.connections import direct_connection

_HELD = "(run_id, worker_id) IN (SELECT * FROM unnest(%s::uuid[], %s::text[]))"
# Renews every run the process holds in one statement. A row a tool holds locked is skipped
# (busy), never waited on: the keeper must not stall behind a memory write.
_RENEW_SQL = f"""
    UPDATE {RUN_TABLE} SET lease_expires_at = clock_timestamp() + %s * interval '1 second'
    WHERE id IN (
        SELECT id FROM {RUN_TABLE} WHERE {_HELD} AND {LEASE_VALID_SQL}
        FOR NO KEY UPDATE SKIP LOCKED
    )
    RETURNING run_id::text
"""
# Of the runs not renewed, those whose lease still holds: skipped because busy, retried.
_STILL_HELD_SQL = f"SELECT run_id::text FROM {RUN_TABLE} WHERE {_HELD} AND {LEASE_VALID_SQL}"

keeper_logger = logging.getLogger("yuxi.runs")
# How many given-up runs a process remembers as lost (their leases lapse within a minute).
LOST_RUNS_REMEMBERED = 10000
# Longest the keeper sleeps before looking at the clock and the lease setting again.
KEEPER_SLICE_SECONDS = 1.0


class LeaseKeeper:
    """One background thread per process renewing the leases of every run the process holds.

    Renewal is one statement per beat (a third of `AGENT_RUN_LEASE_SECONDS`) over the
    keeper's own connection, whatever the number of runs; the connection is closed whenever
    the process holds no run. A run whose row is gone, finished, taken over or expired has
    lost its lease: its `lease_lost` event is set and it is renewed no more.
    """

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._lock = threading.Lock()
        self._runs: dict[str, tuple[str, threading.Event]] = {}
        # Runs given up after losing their lease, oldest first (a dict as an ordered set).
        self._lost: dict[str, None] = {}
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._conn: psycopg.Connection | None = None
        # Held while the connection is in use or being closed.
        self._conn_lock = threading.Lock()

    def register(self, *, run_id: str, worker_id: str) -> threading.Event:
        """Keep `run_id`'s lease alive from now on; the event is set if the lease is lost."""
        lost = threading.Event()
        with self._lock:
            self._runs[str(run_id)] = (worker_id, lost)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="lease-keeper", daemon=True)
                self._thread.start()
        return lost

    def unregister(self, run_id: str) -> None:
        """Stop renewing `run_id` (its owner finished or abandoned it); the last one out closes
        the keeper's connection, so an idle process holds none. A lost run stays known as lost,
        so its tools keep refusing while its stale lease runs out in the database."""
        with self._lock:
            entry = self._runs.pop(str(run_id), None)
            if entry is not None and entry[1].is_set():
                self._lost[str(run_id)] = None
                while len(self._lost) > LOST_RUNS_REMEMBERED:
                    del self._lost[next(iter(self._lost))]
            idle = not self._runs
        if idle:
            with self._conn_lock:
                self._close()

    def lease_lost(self, run_id: str) -> bool:
        """Whether this process held `run_id` and learned that its lease is lost."""
        with self._lock:
            held = self._runs.get(str(run_id))
            return str(run_id) in self._lost or (held is not None and held[1].is_set())

    def lost_event(self, run_id: str) -> threading.Event | None:
        """The event set when `run_id`'s lease is lost; None when the process does not hold it."""
        with self._lock:
            held = self._runs.get(str(run_id))
        return held[1] if held is not None else None

    def _loop(self) -> None:
        last_beat = time.monotonic()
        while True:
            # Waits in short slices, so a shorter lease setting takes effect within one.
            due = last_beat + setting("AGENT_RUN_LEASE_SECONDS") / 3
            woken = self._wake.wait(min(max(due - time.monotonic(), 0), KEEPER_SLICE_SECONDS))
            if not woken and time.monotonic() < due:
                continue
            self._wake.clear()
            last_beat = time.monotonic()
            with self._lock:
                held = {
                    run: worker for run, (worker, lost) in self._runs.items() if not lost.is_set()
                }
            if not held:
                continue
            with self._conn_lock:
                try:
                    renewed, busy = self._renew(held)
                except (psycopg.Error, DatabaseError, OSError):
                    # A blip must not end the renewals: retry on a fresh connection next beat
                    # (the lease outlives two missed beats).
                    keeper_logger.warning("lease renewal failed; retrying next beat", exc_info=True)
                    self._close()
                    continue
            for run_id in held.keys() - renewed - busy:
                with self._lock:
                    entry = self._runs.get(run_id)
                if entry is not None:  # else its owner finished it meanwhile
                    keeper_logger.warning("run %s lost its lease", run_id)
                    entry[1].set()

    def _renew(self, held: dict[str, str]) -> tuple[set[str], set[str]]:
        """(renewed, busy) run ids of `held` ({run_id: worker_id})."""
        conn = self._connection()
        ids, workers = list(held), list(held.values())
        with conn.cursor() as cursor:
            cursor.execute(_RENEW_SQL, [setting("AGENT_RUN_LEASE_SECONDS"), ids, workers])
            renewed = {row[0] for row in cursor.fetchall()}
            busy: set[str] = set()
            if len(renewed) < len(held):
                rest = [run for run in ids if run not in renewed]
                cursor.execute(_STILL_HELD_SQL, [rest, [held[run] for run in rest]])
                busy = {row[0] for row in cursor.fetchall()}
        return renewed, busy

    def _connection(self) -> "psycopg.Connection":
        if self._conn is None or self._conn.closed:
            self._conn = direct_connection(autocommit=True, application_name="yuxi-lease-keeper")
        return self._conn

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


_keeper: LeaseKeeper | None = None
_keeper_lock = threading.Lock()


def lease_keeper() -> LeaseKeeper:
    """This process's lease keeper, created on first use and again in a forked child."""
    global _keeper
    with _keeper_lock:
        if _keeper is None or _keeper.pid != os.getpid():
            _keeper = LeaseKeeper()
        return _keeper
