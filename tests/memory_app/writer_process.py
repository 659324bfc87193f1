"""A separate OS process that appends facts through `remember_memory` (for the race tests).

Importable before Django is set up: the child process configures Django itself from `env`.
"""

import os


def append_facts(
    env: dict[str, str], ctx_fields: dict[str, str], facts: list[str], barrier, results
) -> None:
    os.environ.update(env)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "yuxi_site.settings")
    import django

    django.setup()
    from django.db import connection

    from memory_app.runtime import ToolRuntimeContext
    from memory_app.services import remember_memory

    ctx = ToolRuntimeContext(**ctx_fields)
    try:
        barrier.wait()
        for fact in facts:
            results.put(remember_memory(ctx, fact).status)
    finally:
        connection.close()
