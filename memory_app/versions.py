"""Kept versions of MEMORY.md: the bytes each change replaced, so that a user can undo it.

The one exception to "MEMORY.md is the only store of memory text": past states of the same
file, in the same workspace (`agents/.memory-versions/<sha256 hex>`), read by no agent. The one
publish every memory writer shares (agent write, user write, clear, restore) calls
`keep_replaced` inside the file fence, after its bounded read and before its ledger row, and
`prune` after its directory fsync, still inside the fence. The ledger stays content-free: it
names versions by hash, and it is what says which versions are the newest.

A leaf: it imports the workspace, the memory file's limit, the models and the errors.
"""

import hashlib
import logging
import re
from dataclasses import dataclass
from datetime import datetime

from django.db.models import QuerySet

from memory_app.conf import setting
from memory_app.errors import MemoryUnavailable, MemoryVersionNotFound
from memory_app.memory_file import MEMORY_FILE_MAX_BYTES
from memory_app.models import MemoryEvent, MemoryEventKind
from memory_app.workspace import Workspace, WorkspaceError

__all__ = [
    "EMPTY_SHA256",
    "FILE_CHANGING_KINDS",
    "MEMORY_VERSIONS_DIR",
    "MEMORY_VERSIONS_LISTED",
    "MemoryVersion",
    "forget_kept_versions",
    "keep_replaced",
    "kept_version_hashes",
    "list_memory_versions",
    "prune",
    "read_memory_version",
    "version_relpath",
]

logger = logging.getLogger("yuxi.memory")

# Where a user's kept versions live, each named by the SHA-256 (hex) of its bytes.
MEMORY_VERSIONS_DIR = "agents/.memory-versions"
# The list shows at least this many of the newest replaced versions (more when more are kept),
# the older ones marked unavailable, so a user sees what was pruned or forgotten.
MEMORY_VERSIONS_LISTED = 100
# The hash of the empty file: a version never kept nor listed.
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
# The ledger kinds that change MEMORY.md's bytes (not switch or forget events).
FILE_CHANGING_KINDS = (
    MemoryEventKind.AGENT_ADDED,
    MemoryEventKind.AGENT_REPLACED,
    MemoryEventKind.USER_EDITED,
    MemoryEventKind.USER_CLEARED,
    MemoryEventKind.USER_RESTORED,
)
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class MemoryVersion:
    """One earlier MEMORY.md: its hash, size, when and by what kind of change it was last
    replaced, and whether its bytes are still kept.

    `size_bytes` is None only for a version no longer kept that no recorded change produced
    (a file from before the ledger, or edited by hand in the workspace).
    """

    sha256: str
    size_bytes: int | None
    replaced_at: datetime
    kind: str
    available: bool


def versions_kept() -> int:
    """`MEMORY_VERSIONS_KEPT`: how many distinct replaced versions a user keeps (0: none)."""
    kept = int(setting("MEMORY_VERSIONS_KEPT"))
    if kept < 0:
        raise MemoryUnavailable("MEMORY_VERSIONS_KEPT must be 0 or more")
    return kept


def version_relpath(sha256: str) -> str:
    """The workspace path of the version whose bytes hash to `sha256` (64 lowercase hex)."""
    if not isinstance(sha256, str) or not _SHA256_HEX.fullmatch(sha256):
        raise MemoryVersionNotFound("a version is named by the SHA-256 (hex) of its bytes")
    return f"{MEMORY_VERSIONS_DIR}/{sha256}"


def _latest_replacements(user_id: int) -> QuerySet:
    """The newest file-changing event replacing each distinct non-empty version, newest first.

    One query: PostgreSQL's DISTINCT ON picks each hash's newest event in a subquery.
    """
    latest = (
        MemoryEvent.objects.filter(user_id=user_id, kind__in=FILE_CHANGING_KINDS)
        .exclude(before_sha256=EMPTY_SHA256)
        .order_by("before_sha256", "-id")
        .distinct("before_sha256")
        .values("id")
    )
    return MemoryEvent.objects.filter(id__in=latest).order_by("-id")


def _window(user_id: int, kept: int, *, replacing: str) -> frozenset[str]:
    """The newest `kept` distinct versions once the change replacing `replacing` is recorded.

    Read before that change's ledger row exists (the row must stay the last statement before
    the rename, and nothing but the commit may follow it), so its own version is put first
    here: the same count as the ledger's including the row, the advisory lock keeping every
    other writer of the user out meanwhile.
    """
    if kept == 0:
        return frozenset()
    newest = _latest_replacements(user_id).values_list("before_sha256", flat=True)[:kept]
    ordered = [replacing, *(sha for sha in newest if sha != replacing)]
    return frozenset(ordered[:kept])


