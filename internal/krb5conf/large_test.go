package krb5conf

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Shape of largeConf: largeRealms realms of largeKDCs kdc relations each (one tag repeated),
// and largeDomains [domain_realm] names in an order that is not sorted.
const (
	largeRealms  = 100
	largeKDCs    = 500
	largeDomains = 50000
)

// largeConf is a krb5.conf of largeRealms*largeKDCs + largeDomains (100,000) relations, about
// 1.3 MB.
func largeConf() string {
	var b strings.Builder
	b.WriteString("[libdefaults]\n default_realm = R0\n[realms]\n")
	for r := range largeRealms {
		fmt.Fprintf(&b, " R%d = {\n", r)
		for k := range largeKDCs {
			fmt.Fprintf(&b, "  kdc = k%d:%d\n", k, 88+r)
		}
		b.WriteString(" }\n")
	}
	b.WriteString("[domain_realm]\n")
	for i := range largeDomains {
		// A permutation of 0..largeDomains-1 (7919 is prime and does not divide it).
		fmt.Fprintf(&b, " h%d = R%d\n", i*7919%largeDomains, i%largeRealms)
	}
	return b.String()
}

func writeLarge(tb testing.TB) string {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "krb5.conf")
	if err := os.WriteFile(path, []byte(largeConf()), 0o644); err != nil {
		tb.Fatal(err)
	}
	return path
}

// BenchmarkLoadLarge reads largeConf and converts it for gokrb5: what a client does with it.
func BenchmarkLoadLarge(b *testing.B) {
	path := writeLarge(b)
	fi, _ := os.Stat(path)
	b.SetBytes(fi.Size())
	for b.Loop() {
		p, err := Load([]string{path})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := p.Gokrb5Config(); err != nil {
			b.Fatal(err)
		}
	}
}
