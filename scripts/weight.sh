#!/usr/bin/env bash
# Binary weight of the library: builds two hello-world programs that open a database/sql pool and
# ping it, one on pgconnector (New, OpenDB, PingContext; this checkout, through a replace) and one
# on pgx's stdlib driver wrapped by github.com/XSAM/otelsql (Open, RegisterDBStatsMetrics,
# PingContext), each with `go build -trimpath` and with `-ldflags='-s -w'` in the same run, and
# prints side by side:
#   - the binary sizes (bytes) and the number of packages linked (go list -deps);
#   - symbol bytes (text, read-only data and data, as go tool nm -size lists them) by group and, for
#     every package whose share differs by 2 KB or more, by package;
#   - the gokrb5 packages compiled in (go list -deps) and which of them the linker kept;
#   - the modules in each binary (go version -m) that the other has not;
#   - the same pgconnector program built with -tags pgconnector_nogss (no Kerberos) beside them:
#     its sizes, what the tag saves by group, and that no gokrb5 package nor internal/gss,
#     ccache, krb5conf or keytabfile is among its packages (the script fails if one is);
#   - that the OpenTelemetry SDK is not linked into the pgconnector program (the script fails if
#     it is), and the go.sum lines a consumer's `go mod tidy` writes for it.
# It needs the Go module proxy (or a module cache holding the modules): GOFLAGS=-mod=mod and the
# go command's own GOPROXY. The pgx side uses the pgx and OpenTelemetry versions of this go.mod
# and otelsql $OTELSQL_VERSION (default v0.44.0). Nothing is written outside a temporary directory
# that is removed at the end. About a minute with a warm build cache.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
otelsql=${OTELSQL_VERSION:-v0.44.0}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export GOFLAGS=-mod=mod LC_ALL=C

# quiet CMD...: runs CMD, printing its output only when it fails.
quiet() {
	local out
	out=$("$@" 2>&1) || { printf '%s\n' "$out" >&2; return 1; }
}

gover=$(go -C "$root" list -m -f '{{.GoVersion}}')
pgxv=$(go -C "$root" list -m -f '{{.Version}}' github.com/jackc/pgx/v5)
otelv=$(go -C "$root" list -m -f '{{.Version}}' go.opentelemetry.io/otel)

mkdir "$work/pgconnector" "$work/otelsql"
cat >"$work/pgconnector/main.go" <<'EOF'
package main

import (
	"context"
	"log"
	"os"

	"github.com/pgconnector/pgconnector"
)

