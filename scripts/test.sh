#!/usr/bin/env bash
# Runs the whole test suite: installs what it needs (PostgreSQL server binaries, Go modules), then
# go vet, the tests with the race detector, and a short run of each fuzz target.
# The tests start their own throwaway PostgreSQL clusters on loopback; nothing else is needed.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh
echo "== go vet"
go vet ./...
echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then echo "gofmt would change: $unformatted"; exit 1; fi
echo "== fuzz (${FUZZTIME:=15s} each)"
go test -run '^$' -fuzz '^FuzzParseSettings$' -fuzztime "$FUZZTIME" .
echo "== go test -race"
go test -race -count=1 -timeout 60m "$@" ./...
