"""Where a user's workspace files live, and the one safe way down to them: every path below
`<WORKSPACE_ROOT>/<uid>/` is checked to stay inside and walked one component at a time through
directory file descriptors opened with `O_NOFOLLOW`, so a symlink planted anywhere in the
workspace can neither redirect a read nor a write. `WORKSPACE_ROOT` itself is trusted.
"""

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from conversations.utils.ids import parse_uid
from memory_app.workspace.errors import (
    WorkspaceError,
    WorkspacePathRefused,
    WorkspaceUnavailable,
)

AGENTS_RELPATH = "agents/AGENTS.md"
USER_RELPATH = "agents/USER.md"
MEMORY_RELPATH = "agents/MEMORY.md"
# The file fence of MEMORY.md: every writer holds an exclusive flock on it around its publish.
MEMORY_LOCK_RELPATH = "agents/.memory.lock"

# Directories created below the trusted root are private to the service.
DIRECTORY_MODE = 0o700
# Published files (the temp file before its rename) are readable by the service only.
FILE_MODE = 0o600

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def split_relpath(relpath: str) -> tuple[list[str], str]:
    """Directory components and file name of a path that stays inside the workspace."""
    if not isinstance(relpath, str) or not relpath or "\x00" in relpath:
        raise WorkspacePathRefused("workspace path is empty or contains NUL")
    if relpath.startswith("/"):
        raise WorkspacePathRefused("workspace path must be relative")
    parts = relpath.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise WorkspacePathRefused("workspace path has an empty, '.' or '..' component")
    return parts[:-1], parts[-1]


def split_dirpath(relpath: str) -> list[str]:
    """The components of a directory path that stays inside the workspace."""
    components, name = split_relpath(relpath)
    return [*components, name]


def refusal_or_error(exc: OSError, what: str) -> WorkspaceError:
    # ELOOP: O_NOFOLLOW met a symlink; ENOTDIR: a non-directory where a directory must be.
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        return WorkspacePathRefused(f"{what} is a symlink or not a directory")
    return WorkspaceError(f"{what} failed: {exc.strerror}")


def parse_workspace_uid(uid: int | str) -> int:
    """`uid` as the user's key its workspace directory is named by; anything else is refused."""
    parsed = parse_uid(uid)
    if parsed is None:
        raise WorkspacePathRefused("uid must be a user's key or its canonical digits")
    return parsed


def target_exists(dir_fd: int, name: str) -> bool:
    """Whether `name` exists in the directory; refuses anything but a regular file."""
    try:
        mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise WorkspaceError(f"inspecting a workspace file failed: {exc.strerror}") from exc
    if not stat.S_ISREG(mode):
        raise WorkspacePathRefused("workspace file is a symlink or not a regular file")
    return True


@dataclass(frozen=True)
class WorkspaceTree:
    """The directory tree of one user, rooted at `<root>/<uid>/`, walked no-follow."""

    root: Path
    uid: int

    @contextmanager
    def _directory(self, components: list[str], *, create: bool) -> Iterator[int | None]:
        """A no-follow fd of `<uid>/<components...>`, or None if it is missing and not created."""
        with ExitStack() as stack:
            try:
                if create:
                    os.makedirs(self.root, exist_ok=True)
                fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            except FileNotFoundError:
                yield None
                return
            except OSError as exc:
                raise WorkspaceUnavailable(
                    f"opening the workspace root failed: {exc.strerror}"
                ) from exc
            stack.callback(os.close, fd)
            for name in [str(self.uid), *components]:
                try:
                    child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        yield None
                        return
                    child = self._make_directory(name, fd)
                except OSError as exc:
                    raise refusal_or_error(exc, "a workspace directory") from exc
                stack.callback(os.close, child)
                fd = child
            yield fd

    @staticmethod
    def _make_directory(name: str, parent_fd: int) -> int:
        try:
            os.mkdir(name, DIRECTORY_MODE, dir_fd=parent_fd)
        except FileExistsError:
            pass  # created meanwhile by a concurrent writer; the no-follow open below judges it
        except OSError as exc:
            raise WorkspaceError(f"creating a workspace directory failed: {exc.strerror}") from exc
        try:
            return os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
        except OSError as exc:
            raise refusal_or_error(exc, "a workspace directory") from exc