func main() {
	c, err := pgconnector.New(os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	db := c.OpenDB()
	defer db.Close()
	if err := db.PingContext(context.Background()); err != nil {
		log.Fatal(err)
	}
}
EOF
cat >"$work/otelsql/main.go" <<'EOF'
package main

import (
	"context"
	"log"
	"os"

	"github.com/XSAM/otelsql"
	_ "github.com/jackc/pgx/v5/stdlib"
)

func main() {
	db, err := otelsql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if _, err := otelsql.RegisterDBStatsMetrics(db); err != nil {
		log.Fatal(err)
	}
	if err := db.PingContext(context.Background()); err != nil {
		log.Fatal(err)
	}
}
EOF
(
	cd "$work/pgconnector"
	quiet go mod init example.com/hello-pgconnector
	go mod edit -go="$gover" -require=github.com/pgconnector/pgconnector@v0.0.0 \
		-replace=github.com/pgconnector/pgconnector="$root"
	quiet go mod tidy
)
(
	cd "$work/otelsql"
	quiet go mod init example.com/hello-otelsql
	go mod edit -go="$gover"
	quiet go get "github.com/XSAM/otelsql@$otelsql" "github.com/jackc/pgx/v5@$pgxv" \
		"go.opentelemetry.io/otel@$otelv" "go.opentelemetry.io/otel/metric@$otelv" \
		"go.opentelemetry.io/otel/trace@$otelv"
	quiet go mod tidy
)

# pkgsizes FILE: "bytes<TAB>package" for the symbols of FILE in .text, .rodata, .data and
# .noptrdata (go tool nm -size reads the same symbol table but also lists bss, which takes no
# space in the file), by the package each symbol's name starts with.
mkdir "$work/pkgsize"
cat >"$work/pkgsize/main.go" <<'EOF'
// Command pkgsize prints "bytes<TAB>package" for the symbols of a Go ELF binary that lie in
// .text, .rodata, .data and .noptrdata (bss takes no file space; .gopclntab is left out).
package main

import (
	"debug/elf"
	"fmt"
	"os"
	"strings"
)

func main() {
	f, err := elf.Open(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	syms, err := f.Symbols()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	keep := map[elf.SectionIndex]bool{}
	for i, s := range f.Sections {
		switch s.Name {
		case ".text", ".rodata", ".data", ".noptrdata":
			keep[elf.SectionIndex(i)] = true
		}
	}
	sizes := map[string]uint64{}
	for _, s := range syms {
		if keep[s.Section] && s.Size > 0 {
			sizes[pkgOf(s.Name)] += s.Size
		}
	}
	for p, n := range sizes {
		fmt.Printf("%d\t%s\n", n, p)
	}
}

// pkgOf is the package a symbol's bytes count for: its name up to the first '.' after the last
// '/' (before any generic brackets or signature); type descriptors and itabs count for the
// package of the named type they start with, unnamed types under "(unnamed types)".
func pkgOf(name string) string {
	switch {
	case strings.HasPrefix(name, "go:func."):
		return "(function metadata, go:func.*)"
	case strings.HasPrefix(name, "go:string.") || strings.HasPrefix(name, "go:string"):
		return "(string constants)"
	}
	for _, pre := range []string{"type:.eq.", "type:.hash.", "type:.namedata.", "type:.importpath.", "type:", "go:itab.", "go:info.", "go:"} {
		if strings.HasPrefix(name, pre) {
			name = name[len(pre):]
			break
		}
	}
	name = strings.TrimLeft(name, "*(")
	if i := strings.IndexAny(name, "[( "); i >= 0 {
		name = name[:i]
	}
	slash := strings.LastIndexByte(name, '/')
	if i := strings.IndexByte(name[slash+1:], '.'); i >= 0 {
		name = name[:slash+1+i]
	}
	if name == "" || strings.HasPrefix(name, "struct") || strings.HasPrefix(name, "func") ||
		strings.HasPrefix(name, "map") || strings.HasPrefix(name, "chan") || strings.HasPrefix(name, "interface") || name[0] >= '0' && name[0] <= '9' {
		return "(unnamed types)"
	}
	return name
}
EOF
printf 'module pkgsize\n\ngo %s\n' "$gover" >"$work/pkgsize/go.mod"
go -C "$work/pkgsize" build -o "$work/pkgsize.bin" .
pkgsizes() { "$work/pkgsize.bin" "$1" | sort -t"$(printf '\t')" -k2,2; }

# group PACKAGE: the group a package's bytes are added to.
group() {
	awk -F'\t' '{
		p = $2; g = "other: Go runtime and standard library, pgx, otel API, unnamed types"
		if (p ~ /^github.com\/pgconnector\/pgconnector\/internal\/(gss|ccache|krb5conf|keytabfile|localfile)$/) g = "pgconnector, Kerberos (internal/gss, ccache, krb5conf, keytabfile, localfile)"
		else if (p ~ /^github.com\/pgconnector\/pgconnector/) g = "pgconnector, the rest (root, negotiation, tracing, internal/scram, internal/replay)"
		else if (p ~ /^github.com\/jcmturner\// || p == "github.com/hashicorp/go-uuid" || p == "golang.org/x/crypto/md4" || p == "encoding/gob") g = "gokrb5 and what it alone brings (jcmturner/*, go-uuid, x/crypto/md4, encoding/gob)"
		else if (p ~ /^github.com\/xdg-go\/stringprep/) g = "github.com/xdg-go/stringprep (SASLprep for SCRAM)"
		else if (p ~ /^github.com\/xdg-go\/scram/ || p == "golang.org/x/crypto/pbkdf2") g = "github.com/xdg-go/scram, x/crypto/pbkdf2"
		else if (p ~ /^github.com\/ngrok\/sqlmw/) g = "github.com/ngrok/sqlmw (statement spans)"
		else if (p ~ /^github.com\/XSAM\/otelsql/) g = "github.com/XSAM/otelsql"
		else if (p ~ /^go.opentelemetry.io\/otel\/semconv/) g = "go.opentelemetry.io/otel/semconv"
		printf "%d\t%s\n", $1, g
	}' | awk -F'\t' '{ s[$2] += $1 } END { for (g in s) printf "%d\t%s\n", s[g], g }' | sort -t"$(printf '\t')" -k2,2
}

# nogss is the pgconnector program built with -tags pgconnector_nogss (no Kerberos).
for m in pgconnector nogss otelsql; do
	(
		dir=$m tags=
		[ "$m" = nogss ] && dir=pgconnector tags=pgconnector_nogss
		cd "$work/$dir"
		go build -tags "$tags" -trimpath -o "$work/$m.full" .
		go build -tags "$tags" -trimpath -ldflags='-s -w' -o "$work/$m.stripped" .
		go list -deps -tags "$tags" . >"$work/$m.deps"
		pkgsizes "$work/$m.full" >"$work/$m.sizes"
		group <"$work/$m.sizes" >"$work/$m.groups"
		go version -m "$work/$m.full" | awk '$1 == "dep" { print $2 }' | sort -u >"$work/$m.mods"
	)
done

size() { wc -c <"$1" | tr -d ' '; }
echo "$(go version); pgx $pgxv, OpenTelemetry $otelv, otelsql $otelsql; linux/$(go env GOARCH)"
echo
printf '%-50s %14s %18s %10s\n' "hello-world (bytes)" "go build" "-ldflags='-s -w'" "packages"
label() {
	case $1 in
	pgconnector) echo "pgconnector" ;;
	nogss) echo "pgconnector -tags pgconnector_nogss" ;;
	otelsql) echo "pgx stdlib + XSAM/otelsql" ;;
	esac
}
for m in pgconnector nogss otelsql; do
	printf '%-50s %14s %18s %10s\n' "$(label "$m")" "$(size "$work/$m.full")" "$(size "$work/$m.stripped")" "$(wc -l <"$work/$m.deps" | tr -d ' ')"
