import os

import pytest

from memory_app import workspace as workspace_module


@pytest.fixture
def os_read_sizes(monkeypatch) -> list[int]:
    """Byte counts the workspace module asks `os.read` for (the real read still happens)."""
    requested: list[int] = []
    real_read = os.read

    def counting_read(fd: int, n: int) -> bytes:
        requested.append(n)
        return real_read(fd, n)

    monkeypatch.setattr(workspace_module.os, "read", counting_read)
    return requested
