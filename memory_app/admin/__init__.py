"""Read-only staff pages of the memory app, one module per page: the user's memory config and
the per-user pages (`user_config`), the memory ledger (`ledger`), and the run page extended
with the memory app's rule (`runs`).

Django's admin autodiscovery imports this package, and importing a module registers its
admin: each is imported here. A host imports none of them: the pages are registered for it.
"""

from memory_app.admin import ledger, runs, user_config  # noqa: F401 (registers their admins)
