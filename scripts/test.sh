#!/usr/bin/env bash
# Runs the whole test suite: installs what it needs (PostgreSQL server binaries, Go modules), then
# go vet and a go.mod check in every module, go vet of the library with the build tag
# pgconnector_nogss and a check that it then imports no Kerberos package, gofmt, a short run of
# each fuzz target (connection strings, CRLs, client keys, server certificate lists, a server's negotiation bytes, its OAuth error JSON, GSS packets, secret literals
# in recorded statement texts, query summaries), the tests of every module with the race detector (TestSoak for
# 30 s), the library's tests again with Go 1.27 (GOTOOLCHAIN=go1.27.3, from the Go module proxy),
# the NoGSS tests with the tag (not given the arguments), and a check that the tests left
# nothing of the harness behind. The tests start their own throwaway PostgreSQL
# clusters, KDCs and Jaeger on loopback; nothing else is needed. Arguments go to every go test
# -race run, for example -run 'Soak|Jaeger'.
set -euo pipefail
cd "$(dirname "$0")/.."
# The newer of the two Go releases the library is tested with (the other is the machine's own).
GO127=go1.27.3

# Every Go module of the repository, the library (.) first: beside it, with a go.mod of its own,
# the explain command (cmd/pgconnect), the benchmark command (cmd/pgconnect-bench) and the examples with their end-to-end tests
# (examples). ./... stops at a nested go.mod, so each module is run on its own.
mapfile -t modules < <(find . -name go.mod -not -path '*/testdata/*' -not -path './.git/*' -printf '%h\n' | sort)

bash scripts/install-deps.sh
echo "== go vet"
for m in "${modules[@]}"; do
  echo "-- $m"
  go -C "$m" vet ./...
done
echo "== go mod tidy"
# go.mod and go.sum say what the module's packages and their tests import, nothing more: the
# library's stays free of what only the benchmark command and the examples need.
for m in "${modules[@]}"; do
  go -C "$m" mod tidy -diff || { echo "$m/go.mod is not tidy: run go mod tidy in $m"; exit 1; }
done
echo "== build tag pgconnector_nogss"
# The library without Kerberos, as libpq built without GSSAPI: it must vet and build, and import
# neither gokrb5 nor the Kerberos packages (its tests run with the others, below).
go vet -tags pgconnector_nogss ./...
go build -tags pgconnector_nogss ./...
if go list -deps -tags pgconnector_nogss . | grep -E '^github.com/jcmturner/|/internal/(gss|ccache|krb5conf|keytabfile)$'; then
  echo "the library built with -tags pgconnector_nogss imports the packages above"; exit 1
fi
echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then echo "gofmt would change: $unformatted"; exit 1; fi

# What the harness makes lives in pgconnector-harness-* directories in /dev/shm or the temporary
# directory. Its clusters (and the initdb template's) run with dynamic_shared_memory_type = mmap,
# their segments in their data directories: a /dev/shm/PostgreSQL.* segment is another server's
# (a PostgreSQL of the user's on this machine) and is not counted.
# The KEYRING cache tests use a session keyring of their own, which goes with them, and
# collections of the user keyring (_krb_pgc...) and persistent keyrings of unused uids, which
# they destroy at their end: those are listed too.
harness_files() {
  {
    ls -d /dev/shm/pgconnector-* "${TMPDIR:-/tmp}"/pgconnector-harness-* 2>/dev/null || true
    awk '$8 == "keyring" && ($9 ~ /^_krb_pgc/ || $9 ~ /^_persistent\./) { print "keyring " $9 }' /proc/keys 2>/dev/null || true
  } | sort
}
before=$(harness_files)