def _keepable(data: bytes | None) -> bool:
    """A version worth keeping: whole (not over the limit), not empty, UTF-8 text."""
    if not data or len(data) > MEMORY_FILE_MAX_BYTES:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def keep_replaced(
    workspace: Workspace, *, sha256: str, data: bytes | None
) -> frozenset[str] | None:
    """Keep the bytes a publish is about to replace; returns what `prune` keeps afterwards.

    For a writer holding the advisory lock and the file fence, after its bounded read and
    before its ledger row. `data` is the replaced file (None when it was too large to read
    whole). It is published like any workspace file (no-follow temp file, fsync, rename,
    directory fsync, 0600), unless the empty file, over the limit, not UTF-8, already kept, or
    not among the newest. A symlinked versions directory or version file is refused
    (`WorkspacePathRefused`), so the write fails with MEMORY.md untouched. None: replacing the
    empty file changes no version, so there is nothing to prune.
    """
    if sha256 == EMPTY_SHA256:
        return None
    window = _window(workspace.uid, versions_kept(), replacing=sha256)
    if sha256 in window and _keepable(data):
        relpath = version_relpath(sha256)
        if not workspace.file_exists(relpath):
            workspace.publish(relpath, data)
    return window


def prune(workspace: Workspace, keep: frozenset[str] | None) -> None:
    """Remove every kept version not in `keep`, after a publish's directory fsync.

    Best effort: MEMORY.md is already published, so a failure here is logged, never raised
    (the next change prunes again). Not fsynced: a crash may bring a pruned version back until
    the next change prunes it again, which saves every write a directory fsync (forgetting,
    which the user asked for, is durable).
    """
    if keep is None:
        return
    try:
        workspace.remove_files_except(MEMORY_VERSIONS_DIR, keep, durable=False)
    except WorkspaceError as exc:
        logger.warning("event=versions_prune_failed user=%s error=%s", workspace.uid, exc)


def forget_kept_versions(workspace: Workspace) -> int:
    """Remove every kept version (and any leftover of a dead writer), durably; how many went.

    For a writer holding the memory locks; a failure raises `WorkspaceError`.
    """
    return workspace.remove_files_except(MEMORY_VERSIONS_DIR, (), durable=True)


def kept_version_hashes(workspace: Workspace) -> dict[str, int]:
    """Hash and size of every version kept in the workspace, by name (no bytes read)."""
    sizes = workspace.file_sizes(MEMORY_VERSIONS_DIR)
    return {name: size for name, size in sizes.items() if _SHA256_HEX.fullmatch(name)}


def list_memory_versions(*, user) -> list[MemoryVersion]:
    """`user`'s earlier versions of MEMORY.md, newest replacement first, from the ledger.

    One entry per distinct version (never the empty file), at its latest replacement; at
    most `max(MEMORY_VERSIONS_KEPT, MEMORY_VERSIONS_LISTED)`. `available` is whether its bytes
    are still kept (judged by name; `read_memory_version` checks the bytes).
    """
    limit = max(versions_kept(), MEMORY_VERSIONS_LISTED)
    events = list(
        _latest_replacements(user.pk).values_list("before_sha256", "created_at", "kind")[:limit]
    )
    kept = kept_version_hashes(Workspace.for_user(user.pk))
    missing = [sha for sha, _, _ in events if sha not in kept]
    recorded = dict(
        MemoryEvent.objects.filter(user_id=user.pk, after_sha256__in=missing)
        .values_list("after_sha256", "size_bytes")
        .distinct()
        if missing
        else ()
    )
    return [
        MemoryVersion(
            sha256=sha,
            size_bytes=kept[sha] if sha in kept else recorded.get(sha),
            replaced_at=replaced_at,
            kind=kind,
            available=sha in kept,
        )
        for sha, replaced_at, kind in events
    ]


def read_memory_version(*, user, sha256: str) -> bytes:
    """The bytes of `user`'s kept version `sha256`, checked against their hash.

    Unknown, removed, no longer matching its hash, or not a version that would have been kept
    (empty, too large, not UTF-8): `MemoryVersionNotFound`. Read no-follow and bounded to the
    largest version kept. Only the user's own workspace is looked in, so another user's
    version is not found.
    """
    relpath = version_relpath(sha256)
    data, too_large = Workspace.for_user(user.pk).read_bounded(relpath, MEMORY_FILE_MAX_BYTES)
    if too_large or not _keepable(data) or hashlib.sha256(data).hexdigest() != sha256:
        raise MemoryVersionNotFound("no such version is kept")
    return data
