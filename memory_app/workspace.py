"""Per-user workspace files: bounded no-follow reads and the one atomic, durable publish.

Every path below `<WORKSPACE_ROOT>/<uid>/` is walked one component at a time through directory
file descriptors opened with `O_NOFOLLOW`, so a symlink planted anywhere in the workspace can
neither redirect a read nor a write. `WORKSPACE_ROOT` itself is trusted.
"""

import codecs
import errno
import fcntl
import hashlib
import os
import secrets
import shutil
import stat
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from conversations.utils.ids import parse_uid
from conversations.utils.string_utils import truncate_utf8
from memory_app.conf import setting

__all__ = [
    "AGENTS_RELPATH",
    "MEMORY_LOCK_RELPATH",
    "MEMORY_RELPATH",
    "USER_RELPATH",
    "DigestedRead",
    "Workspace",
    "WorkspaceError",
    "WorkspaceLockTimeout",
    "WorkspacePathRefused",
    "WorkspaceUnavailable",
]

AGENTS_RELPATH = "agents/AGENTS.md"
USER_RELPATH = "agents/USER.md"
MEMORY_RELPATH = "agents/MEMORY.md"
# The file fence of MEMORY.md: every writer holds an exclusive flock on it around its publish.
MEMORY_LOCK_RELPATH = "agents/.memory.lock"

# Directories created below the trusted root are private to the service.
DIRECTORY_MODE = 0o700
# Published files (the temp file before its rename) are readable by the service only.
FILE_MODE = 0o600
READ_CHUNK_BYTES = 65536
# A publish takes milliseconds: a temp or backup file of a target last changed this long ago
# was left by a publisher that died (SIGKILL, power loss), and may hold memory the user has
# since deleted, so the next successful publish removes it.
STALE_LEFTOVER_SECONDS = 3600

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO planted at the target must not hang the reader.
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_LOCK_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
# Polling an flock held elsewhere: the first retry soon, then at most this often.
_LOCK_POLL_FIRST_SECONDS = 0.0005
_LOCK_POLL_MAX_SECONDS = 0.01
_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class WorkspaceError(Exception):
    """A file-system operation on a workspace failed."""


class WorkspacePathRefused(WorkspaceError):
    """The path is not one the workspace may touch: a symlink, a non-regular file, an escape."""


class WorkspaceUnavailable(WorkspaceError):
    """The workspace root itself cannot be used (not a directory, not accessible, not
    creatable): a configuration problem (`WORKSPACE_ROOT`), never one user's file."""


class WorkspaceLockTimeout(WorkspaceError):
    """Another holder kept a workspace file lock for longer than the caller would wait."""


@dataclass(frozen=True)
class DigestedRead:
    """A bounded read plus the SHA-256 and size of the whole file (missing = empty)."""

    data: bytes
    truncated: bool
    sha256: str
    size_bytes: int


def _split_relpath(relpath: str) -> tuple[list[str], str]:
    """Directory components and file name of a path that stays inside the workspace."""
    if not isinstance(relpath, str) or not relpath or "\x00" in relpath:
        raise WorkspacePathRefused("workspace path is empty or contains NUL")
    if relpath.startswith("/"):
        raise WorkspacePathRefused("workspace path must be relative")
    parts = relpath.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise WorkspacePathRefused("workspace path has an empty, '.' or '..' component")
    return parts[:-1], parts[-1]


def _split_dirpath(relpath: str) -> list[str]:
    """The components of a directory path that stays inside the workspace."""
    components, name = _split_relpath(relpath)
    return [*components, name]


def _refusal_or_error(exc: OSError, what: str) -> WorkspaceError:
    # ELOOP: O_NOFOLLOW met a symlink; ENOTDIR: a non-directory where a directory must be.
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        return WorkspacePathRefused(f"{what} is a symlink or not a directory")
    return WorkspaceError(f"{what} failed: {exc.strerror}")


def _parse_uid(uid: int | str) -> int:
    parsed = parse_uid(uid)
    if parsed is None:
        raise WorkspacePathRefused("uid must be a user's key or its canonical digits")
    return parsed


