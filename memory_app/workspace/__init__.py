"""Per-user workspace files: bounded no-follow reads and the one atomic, durable publish.

Every path below `<WORKSPACE_ROOT>/<uid>/` is walked one component at a time through directory
file descriptors opened with `O_NOFOLLOW`, so a symlink planted anywhere in the workspace can
neither redirect a read nor a write. `WORKSPACE_ROOT` itself is trusted. The sub-modules:
`paths` (the files' places, the refusal of unsafe paths, the no-follow walk), `reads`, `locking`
(the file locks), `writes` (the publish, second names, removals), `errors`, and `user`
(`Workspace`, all of them for one user).
"""

from memory_app.workspace.errors import (
    WorkspaceError,
    WorkspacePathRefused,
    WorkspaceUnavailable,
)
from memory_app.workspace.user import Workspace

__all__ = ["Workspace", "WorkspaceError", "WorkspacePathRefused", "WorkspaceUnavailable"]
