"""Bounded no-follow reads of workspace files: at most what the caller keeps, with the
SHA-256 and size of the whole file when asked, and the listing of a directory's files."""

import codecs
import errno
import hashlib
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from conversations.utils.string_utils import truncate_utf8
from memory_app.workspace.errors import WorkspaceError, WorkspacePathRefused
from memory_app.workspace.paths import (
    WorkspaceTree,
    split_dirpath,
    split_relpath,
    target_exists,
)

READ_CHUNK_BYTES = 65536
# O_NONBLOCK: opening a FIFO planted at the target must not hang the reader.
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


@dataclass(frozen=True)
class DigestedRead:
    """A bounded read plus the SHA-256 and size of the whole file (missing = empty)."""

    data: bytes
    truncated: bool
    sha256: str
    size_bytes: int


class WorkspaceReads(WorkspaceTree):
    """The reads of one user's workspace."""

    @contextmanager
    def _opened_for_read(self, relpath: str) -> Iterator[int | None]:
        """A no-follow fd of a regular workspace file, or None if it or a directory is missing."""
        components, name = split_relpath(relpath)
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

    def file_exists(self, relpath: str) -> bool:
        """Whether a workspace file exists, judged no-follow; a symlink or non-regular file there
        is refused. A missing directory on the way means no file."""
        components, name = split_relpath(relpath)
        with self._directory(components, create=False) as dir_fd:
            return dir_fd is not None and target_exists(dir_fd, name)

    def file_sizes(self, directory: str) -> dict[str, int]:
        """Name and size of every regular file in a workspace directory, none followed.

        A missing directory has none; a symlinked one is refused like any other path.
        """
        with self._directory(split_dirpath(directory), create=False) as dir_fd:
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
