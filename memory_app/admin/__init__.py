"""Read-only staff pages of the memory app, one module per page: the user's memory config and
the per-user pages (`user_config`), the memory ledger (`ledger`), and the run page extended
with the memory app's rule (`runs`).

Django's admin autodiscovery imports this package, and importing a module registers its
admin: each is imported here. The run admin is the one name the documents give a host.
"""

from memory_app.admin import ledger, user_config  # noqa: F401 (registers their admins)
from memory_app.admin.runs import AgentRunWithMemoryAdmin

__all__ = ["AgentRunWithMemoryAdmin"]
