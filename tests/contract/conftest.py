"""Fixtures every contract test area shares: a running top-level chat run of a user whose
memory is on, and its trusted context."""

import pytest

from memory_app.runtime import ToolRuntimeContext
from tests.factories import context_for, memory_run


@pytest.fixture
def run():
    """A running top-level chat run of a user whose memory is on."""
    return memory_run()


@pytest.fixture
def ctx(run) -> ToolRuntimeContext:
    return context_for(run)
