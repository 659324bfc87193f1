"""Shared start of the bench scripts: Django on a database of their own, never the site's.

The benches truncate and seed tables, so they run against `BENCH_DATABASE_URL` (default
`postgres://postgres@127.0.0.1:5432/yuxi_bench`), created and migrated here when missing.
"""

import os
import secrets
import subprocess
import sys
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
BENCH_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/yuxi_bench"


def setup_django() -> None:
    """Point Django at the bench database, make sure it exists and is migrated, set it up."""
    os.environ["DATABASE_URL"] = os.environ.get("BENCH_DATABASE_URL", BENCH_DATABASE_URL)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "yuxi_site.settings")
    # The settings refuse to start without a strong key; a bench signs nothing that outlives it.
    os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(50))
    sys.path.insert(0, str(PROJECT_ROOT))
    checked = subprocess.run([sys.executable, str(PROJECT_ROOT / "scripts/ensure_database.py")])
    if checked.returncode:
        sys.exit(checked.returncode)

    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
