#!/usr/bin/env bash
# Installs, pinned, the bridges an operator would otherwise run in front of an MCP server, for
# `cargo bench --bench toolhost -- peers` (not part of the test suite): supergateway (npm) and
# mcp-proxy (PyPI), into ./.tools/peers (git-ignored). Node comes from the test command's
# .tools/npm (run `bash .ci/test` once first, or have node >= 20 on PATH).
set -euo pipefail
cd "$(dirname "$0")/.."
peers="$PWD/.tools/peers"
mkdir -p "$peers/npm"
npm install --no-audit --no-fund --loglevel=error --prefix "$peers/npm" supergateway@4.0.0
python3 -m venv "$peers/venv"
"$peers/venv/bin/pip" install --quiet --disable-pip-version-check mcp-proxy==0.13.0
echo "peers installed into $peers"
