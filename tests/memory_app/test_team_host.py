"""The apps in a team's real project (`tests/team_host`): its own email-login user model
without username, names or is_active, its own user admin, its own NinjaAPI under `api`, bearer
tokens. Django's user model is fixed per process, so that host's checks
(`tests/team_host/host_checks.py`) run in a pytest of their own, on a test database of their
own (`<DATABASE_URL's name>_team`, prefixed `test_`)."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HOST = ROOT / "tests" / "team_host"


def test_the_apps_work_in_a_team_host_with_its_own_user_model_admin_api_and_auth():
    env = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(HOST)])
    result = subprocess.run(
        [sys.executable, "-m", "pytest", str(HOST / "host_checks.py")]
        + ["--ds", "settings", "--confcutdir", str(HOST), "-p", "no:cacheprovider"]
        + ["-o", "python_files=host_*.py", "-q", "--create-db", "-W", "ignore"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-8000:] + result.stderr[-2000:]


def test_the_guides_bearer_token_example_is_the_one_the_team_host_runs():
    guide = (ROOT / "docs" / "integration.md").read_text()
    used = (HOST / "api_auth.py").read_text()
    assert f"```python\n{used}```" in guide
