"""Changes to workspace files: the one atomic, durable publish (temp file, fsync, rename,
directory fsync), a second name for a published file, and removals, none following a symlink."""

import os
import secrets
import shutil
import stat
import time
from collections.abc import Callable, Collection
from contextlib import suppress

from memory_app.workspace.errors import WorkspaceError
from memory_app.workspace.paths import (
    FILE_MODE,
    WorkspaceTree,
    refusal_or_error,
    split_dirpath,
    split_relpath,
    target_exists,
)

# A publish takes milliseconds: a temp or backup file of a target last changed this long ago
# was left by a publisher that died (SIGKILL, power loss), and may hold memory the user has
# since deleted, so the next successful publish removes it.
STALE_LEFTOVER_SECONDS = 3600
_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class WorkspaceWrites(WorkspaceTree):
    """The changes to one user's workspace."""

    def replace_authorized_file(self, relpath: str, data: bytes) -> None:
        """Atomically and durably replace a workspace file with `data`.

        Readers see the complete old or the complete new content, never a mix, and a crash at
        any moment leaves one of the two. If anything fails the old content is left in place.
        """
        self.publish(relpath, data)

    def publish(
        self, relpath: str, data: bytes, *, before_rename: Callable[[], object] | None = None
    ) -> None:
        """`replace_authorized_file` with a last step before the rename.

        `before_rename` runs once the temp file is durable, just before the rename: if it
        raises, the temp file is removed, nothing is published, and its error propagates (the
        memory write path sends its ledger row there, which proves its session is alive).
        """
        components, name = split_relpath(relpath)
        with self._directory(components, create=True) as dir_fd:
            _publish(dir_fd, name, bytes(data), before_rename)

    def link_durably(self, relpath: str, link_relpath: str, *, size_bytes: int) -> bool:
        """Give the file at `relpath` the second name `link_relpath` and make that name durable.

        A hard link (no bytes copied, so no file fsync: they were made durable when the file
        was published), then an fsync of the link's directory, created if missing. Only for a
        private (0600), single-named regular file of `size_bytes` bytes, which every publish
        makes and replaces by a rename, never in place; for any other (or a missing one),
        nothing is done and the answer is False, so the caller copies. A name already there
        is kept (True) if it is a regular file; a symlink or anything else there is refused.
        """
        components, name = split_relpath(relpath)
        link_components, link_name = split_relpath(link_relpath)
        with self._directory(components, create=False) as dir_fd:
            if dir_fd is None:
                return False
            try:
                info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                return False
            except OSError as exc:
                raise WorkspaceError(f"inspecting a workspace file failed: {exc.strerror}") from exc
            if not (
                stat.S_ISREG(info.st_mode)
                and stat.S_IMODE(info.st_mode) == FILE_MODE
                and info.st_nlink == 1
                and info.st_size == size_bytes
            ):
                return False
            with self._directory(link_components, create=True) as link_dir_fd:
                try:
                    os.link(
                        name,
                        link_name,
                        src_dir_fd=dir_fd,
                        dst_dir_fd=link_dir_fd,
                        follow_symlinks=False,
                    )
                except FileExistsError:
                    return target_exists(link_dir_fd, link_name)
                except OSError as exc:
                    raise WorkspaceError(
                        f"linking a workspace file failed: {exc.strerror}"
                    ) from exc
                try:
                    os.fsync(link_dir_fd)
                except OSError as exc:
                    _unlink_quietly(link_name, link_dir_fd)
                    raise WorkspaceError(
                        f"syncing a workspace directory failed: {exc.strerror}"
                    ) from exc
        return True

    def remove_files_except(self, directory: str, keep: Collection[str], *, durable: bool) -> int:
        """Remove every entry but a subdirectory from a workspace directory unless named in
        `keep`; returns how many went. `durable`: fsync the directory afterwards, so a crash
        cannot bring them back.

        Unlinking never follows a symlink (a planted one is removed itself). A missing directory
        has nothing to remove; a symlinked one is refused like any other path.
        """
        with self._directory(split_dirpath(directory), create=False) as dir_fd:
            if dir_fd is None:
                return 0
            removed = 0
            try:
                with os.scandir(dir_fd) as entries:
                    names = [
                        entry.name
                        for entry in entries
                        if entry.name not in keep and not entry.is_dir(follow_symlinks=False)
                    ]
                for name in names:
                    os.unlink(name, dir_fd=dir_fd)
                    removed += 1
                if removed and durable:
                    os.fsync(dir_fd)
            except OSError as exc:
                raise WorkspaceError(f"removing workspace files failed: {exc.strerror}") from exc
            return removed

    def remove_tree(self) -> None:
        """Remove `<root>/<uid>/` and everything in it, following no symlink; missing is fine.

        A symlink or file planted at `<uid>` is removed itself, never what it points to.
        """
        try:
            root_fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise WorkspaceError(f"opening the workspace root failed: {exc.strerror}") from exc
        name = str(self.uid)
        try:
            mode = os.stat(name, dir_fd=root_fd, follow_symlinks=False).st_mode
            if stat.S_ISDIR(mode):
                shutil.rmtree(name, dir_fd=root_fd)
            else:
                os.unlink(name, dir_fd=root_fd)
            os.fsync(root_fd)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise WorkspaceError(f"removing a workspace failed: {exc.strerror}") from exc
        finally:
            os.close(root_fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _unlink_quietly(name: str, dir_fd: int) -> None:
    """Best-effort cleanup: its failure must not hide the error being reported."""
    with suppress(OSError):
        os.unlink(name, dir_fd=dir_fd)


def _publish(
    dir_fd: int, name: str, data: bytes, before_rename: Callable[[], object] | None
) -> None:
    """Temp file, write, fsync, `before_rename`, rename over `name`, fsync the directory.

    A failed fsync is never retried on the same descriptor (its error state is not reliable
    afterwards): the step fails and the old file is restored. The old file is kept as a hard
    link until the directory fsync succeeds, so a failing directory fsync can put it back.
    """
    had_target = target_exists(dir_fd, name)
    token = secrets.token_hex(8)
    temp_name = f".{name}.{token}.tmp"
    backup_name = f".{name}.{token}.old"
    try:
        fd = os.open(temp_name, _TEMP_FLAGS, FILE_MODE, dir_fd=dir_fd)
    except OSError as exc:
        raise refusal_or_error(exc, "creating a temp file") from exc
    try:
        try:
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        if had_target:
            os.link(name, backup_name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
        if before_rename is not None:
            before_rename()
        os.rename(temp_name, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except OSError as exc:
        _unlink_quietly(temp_name, dir_fd)
        _unlink_quietly(backup_name, dir_fd)
        raise WorkspaceError(f"publishing a workspace file failed: {exc.strerror}") from exc
    except BaseException:
        _unlink_quietly(temp_name, dir_fd)
        _unlink_quietly(backup_name, dir_fd)
        raise
    try:
        os.fsync(dir_fd)
    except OSError as exc:
        _restore(dir_fd, name, backup_name if had_target else None)
        raise WorkspaceError(f"syncing a workspace directory failed: {exc.strerror}") from exc
    if had_target:
        _unlink_quietly(backup_name, dir_fd)
    _sweep_stale_leftovers(dir_fd, name)


def _sweep_stale_leftovers(dir_fd: int, name: str) -> None:
    """Best effort: remove `name`'s temp and backup files that dead publishers left behind.

    Judged by ctime, which a backup's hard link and every write move forward, so a publish
    still in progress is never touched.
    """
    prefix = f".{name}."
    cutoff = time.time() - STALE_LEFTOVER_SECONDS
    with suppress(OSError), os.scandir(dir_fd) as entries:
        for entry in entries:
            if not (entry.name.startswith(prefix) and entry.name.endswith((".tmp", ".old"))):
                continue
            with suppress(OSError):
                info = entry.stat(follow_symlinks=False)
                if stat.S_ISREG(info.st_mode) and info.st_ctime < cutoff:
                    os.unlink(entry.name, dir_fd=dir_fd)


def _restore(dir_fd: int, name: str, backup_name: str | None) -> None:
    """Put the pre-publish state of `name` back after its rename could not be made durable."""
    try:
        if backup_name is None:
            os.unlink(name, dir_fd=dir_fd)
        else:
            os.rename(backup_name, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except OSError as exc:
        raise WorkspaceError(f"restoring a workspace file failed: {exc.strerror}") from exc
