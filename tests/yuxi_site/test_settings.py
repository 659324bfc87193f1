"""Production settings: a weak secret key is refused while DEBUG is off, a missing one is a
random kept one, and the deploy check
is clean with the production environment. Each case starts a fresh process, since settings
are read once at import."""

import json
import os
import secrets
import subprocess
import sys

from django.conf import settings

STRONG_KEY = secrets.token_urlsafe(50)
PRODUCTION = {
    "DEBUG": "False",
    "SECRET_KEY": STRONG_KEY,
    "SECURE_SSL_REDIRECT": "True",
    "SECURE_HSTS_SECONDS": "31536000",
    "SECURE_HSTS_INCLUDE_SUBDOMAINS": "True",
    "SECURE_HSTS_PRELOAD": "True",
    "SESSION_COOKIE_SECURE": "True",
    "CSRF_COOKIE_SECURE": "True",
    # a real model: the scripted demo model must not answer users in production
    "LLM_BASE_URL": "http://127.0.0.1:9/v1",
}
INSECURE_VARIABLES = [*PRODUCTION, "SECURE_PROXY_SSL"]


def _manage(*args: str, **environment: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in INSECURE_VARIABLES}
    env.update(environment)
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_missing_secret_key_is_a_random_one_kept_in_the_key_file(tmp_path):
    key_file = tmp_path / "keys" / "secret-key"
    show = "from django.conf import settings; print(settings.SECRET_KEY)"
    first = _manage(
        "shell", "-v", "0", "-c", show, DEBUG="False", SECRET_KEY="", SECRET_KEY_FILE=str(key_file)
    )
    again = _manage(
        "shell", "-v", "0", "-c", show, DEBUG="False", SECRET_KEY="", SECRET_KEY_FILE=str(key_file)
    )
    assert first.returncode == 0, first.stderr
    key = first.stdout.strip()
    assert key == again.stdout.strip() == key_file.read_text().strip()
    assert len(key) >= 50
    assert key_file.stat().st_mode & 0o777 == 0o600


def test_startup_refuses_the_development_key_and_short_keys_while_debug_is_off():
    for key in ("insecure-dev-key-change-me", "django-insecure-" + "x" * 60, "k" * 60, "short"):
        done = _manage("check", DEBUG="False", SECRET_KEY=key)
        assert done.returncode != 0, key
        assert "SECRET_KEY is insecure and DEBUG is off" in done.stderr


def test_debug_runs_with_the_development_key_and_production_with_a_strong_one():
    assert _manage("check", DEBUG="True", SECRET_KEY="insecure-dev-key").returncode == 0
    assert _manage("check", DEBUG="False", SECRET_KEY=STRONG_KEY).returncode == 0


def test_the_deploy_check_is_clean_with_the_production_environment():
    done = _manage("check", "--deploy", "--fail-level", "WARNING", **PRODUCTION)
    assert done.returncode == 0, done.stderr
    assert "System check identified no issues" in done.stdout


def test_the_deploy_check_warns_without_the_https_settings():
    done = _manage(
        "check", "--deploy", "--fail-level", "WARNING", DEBUG="False", SECRET_KEY=STRONG_KEY
    )
    assert done.returncode != 0
    for warning in ("W004", "W008", "W012", "W016"):
        assert warning in done.stderr


def _database_settings(**environment: str) -> dict:
    show = (
        "import json; from django.conf import settings; d = settings.DATABASES; "
        "print(json.dumps({'mode': settings.DATABASE_POOL_MODE, "
        "'prepared': settings.PREPARED_STATEMENTS, "
        "'cursors': d['default'].get('DISABLE_SERVER_SIDE_CURSORS', False), "
        "'pool': d['default']['OPTIONS']['pool'], 'checkpoints': settings.CHECKPOINT_POOL_MAX, "
        "'direct': d.get('direct', {}).get('PORT')}))"
    )
    done = _manage("shell", "-v", "0", "-c", show, **environment)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_transaction_pool_mode_turns_off_prepared_statements_and_server_side_cursors():
    pooled = _database_settings(DATABASE_POOL_MODE="transaction")
    assert pooled["mode"] == "transaction"
    assert pooled["prepared"] is False and pooled["cursors"] is True
    direct = _database_settings(DATABASE_POOL_MODE="session")
    assert direct["prepared"] is True and direct["cursors"] is False


def test_prepared_statements_are_read_from_the_environment():
    assert _database_settings(PREPARED_STATEMENTS="False")["prepared"] is False


def test_an_unknown_pool_mode_is_refused_naming_the_choices():
    done = _manage("check", DATABASE_POOL_MODE="statement")
    assert done.returncode != 0
    assert "DATABASE_POOL_MODE" in done.stderr and "transaction" in done.stderr


def test_the_pool_sizes_come_from_the_environment():
    planned = _database_settings(
        DATABASE_POOL_MIN_SIZE="0",
        DATABASE_POOL_MAX_SIZE="6",
        DATABASE_POOL_TIMEOUT="4.5",
        CHECKPOINT_POOL_MAX="2",
    )
    assert planned["pool"]["min_size"] == 0 and planned["pool"]["max_size"] == 6
    assert planned["pool"]["timeout"] == 4.5 and planned["checkpoints"] == 2
    assert _database_settings()["pool"]["max_size"] == 16


def test_a_direct_url_is_the_direct_database_for_migrate():
    direct = _database_settings(DATABASE_DIRECT_URL="postgres://postgres@127.0.0.1:5433/x")
    assert direct["direct"] == 5433
    assert _database_settings()["direct"] is None
