#!/usr/bin/env bash
# Runs the quickstart: installs only what it uses (scripts/install-deps.sh --quickstart: the
# PostgreSQL server binaries; go build fetches the Go modules it imports), then builds
# examples/quickstart in the examples' module (examples/go.mod) and runs it with the arguments
# given (-v, -json, -spans FILE, -n N, -workers N). Without DATABASE_URL it starts a throwaway
# local cluster. Built, then run, so that the program's own messages and exit status are what you
# see. The install's messages go to stderr, so that with -json stdout is the report alone.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --quickstart >&2
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go -C examples build -o "$bin/quickstart" ./quickstart
status=0
"$bin/quickstart" "$@" || status=$?
exit "$status"
