"""The workspace's file locks: an exclusive `flock` on a lock file (the file fence of
MEMORY.md is one), waited for at most as long as the caller says."""

import errno
import fcntl
import os
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager

from memory_app.workspace.errors import (
    WorkspaceError,
    WorkspaceLockTimeout,
    WorkspacePathRefused,
)
from memory_app.workspace.paths import FILE_MODE, WorkspaceTree, refusal_or_error, split_relpath

_LOCK_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
# Polling an flock held elsewhere: the first retry soon, then at most this often.
_LOCK_POLL_FIRST_SECONDS = 0.0005
_LOCK_POLL_MAX_SECONDS = 0.01


class WorkspaceLocks(WorkspaceTree):
    """The file locks of one user's workspace."""

    @contextmanager
    def locked(self, relpath: str, *, timeout_seconds: float) -> Iterator[None]:
        """Hold an exclusive `flock` on a workspace lock file (created 0600, never deleted).

        Opened afresh for each acquisition, so no two holders, threads included, share an
        open file description (which would make them share the lock). Waits at most
        `timeout_seconds`, polling, then raises `WorkspaceLockTimeout`.
        """
        components, name = split_relpath(relpath)
        with self._directory(components, create=True) as dir_fd:
            try:
                fd = os.open(name, _LOCK_FLAGS, FILE_MODE, dir_fd=dir_fd)
            except OSError as exc:
                if exc.errno in (errno.ENXIO, errno.EISDIR):
                    raise WorkspacePathRefused("workspace lock is not a regular file") from exc
                raise refusal_or_error(exc, "opening a workspace lock") from exc
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise WorkspacePathRefused("workspace lock is not a regular file")
            _flock_within(fd, timeout_seconds)
            yield
        finally:
            os.close(fd)  # closing the only descriptor releases the lock


def _flock_within(fd: int, timeout_seconds: float) -> None:
    """Take an exclusive flock on `fd`, polling until `timeout_seconds` have passed."""
    deadline = time.monotonic() + timeout_seconds
    pause = _LOCK_POLL_FIRST_SECONDS
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        except OSError as exc:
            raise WorkspaceError(f"locking a workspace file failed: {exc.strerror}") from exc
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise WorkspaceLockTimeout("a workspace lock was held too long")
        time.sleep(min(pause, remaining))
        pause = min(pause * 2, _LOCK_POLL_MAX_SECONDS)
