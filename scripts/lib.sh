# Shared steps of scripts/serve and scripts/test: a virtual environment that matches
# requirements.txt, a development secret key, and a reachable PostgreSQL.
ensure_venv() {
  local python="${PYTHON:-python3}"
  if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "ERROR: Python 3.11+ is required (set PYTHON=/path/to/python3.11)." >&2
    exit 2
  fi
  if [ ! -x .venv/bin/python ]; then
    echo "Creating virtual environment in .venv ..."
    "$python" -m venv .venv
  fi
  local stamp=.venv/.requirements.sha256
  local want
  want=$(sha256sum requirements.txt | cut -d' ' -f1)
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "Installing requirements into .venv ..."
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements.txt
    echo "$want" > "$stamp"
  fi
}

# The settings refuse a missing or weak SECRET_KEY while DEBUG is off; for development and
# tests, use (and once create) a random key in var/dev-secret-key unless one is configured.
use_dev_secret_key() {
  if [ -n "${SECRET_KEY:-}" ] || grep -qs '^SECRET_KEY=.' .env; then
    return
  fi
  local file=var/dev-secret-key
  if [ ! -s "$file" ]; then
    mkdir -p var
    (umask 077 && python3 -c 'import secrets; print(secrets.token_urlsafe(50))' > "$file")
  fi
  SECRET_KEY=$(cat "$file")
  export SECRET_KEY
}