# FUZZTIME is a count of inputs (Nx), not a duration: with a duration, Go 1.26's fuzzing
# coordinator can fail a run at its end with "context deadline exceeded" when the machine is
# loaded, having found nothing (golang.org/issue/75804, fixed in Go 1.27).
echo "== fuzz (${FUZZTIME:=100000x} each)"
# A failing input is written to testdata/fuzz/: fix the cause and commit it as a regression case.
go test -run '^$' -fuzz '^FuzzParseSettings$' -fuzztime "$FUZZTIME" ./internal/connstring
go test -run '^$' -fuzz '^FuzzPassfile$' -fuzztime "$FUZZTIME" ./internal/connstring
go test -run '^$' -fuzz '^FuzzServiceFile$' -fuzztime "$FUZZTIME" ./internal/connstring
go test -run '^$' -fuzz '^FuzzCRLDistributionPoints$' -fuzztime "$FUZZTIME" ./internal/tlspolicy
go test -run '^$' -fuzz '^FuzzParseCRL$' -fuzztime "$FUZZTIME" ./internal/tlspolicy
go test -run '^$' -fuzz '^FuzzParseKey$' -fuzztime "$FUZZTIME" ./internal/tlspolicy
go test -run '^$' -fuzz '^FuzzChainCheck$' -fuzztime "$FUZZTIME" ./internal/tlspolicy
go test -run '^$' -fuzz '^FuzzNegotiationBytes$' -fuzztime "$FUZZTIME" ./negotiation
go test -run '^$' -fuzz '^FuzzOAuthAnswer$' -fuzztime "$FUZZTIME" ./negotiation
go test -run '^$' -fuzz '^FuzzConnRead$' -fuzztime "$FUZZTIME" ./internal/gss
go test -run '^$' -fuzz '^FuzzSecretLiteral$' -fuzztime "$FUZZTIME" ./tracing
go test -run '^$' -fuzz '^FuzzSummarizeQuery$' -fuzztime "$FUZZTIME" ./tracing
go test -run '^$' -fuzz '^FuzzParse$' -fuzztime "$FUZZTIME" ./internal/krb5conf
go test -run '^$' -fuzz '^FuzzFileCache$' -fuzztime "$FUZZTIME" ./internal/ccache
go test -run '^$' -fuzz '^FuzzRecords$' -fuzztime "$FUZZTIME" ./internal/ccache
go test -run '^$' -fuzz '^FuzzPrimaryName$' -fuzztime "$FUZZTIME" ./internal/ccache
go test -run '^$' -fuzz '^FuzzKCMReply$' -fuzztime "$FUZZTIME" ./internal/ccache
go test -run '^$' -fuzz '^FuzzKeytab$' -fuzztime "$FUZZTIME" ./internal/keytabfile
go test -run '^$' -fuzz '^FuzzServerFirst$' -fuzztime "$FUZZTIME" ./internal/scram
go test -run '^$' -fuzz '^FuzzSASLprep$' -fuzztime "$FUZZTIME" ./internal/scram
echo "== go test -race"
# The library's runs (Go 1.26, Go 1.27, the NoGSS tests) in the foreground; the other modules
# (cmd/pgconnect, cmd/pgconnect-bench, examples), which share no package with the library's tests,
# side by side in the background, one package at a time (-p 1: with the library's two, at most
# three test binaries on the machine), their output shown once they end. Each test process has
# its own harness directory and ports.
status=0
others_log=$(mktemp)
others() {
  local st=0
  for m in "${modules[@]}"; do
    [ "$m" = . ] && continue
    echo "-- $m"
    go -C "$m" test -race -count=1 -p 1 -timeout 60m "$@" ./... || st=$?
  done
  return "$st"
}
others "$@" >"$others_log" 2>&1 &
others_pid=$!
started=$SECONDS
echo "-- ."
go test -race -count=1 -timeout 60m "$@" ./... || status=$?
# Go 1.26 and 1.27 are both supported: the library's packages run again with Go 1.27, which the go
# command takes from the Go module proxy (about 76 MB, once per machine). database/sql behaves
# differently there (driver.RowsColumnScanner: TestDriverTypesMatchPgx, and internal/stdlibsuite, pgx's
# database/sql suite run on pgx's driver and the connector side by side).
echo "-- . with Go 1.27 (GOTOOLCHAIN=$GO127)"
GOTOOLCHAIN=$GO127 go vet ./...
GOTOOLCHAIN=$GO127 go test -race -count=1 -timeout 60m "$@" ./... || status=$?
echo "-- . with -tags pgconnector_nogss"
go test -race -count=1 -timeout 10m -tags pgconnector_nogss -run NoGSS . || status=$?
echo "-- the library's runs took $((SECONDS - started)) s"
others_status=0
wait "$others_pid" || others_status=$?
cat "$others_log"
rm -f "$others_log"
echo "-- the other modules' runs took $((SECONDS - started)) s (in the background)"
[ "$others_status" -eq 0 ] || status=$others_status

echo "== nothing of the harness left behind"
# A test binary that did not end normally is cleaned up after by its guardian process, a moment
# after it ended.
for _ in $(seq 60); do
  left=$(comm -13 <(echo "$before") <(harness_files))
  [ -z "$left" ] && break
  sleep 0.5
done
if [ -n "$left" ]; then
  echo "left behind by the tests:"
  echo "$left"
  [ "$status" -ne 0 ] || status=1
else
  echo "nothing"
fi
exit "$status"
