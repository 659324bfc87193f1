"""Every write of long-term memory: the agent's `remember_memory` and the user's own controls.

Each write is one transaction in one order: the per-user advisory lock; for the agent, the run
row lock, the lease check and the switch re-read; for every writer, the check that its user
exists and is active; then the file fence (an exclusive flock on `agents/.memory.lock`), the
bounded read, dedupe or replacement, keeping the version it replaces (`versions`), the temp
file and its fsync, the ledger row (the last statement before the rename, and so the proof that
the session still holds its locks), the rename, the directory fsync, pruning the kept versions,
the flock's release, the commit. A failure before the rename leaves MEMORY.md byte-for-byte as
it was, and a database or lock failure is never downgraded to an unlocked write.

A package, one concern a module: `plan` (what an agent's write makes of the file, without a
lock), `publish` (the steps every writer shares), `agent_write`, `user_writes` and `switches`.
This module names only what the documents make public (a host's import path); code inside the
project imports the rest from the module that owns it.
"""

from memory_app.errors import (
    MemoryAccessDenied,
    MemoryApprovalRequired,
    MemoryConflict,
    MemoryFileTooLarge,
    MemoryInputError,
    MemoryInvisibleText,
    MemoryLineNotFound,
    MemorySensitiveContent,
    MemoryUnavailable,
    MemoryVersionNotFound,
    MemoryWriteError,
)
from memory_app.locks import hold_memory_locks
from memory_app.memory_file import MEMORY_FILE_MAX_BYTES
from memory_app.services.agent_write import remember_memory
from memory_app.services.plan import MemoryWriteResult
from memory_app.services.switches import set_memory_enabled, set_memory_write_approval
from memory_app.services.user_writes import (
    clear_memory,
    delete_memory_line,
    edit_memory_line,
    forget_memory_versions,
    restore_memory_version,
    write_memory_file,
)
from memory_app.user_data import ErasureReport, erase_user

__all__ = [
    "MEMORY_FILE_MAX_BYTES",
    "ErasureReport",
    "MemoryAccessDenied",
    "MemoryApprovalRequired",
    "MemoryConflict",
    "MemoryFileTooLarge",
    "MemoryInputError",
    "MemoryInvisibleText",
    "MemoryLineNotFound",
    "MemorySensitiveContent",
    "MemoryUnavailable",
    "MemoryVersionNotFound",
    "MemoryWriteError",
    "MemoryWriteResult",
    "clear_memory",
    "delete_memory_line",
    "edit_memory_line",
    "erase_user",
    "forget_memory_versions",
    "hold_memory_locks",
    "remember_memory",
    "restore_memory_version",
    "set_memory_enabled",
    "set_memory_write_approval",
    "write_memory_file",
]
