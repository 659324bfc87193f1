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
from functools import cache

from django.db import connection
from django.db.models import OuterRef, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce
from django.utils.translation import gettext_noop

from memory_app.conf import setting
from memory_app.errors import MemoryUnavailable, MemoryVersionNotFound
from memory_app.memory_file import MEMORY_FILE_MAX_BYTES
from memory_app.models import MemoryEvent, MemoryEventKind
from memory_app.workspace import Workspace, WorkspaceError
from memory_app.workspace.paths import MEMORY_RELPATH

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
# The `kind` of a version no recorded change produced: the seed, or a file written before the
# ledger's first row (or by hand in the workspace).
INITIAL_VERSION_KIND = "initial"

_SHA256_HEX = re.compile(r"[0-9a-f]{64}")
# A version's name in the etag form (`sha256:<hex>`), accepted wherever the bare hex is.
_ETAG_PREFIX = "sha256:"


@dataclass(frozen=True)
class MemoryVersion:
    """One earlier MEMORY.md: its hash, size, the change that made it (`kind`, a ledger kind,
    or `INITIAL_VERSION_KIND` when no recorded change did), when and by what change it was
    last replaced (`replaced_at`, `replaced_by`), and whether its bytes are still kept.

    `size_bytes` is None only for a version no longer kept that no recorded change produced
    (a file from before the ledger, or edited by hand in the workspace).
    """

    sha256: str
    size_bytes: int | None
    replaced_at: datetime
    kind: str
    replaced_by: str
    available: bool


def versions_kept() -> int:
    """`MEMORY_VERSIONS_KEPT`: how many distinct replaced versions a user keeps (0: none)."""
    kept = int(setting("MEMORY_VERSIONS_KEPT"))
    if kept < 0:
        raise MemoryUnavailable("MEMORY_VERSIONS_KEPT must be 0 or more")
    return kept


def version_sha256(name: str) -> str:
    """The hex SHA-256 a version is named by, given bare (64 lowercase hex) or in the etag
    form `sha256:<hex>` that the memory's ETag uses; anything else is `MemoryVersionNotFound`."""
    if isinstance(name, str) and name.startswith(_ETAG_PREFIX):
        name = name[len(_ETAG_PREFIX) :]
    if not isinstance(name, str) or not _SHA256_HEX.fullmatch(name):
        raise MemoryVersionNotFound(
            gettext_noop(
                "a version is named by the SHA-256 (hex) of its bytes, bare or as sha256:<hex>"
            )
        )
    return name


def version_relpath(sha256: str) -> str:
    """The workspace path of the version named `sha256` (see `version_sha256`)."""
    return f"{MEMORY_VERSIONS_DIR}/{version_sha256(sha256)}"


def _file_changes(user_id: int) -> QuerySet:
    """The user's file-changing events since they last forgot their versions: what a version
    list is made of (forgetting empties it; the ledger keeps its content-free rows)."""
    events = MemoryEvent.objects.filter(user_id=user_id, kind__in=FILE_CHANGING_KINDS)
    forgotten = (
        MemoryEvent.objects.filter(user_id=user_id, kind=MemoryEventKind.VERSIONS_FORGOTTEN)
        .order_by("-id")
        .values("id")[:1]
    )
    return events.filter(id__gt=Coalesce(Subquery(forgotten), Value(0)))


def _latest_replacements(user_id: int) -> QuerySet:
    """The newest file-changing event replacing each distinct non-empty version, newest first.

    One query: PostgreSQL's DISTINCT ON picks each hash's newest event in a subquery.
    """
    latest = (
        _file_changes(user_id)
        .exclude(before_sha256=EMPTY_SHA256)
        .order_by("before_sha256", "-id")
        .distinct("before_sha256")
        .values("id")
    )
    return MemoryEvent.objects.filter(id__in=latest).order_by("-id")


@cache
def _window_sql() -> str:
    """`_latest_replacements`' hashes (since the last forgetting, as `_file_changes`) as one
    static statement: the write path compiles no query."""
    table = MemoryEvent._meta.db_table
    return (
        "SELECT before_sha256 FROM (SELECT DISTINCT ON (before_sha256) before_sha256, id "
        f'FROM "{table}" WHERE user_id = %s AND kind = ANY(%s) AND before_sha256 <> %s '
        f'AND id > COALESCE((SELECT id FROM "{table}" WHERE user_id = %s AND kind = %s '
        "ORDER BY id DESC LIMIT 1), 0) "
        "ORDER BY before_sha256, id DESC) latest ORDER BY id DESC LIMIT %s"
    )


def _window(user_id: int, kept: int, *, replacing: str) -> frozenset[str]:
    """The newest `kept` distinct versions once the change replacing `replacing` is recorded.

    Read before that change's ledger row exists (the row must stay the last statement before
    the rename, and nothing but the commit may follow it), so its own version is put first
    here: the same count as the ledger's including the row, the advisory lock keeping every
    other writer of the user out meanwhile.
    """
    if kept == 0:
        return frozenset()
    with connection.cursor() as cursor:
        cursor.execute(
            _window_sql(),
            [
                user_id,
                list(FILE_CHANGING_KINDS),
                EMPTY_SHA256,
                user_id,
                MemoryEventKind.VERSIONS_FORGOTTEN,
                kept,
            ],
        )
        newest = [sha for (sha,) in cursor.fetchall()]
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