@dataclass(frozen=True)
class Workspace:
    """The files of one user, rooted at `<WORKSPACE_ROOT>/<uid>/`."""

    root: Path
    uid: int

    @classmethod
    def for_user(cls, uid: int | str) -> "Workspace":
        """The workspace of `uid`; the root is read from settings now so tests can move it."""
        return cls(root=Path(setting("WORKSPACE_ROOT")), uid=_parse_uid(uid))

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
                    raise _refusal_or_error(exc, "a workspace directory") from exc
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
            raise _refusal_or_error(exc, "a workspace directory") from exc

    @contextmanager
    def _opened_for_read(self, relpath: str) -> Iterator[int | None]:
        """A no-follow fd of a regular workspace file, or None if it or a directory is missing."""
        components, name = _split_relpath(relpath)
        with self._directory(components, create=False) as dir_fd:
            if dir_fd is None:
                yield None
                return
            try:
                fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
            except FileNotFoundError:
                yield None
                return
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise WorkspacePathRefused("workspace file is a symlink") from exc
                # ENXIO: a socket (or a device with no driver) cannot be opened at all.
                if exc.errno == errno.ENXIO:
                    raise WorkspacePathRefused("workspace file is not a regular file") from exc
                raise WorkspaceError(f"opening a workspace file failed: {exc.strerror}") from exc
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise WorkspacePathRefused("workspace file is not a regular file")
                yield fd
            except OSError as exc:
                raise WorkspaceError(f"reading a workspace file failed: {exc.strerror}") from exc
            finally:
                os.close(fd)

    def read_bounded(self, relpath: str, max_bytes: int) -> tuple[bytes, bool]:
        """At most `max_bytes` of a workspace file and whether more was there.

        Reads no more than `max_bytes + 1` bytes, so a huge file costs what a small one does.
        A missing file or directory reads as empty.
        """
        if max_bytes < 0:
            raise ValueError("max_bytes must be >= 0")
        with self._opened_for_read(relpath) as fd:
            return (b"", False) if fd is None else _read_at_most(fd, max_bytes)

    def read_digested(self, relpath: str, max_bytes: int) -> DigestedRead:
        """`read_bounded` plus the SHA-256 and size of the whole file, for an etag or a ledger.

        Keeps at most `max_bytes + 1` bytes in memory; the rest of an oversize file is hashed
        as it streams past, so a file the user must repair still has its exact digest.
        """
        if max_bytes < 0:
            raise ValueError("max_bytes must be >= 0")
        with self._opened_for_read(relpath) as fd:
            if fd is None:
                return DigestedRead(b"", False, hashlib.sha256().hexdigest(), 0)
            kept = _read_up_to(fd, max_bytes + 1)
            digest, size = hashlib.sha256(kept), len(kept)
            while chunk := os.read(fd, READ_CHUNK_BYTES):
                digest.update(chunk)
                size += len(chunk)
        return DigestedRead(kept[:max_bytes], size > max_bytes, digest.hexdigest(), size)

    @contextmanager
    def locked(self, relpath: str, *, timeout_seconds: float) -> Iterator[None]:
        """Hold an exclusive `flock` on a workspace lock file (created 0600, never deleted).

        Opened afresh for each acquisition, so no two holders, threads included, share an
        open file description (which would make them share the lock). Waits at most
        `timeout_seconds`, polling, then raises `WorkspaceLockTimeout`.
        """
        components, name = _split_relpath(relpath)
        with self._directory(components, create=True) as dir_fd:
            try:
                fd = os.open(name, _LOCK_FLAGS, FILE_MODE, dir_fd=dir_fd)
            except OSError as exc:
                if exc.errno in (errno.ENXIO, errno.EISDIR):
                    raise WorkspacePathRefused("workspace lock is not a regular file") from exc
                raise _refusal_or_error(exc, "opening a workspace lock") from exc
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise WorkspacePathRefused("workspace lock is not a regular file")
            _flock_within(fd, timeout_seconds)
            yield
        finally:
            os.close(fd)  # closing the only descriptor releases the lock

    def file_exists(self, relpath: str) -> bool:
        """Whether a workspace file exists, judged no-follow; a symlink or non-regular file there
        is refused. A missing directory on the way means no file."""
        components, name = _split_relpath(relpath)
        with self._directory(components, create=False) as dir_fd:
            return dir_fd is not None and _target_exists(dir_fd, name)

    def link_durably(self, relpath: str, link_relpath: str, *, size_bytes: int) -> bool:
        """Give the file at `relpath` the second name `link_relpath` and make that name durable.

        A hard link (no bytes copied, so no file fsync: they were made durable when the file
        was published), then an fsync of the link's directory, created if missing. Only for a
        private (0600), single-named regular file of `size_bytes` bytes, which every publish
        makes and replaces by a rename, never in place; for any other (or a missing one),
        nothing is done and the answer is False, so the caller copies. A name already there
        is kept (True) if it is a regular file; a symlink or anything else there is refused.
        """
        components, name = _split_relpath(relpath)
        link_components, link_name = _split_relpath(link_relpath)
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
                    return _target_exists(link_dir_fd, link_name)
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

    def file_sizes(self, directory: str) -> dict[str, int]:
        """Name and size of every regular file in a workspace directory, none followed.

        A missing directory has none; a symlinked one is refused like any other path.
        """
        with self._directory(_split_dirpath(directory), create=False) as dir_fd:
            if dir_fd is None:
                return {}
            sizes = {}
            try:
                with os.scandir(dir_fd) as entries:
                    for entry in entries:
                        info = entry.stat(follow_symlinks=False)
                        if stat.S_ISREG(info.st_mode):
                            sizes[entry.name] = info.st_size
            except OSError as exc:
                raise WorkspaceError(f"listing a directory failed: {exc.strerror}") from exc
            return sizes

    def remove_files_except(self, directory: str, keep: Collection[str], *, durable: bool) -> int:
        """Remove every entry but a subdirectory from a workspace directory unless named in
        `keep`; returns how many went. `durable`: fsync the directory afterwards, so a crash
        cannot bring them back.

        Unlinking never follows a symlink (a planted one is removed itself). A missing directory
        has nothing to remove; a symlinked one is refused like any other path.
        """
        with self._directory(_split_dirpath(directory), create=False) as dir_fd:
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

    def read_text_bounded(self, relpath: str, max_bytes: int) -> tuple[str, bool]:
        """`read_bounded` decoded for a prompt: at most `max_bytes` of UTF-8, and whether cut.

        A code point split by the cut is dropped and invalid bytes are replaced (each grows to
        three bytes, so the text is cut again to stay within `max_bytes`).
        """
        data, truncated = self.read_bounded(relpath, max_bytes)
        # Not final when cut: an incomplete sequence at the cut is the cut's, not the file's.
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        text, cut = truncate_utf8(decoder.decode(data, final=not truncated), max_bytes)
        return text, truncated or cut

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
        components, name = _split_relpath(relpath)
        with self._directory(components, create=True) as dir_fd:
            _publish(dir_fd, name, bytes(data), before_rename)


def _read_up_to(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    remaining = limit
    while remaining > 0:
        chunk = os.read(fd, min(remaining, READ_CHUNK_BYTES))
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def _read_at_most(fd: int, max_bytes: int) -> tuple[bytes, bool]:
    data = _read_up_to(fd, max_bytes + 1)
    return data[:max_bytes], len(data) > max_bytes


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


def _target_exists(dir_fd: int, name: str) -> bool:
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
    had_target = _target_exists(dir_fd, name)
    token = secrets.token_hex(8)
    temp_name = f".{name}.{token}.tmp"
    backup_name = f".{name}.{token}.old"
    try:
        fd = os.open(temp_name, _TEMP_FLAGS, FILE_MODE, dir_fd=dir_fd)
    except OSError as exc:
        raise _refusal_or_error(exc, "creating a temp file") from exc
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
