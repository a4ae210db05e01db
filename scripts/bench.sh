#!/usr/bin/env bash
# Reproduces docs/benchmarks.md and its charts: installs what the benchmark needs (the same as the
# tests: PostgreSQL server programs with pgbench, psql, MIT Kerberos, Go modules), then runs every
# peer side by side on throwaway servers (about 9 minutes on 2 cores). Arguments go to
# cmd/pgconnect-bench, for example -quick for a smoke run or -out DIR to write elsewhere.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh
go run ./cmd/pgconnect-bench "$@"
