"""`Workspace.replace_authorized_file` and bounded reads: no path leaves the workspace."""

from pathlib import Path

import pytest
from django.conf import settings as django_settings

from memory_app.workspace import Workspace
from tests.contract.helpers import memory_path


@pytest.mark.django_db
def test_replace_authorized_file_creates_directories_and_publishes_the_bytes(run):
    workspace = Workspace.for_user(run.user_id)
    workspace.replace_authorized_file("agents/MEMORY.md", b"one\n")
    workspace.replace_authorized_file("agents/MEMORY.md", b"two\n")
    assert memory_path(run.user_id).read_bytes() == b"two\n"
    assert sorted(p.name for p in memory_path(run.user_id).parent.iterdir()) == ["MEMORY.md"]
    assert workspace.read_bounded("agents/MEMORY.md", 3) == (b"two", True)
    assert Workspace.for_user(str(run.user_id)).read_bounded("agents/MEMORY.md", 4) == (
        b"two\n",
        False,
    )


@pytest.mark.django_db
@pytest.mark.parametrize("relpath", ["../escape.md", "agents/../../escape.md", "/tmp/x", "a\x00b"])
def test_a_relpath_that_could_leave_the_workspace_is_refused(run, relpath, tmp_path):
    workspace = Workspace.for_user(run.user_id)
    with pytest.raises(Exception):  # noqa: B017 - the contract names no exception for a refusal
        workspace.replace_authorized_file(relpath, b"data")
    with pytest.raises(Exception):  # noqa: B017
        workspace.read_bounded(relpath, 10)
    root = Path(django_settings.WORKSPACE_ROOT)
    assert not (root / "escape.md").exists() and not (root.parent / "escape.md").exists()


@pytest.mark.django_db
def test_a_symlinked_directory_on_the_path_is_refused_for_reads_and_writes(run, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "MEMORY.md").write_bytes(b"outside\n")
    user_root = Path(django_settings.WORKSPACE_ROOT) / str(run.user_id)
    user_root.mkdir(parents=True)
    (user_root / "agents").symlink_to(outside)
    workspace = Workspace.for_user(run.user_id)
    with pytest.raises(Exception):  # noqa: B017 - the contract names no exception for a refusal
        workspace.replace_authorized_file("agents/MEMORY.md", b"data")
    with pytest.raises(Exception):  # noqa: B017
        workspace.read_bounded("agents/MEMORY.md", 100)
    assert sorted(p.name for p in outside.iterdir()) == ["MEMORY.md"]
    assert (outside / "MEMORY.md").read_bytes() == b"outside\n"
