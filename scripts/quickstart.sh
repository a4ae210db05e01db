#!/usr/bin/env bash
# Runs the quickstart: installs what it needs (PostgreSQL server binaries, Go modules), then
# builds examples/quickstart in the examples' module (examples/go.mod) and runs it with the
# arguments given (-v, -json, -n N, -workers N). Without DATABASE_URL it starts a throwaway local
# cluster. Built, then run, so that the program's own messages and exit status are what you see.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh >&2
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go -C examples build -o "$bin/quickstart" ./quickstart
status=0
"$bin/quickstart" "$@" || status=$?
exit "$status"