@dataclass(frozen=True)
class KeptVersions:
    """What `keep_replaced` did: the versions `prune` keeps afterwards (None: nothing to
    prune) and the one it added now, if any (`discard_new` removes it if the publish fails)."""

    window: frozenset[str] | None
    new: str | None


def keep_replaced(workspace: Workspace, *, sha256: str, data: bytes | None) -> KeptVersions:
    """Keep the bytes a publish is about to replace; returns what `prune` keeps afterwards.

    For a writer holding the advisory lock and the file fence, after its bounded read and
    before its ledger row. `data` is the replaced file (None when it was too large to read
    whole), still MEMORY.md's bytes on disk: it is kept as a hard link to that file (0600,
    its directory fsynced), or, for a file the write path did not publish, published like any
    workspace file (no-follow temp file, fsync, rename, directory fsync, 0600); not at all
    when it is empty, over the limit, not UTF-8, already kept, or not among the newest. A
    symlinked versions directory or version file is refused (`WorkspacePathRefused`), so the
    write fails with MEMORY.md untouched. Replacing the empty file changes no version, so
    there is nothing to prune (a window of None).
    """
    if sha256 == EMPTY_SHA256:
        return KeptVersions(window=None, new=None)
    window = _window(workspace.uid, versions_kept(), replacing=sha256)
    if sha256 in window and _keepable(data):
        relpath = version_relpath(sha256)
        # The replaced file itself, linked under its hash: its bytes are already durable, so
        # keeping it costs one directory fsync. A file the write path did not publish (say,
        # written by hand with another mode) is copied instead.
        if not workspace.file_exists(relpath):
            if not workspace.link_durably(MEMORY_RELPATH, relpath, size_bytes=len(data)):
                workspace.publish(relpath, data)
            return KeptVersions(window=window, new=sha256)
    return KeptVersions(window=window, new=None)


def discard_new(workspace: Workspace, kept: KeptVersions) -> None:
    """Remove the version `keep_replaced` just added, after the publish it was for failed, so
    a failed write leaves the workspace as it was. Best effort, like `prune`."""
    if kept.new is None:
        return
    try:
        others = set(workspace.file_sizes(MEMORY_VERSIONS_DIR)) - {kept.new}
        workspace.remove_files_except(MEMORY_VERSIONS_DIR, others, durable=False)
    except WorkspaceError as exc:
        logger.warning("event=versions_discard_failed user=%s error=%s", workspace.uid, exc)


def prune(workspace: Workspace, kept: KeptVersions) -> None:
    """Remove every kept version not in `kept.window`, after a publish's directory fsync.

    Best effort: MEMORY.md is already published, so a failure here is logged, never raised
    (the next change prunes again). Not fsynced: a crash may bring a pruned version back until
    the next change prunes it again, which saves every write a directory fsync (forgetting,
    which the user asked for, is durable).
    """
    if kept.window is None:
        return
    try:
        workspace.remove_files_except(MEMORY_VERSIONS_DIR, kept.window, durable=False)
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

    One entry per distinct version (never the empty file) replaced since the user last forgot
    their versions, at its latest replacement; at most `max(MEMORY_VERSIONS_KEPT,
    MEMORY_VERSIONS_LISTED)`. `available` is whether its bytes
    are still kept (judged by name; `read_memory_version` checks the bytes).
    """
    limit = max(versions_kept(), MEMORY_VERSIONS_LISTED)
    # The change that produced each version: the newest file change before its replacement
    # whose result was those bytes.
    produced_by = (
        MemoryEvent.objects.filter(
            user_id=user.pk,
            kind__in=FILE_CHANGING_KINDS,
            after_sha256=OuterRef("before_sha256"),
            id__lt=OuterRef("id"),
        )
        .order_by("-id")
        .values("kind")[:1]
    )
    events = list(
        _latest_replacements(user.pk)
        .annotate(produced_by=Coalesce(Subquery(produced_by), Value(INITIAL_VERSION_KIND)))
        .values_list("before_sha256", "created_at", "produced_by", "kind")[:limit]
    )
    kept = kept_version_hashes(Workspace.for_user(user.pk))
    missing = [sha for sha, *_ in events if sha not in kept]
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
            kind=produced,
            replaced_by=replaced_by,
            available=sha in kept,
        )
        for sha, replaced_at, produced, replaced_by in events
    ]


def read_memory_version(*, user, sha256: str) -> bytes:
    """The bytes of `user`'s kept version `sha256`, checked against their hash.

    Unknown, removed, no longer matching its hash, or not a version that would have been kept
    (empty, too large, not UTF-8): `MemoryVersionNotFound`. Read no-follow and bounded to the
    largest version kept. Only the user's own workspace is looked in, so another user's
    version is not found.
    """
    sha256 = version_sha256(sha256)
    relpath = version_relpath(sha256)
    data, too_large = Workspace.for_user(user.pk).read_bounded(relpath, MEMORY_FILE_MAX_BYTES)
    if too_large or not _keepable(data) or hashlib.sha256(data).hexdigest() != sha256:
        raise MemoryVersionNotFound(gettext_noop("no such version is kept"))
    return data
