#!/usr/bin/env bash
# Reproduces docs/benchmarks.md and its charts: installs what the benchmark needs (the same as the
# tests: PostgreSQL server programs with pgbench, psql, MIT Kerberos, pgbouncer, Go modules), then runs every
# peer side by side on throwaway servers (about 8 minutes on 2 cores). Arguments go to
# cmd/pgconnect-bench, for example -quick for a smoke run or -out DIR to write elsewhere. The
# command is a module of its own (cmd/pgconnect-bench/go.mod): it is built there and run from here,
# so that -out (docs/ by default) is relative to the repository root.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go -C cmd/pgconnect-bench build -o "$bin/pgconnect-bench" .
"$bin/pgconnect-bench" "$@"
