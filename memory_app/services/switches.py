"""The user's memory switches: memory on or off, and approval of each memory write.

Each is a setting changed under the user's advisory lock and file fence, so a memory write in
flight either finishes before the change commits or sees it, and each change is one ledger
row; apart from the file writes, since a switch never changes MEMORY.md.
"""

from collections.abc import Callable

from django.utils.translation import gettext_noop

from memory_app.authorization import MemoryState
from memory_app.errors import MemoryInputError
from memory_app.models import MemoryEventKind, UserConfig
from memory_app.services.publish import record_unchanged_file, user_write


def set_memory_enabled(*, user, enabled: bool, actor) -> UserConfig:
    """Turn `user`'s memory on or off (creating the row), under the user's advisory lock.

    A memory write in flight either finishes before the change commits or sees it. A change
    is recorded in the ledger with the file's current hash as both before and after.
    """
    return _set_setting(
        user=user,
        field="enable_memory",
        enabled=enabled,
        actor=actor,
        kinds=(MemoryEventKind.SWITCH_ON, MemoryEventKind.SWITCH_OFF),
        current=lambda state: state.enabled,
    )


def set_memory_write_approval(*, user, enabled: bool, actor) -> UserConfig:
    """Make each of `user`'s memory writes wait for their decision, or not (creating the row),
    under the user's advisory lock: a write in flight either finishes before the change
    commits or sees it. A change is recorded in the ledger as `approval_on` / `approval_off`,
    with the file's current hash as both before and after."""
    return _set_setting(
        user=user,
        field="memory_write_approval",
        enabled=enabled,
        actor=actor,
        kinds=(MemoryEventKind.APPROVAL_ON, MemoryEventKind.APPROVAL_OFF),
        current=lambda state: state.write_approval,
    )


def _set_setting(
    *,
    user,
    field: str,
    enabled: bool,
    actor,
    kinds: tuple[str, str],
    current: Callable[[MemoryState], bool],
) -> UserConfig:
    """Set the boolean `field` of `user`'s `UserConfig` under the user-write locks (`current`
    reads its value from the state read there); a change gets the ledger event `kinds[0]`
    (now on) or `kinds[1]` (now off)."""
    if not isinstance(enabled, bool):
        raise MemoryInputError(gettext_noop("enabled must be true or false"))
    with user_write(user.pk) as (workspace, held, state):
        config, _ = UserConfig.objects.update_or_create(
            user_id=workspace.uid, defaults={field: enabled}
        )
        if enabled != current(state):
            kind = kinds[0] if enabled else kinds[1]
            record_unchanged_file(workspace, held, kind=kind, actor=actor)
    return config
