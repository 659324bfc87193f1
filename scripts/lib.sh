# Shared steps of scripts/serve and scripts/test: a virtual environment that matches
# requirements.txt, and a reachable PostgreSQL.
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

