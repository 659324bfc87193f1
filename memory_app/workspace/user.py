"""`Workspace`: the files of one user, rooted at `<WORKSPACE_ROOT>/<uid>/`, with every operation
the concerns define (reads, locks, writes), each walking the tree no-follow."""

from dataclasses import dataclass
from pathlib import Path

from memory_app.conf import setting
from memory_app.workspace.locking import WorkspaceLocks
from memory_app.workspace.paths import parse_workspace_uid
from memory_app.workspace.reads import WorkspaceReads
from memory_app.workspace.writes import WorkspaceWrites


@dataclass(frozen=True)
class Workspace(WorkspaceReads, WorkspaceLocks, WorkspaceWrites):
    """The files of one user, rooted at `<WORKSPACE_ROOT>/<uid>/`."""

    @classmethod
    def for_user(cls, uid: int | str) -> "Workspace":
        """The workspace of `uid`; the root is read from settings now so tests can move it."""
        return cls(root=Path(setting("WORKSPACE_ROOT")), uid=parse_workspace_uid(uid))