done
for m in pgconnector nogss; do
	printf '%-50s %14s %18s\n' "difference, $(label "$m")" \
		"$(($(size "$work/$m.full") - $(size "$work/otelsql.full")))" \
		"$(($(size "$work/$m.stripped") - $(size "$work/otelsql.stripped")))"
done
printf '%-50s %14s %18s\n' "saved by -tags pgconnector_nogss" \
	"$(($(size "$work/pgconnector.full") - $(size "$work/nogss.full")))" \
	"$(($(size "$work/pgconnector.stripped") - $(size "$work/nogss.stripped")))"

# side FILE_A FILE_B: "a<TAB>b<TAB>a-b<TAB>name" for the union of names.
side() {
	join -t"$(printf '\t')" -1 2 -2 2 -a1 -a2 -e0 -o 0,1.1,2.1 "$1" "$2" |
		awk -F'\t' '{ printf "%d\t%d\t%d\t%s\n", $2, $3, $2 - $3, $1 }' | sort -t"$(printf '\t')" -k3,3nr
}
echo
echo "Symbol bytes by group (text, rodata, data; the binaries also hold pclntab, about 0.8x text): pgconnector, pgx+otelsql, difference"
side "$work/pgconnector.groups" "$work/otelsql.groups" | awk -F'\t' '{ printf "%10d %10d %+10d  %s\n", $1, $2, $3, $4 }'
echo
echo "Packages whose symbol bytes differ by 2 KB or more: pgconnector, pgx+otelsql, difference"
side "$work/pgconnector.sizes" "$work/otelsql.sizes" |
	awk -F'\t' '$3 >= 2048 || $3 <= -2048 { printf "%10d %10d %+10d  %s\n", $1, $2, $3, $4 }'
echo
echo "Symbol bytes by group: pgconnector, pgconnector -tags pgconnector_nogss, difference"
side "$work/pgconnector.groups" "$work/nogss.groups" | awk -F'\t' '$3 != 0 { printf "%10d %10d %+10d  %s\n", $1, $2, $3, $4 }'

echo
echo "gokrb5 packages compiled into the pgconnector hello-world (go list -deps), and the linker's verdict:"
grep '^github.com/jcmturner/gokrb5/' "$work/pgconnector.deps" | while read -r p; do
	b=$(awk -F'\t' -v p="$p" '$2 == p { print $1 }' "$work/pgconnector.sizes")
	if [ -n "$b" ]; then printf '  %-52s linked, %d bytes\n' "$p" "$b"; else printf '  %-52s not linked\n' "$p"; fi
done

echo
echo "Modules only in the pgconnector binary (go version -m):"
comm -23 "$work/pgconnector.mods" "$work/otelsql.mods" | sed 's/^/  /'
echo "Modules only in the pgx+otelsql binary:"
comm -13 "$work/pgconnector.mods" "$work/otelsql.mods" | sed 's/^/  /'

echo
if grep -E '^github.com/jcmturner/|^github.com/pgconnector/pgconnector/internal/(gss|ccache|krb5conf|keytabfile)$' "$work/nogss.deps"; then
	echo "FAIL: the packages above are among those of the hello-world built with -tags pgconnector_nogss" >&2
	exit 1
fi
echo "gokrb5 and Kerberos packages (internal/gss, ccache, krb5conf, keytabfile) in the hello-world built with -tags pgconnector_nogss (go list -deps): none"
if grep '^go.opentelemetry.io/otel/sdk' "$work/pgconnector.deps"; then
	echo "FAIL: the OpenTelemetry SDK is among the packages of the pgconnector hello-world" >&2
	exit 1
fi
echo "OpenTelemetry SDK packages in the pgconnector hello-world (go list -deps): none"
echo "go.sum of a consumer after go mod tidy: pgconnector $(wc -l <"$work/pgconnector/go.sum" | tr -d ' ') lines, pgx+otelsql $(wc -l <"$work/otelsql/go.sum" | tr -d ' ') lines; lines of the OpenTelemetry SDK and of google/uuid, which only the SDK requires (tidy loads the tests of dependencies, and both libraries' tests use the SDK):"
for m in pgconnector otelsql; do
	grep 'go.opentelemetry.io/otel/sdk\|github.com/google/uuid ' "$work/$m/go.sum" | sed "s/^/  $m: /" || true
done
