import os
from collections.abc import Callable
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client

from memory_app.workspace import reads as workspace_reads
from tests.factories import UserConfigFactory, memory_run
from tests.memory_app.helpers import csrf_session


@pytest.fixture
def run():
    """A running top-level chat run of a user whose memory is on: a run that may use memory."""
    return memory_run()


@pytest.fixture
def os_read_sizes(monkeypatch) -> list[int]:
    """Byte counts the workspace's reads ask `os.read` for (the real read still happens)."""
    requested: list[int] = []
    real_read = os.read

    def counting_read(fd: int, n: int) -> bytes:
        requested.append(n)
        return real_read(fd, n)

    monkeypatch.setattr(workspace_reads.os, "read", counting_read)
    return requested


@pytest.fixture
def opened_files(monkeypatch) -> list[str]:
    """The base name of every path `os.open` is asked for while the test runs."""
    names: list[str] = []
    real_open = os.open

    def recording_open(path, *args, **kwargs):
        names.append(os.path.basename(os.fspath(path)))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", recording_open)
    return names


@pytest.fixture
def agents_file() -> Callable[[int | str, str], Path]:
    """`agents_file(uid, "MEMORY.md")`: the path of a file in the user's `agents/` folder."""

    def path(uid: int | str, name: str) -> Path:
        directory = Path(settings.WORKSPACE_ROOT) / str(uid) / "agents"
        directory.mkdir(parents=True, exist_ok=True)
        return directory / name

    return path


@pytest.fixture
def user():
    """A user whose memory switch is on."""
    return UserConfigFactory().user


@pytest.fixture
def session(user) -> Client:
    """`user` logged in, in a client that checks CSRF (`helpers.unsafe_headers`)."""
    return csrf_session(user)
