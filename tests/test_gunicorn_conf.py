"""gunicorn.conf.py: the worker count and the keep-alive come from the environment, so an
operator plans connections per host and sets the keep-alive above a proxy's idle timeout."""

import runpy
from pathlib import Path

CONF = Path(__file__).resolve().parent.parent / "gunicorn.conf.py"


def test_the_worker_count_and_the_keep_alive_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("WEB_CONCURRENCY", "3")
    monkeypatch.setenv("GUNICORN_KEEPALIVE", "75")
    conf = runpy.run_path(str(CONF))
    assert (conf["workers"], conf["keepalive"]) == (3, 75)


def test_the_defaults_are_four_workers_and_a_five_second_keep_alive(monkeypatch):
    monkeypatch.delenv("WEB_CONCURRENCY", raising=False)
    monkeypatch.delenv("GUNICORN_KEEPALIVE", raising=False)
    conf = runpy.run_path(str(CONF))
    assert (conf["workers"], conf["keepalive"]) == (4, 5)
