"""The workspace's errors: a refused path, an unusable root, a lock held too long, and any
other failing file-system operation (their common base)."""


class WorkspaceError(Exception):
    """A file-system operation on a workspace failed."""


class WorkspacePathRefused(WorkspaceError):
    """The path is not one the workspace may touch: a symlink, a non-regular file, an escape."""


class WorkspaceUnavailable(WorkspaceError):
    """The workspace root itself cannot be used (not a directory, not accessible, not
    creatable): a configuration problem (`WORKSPACE_ROOT`), never one user's file."""


class WorkspaceLockTimeout(WorkspaceError):
    """Another holder kept a workspace file lock for longer than the caller would wait."""
