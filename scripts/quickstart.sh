#!/usr/bin/env bash
# Runs the quickstart: installs what it needs (PostgreSQL server binaries, Go modules), then
# runs examples/quickstart, built in the examples' module (examples/go.mod). Without DATABASE_URL it
# starts a throwaway local cluster.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh >&2
go -C examples run ./quickstart "$@"
