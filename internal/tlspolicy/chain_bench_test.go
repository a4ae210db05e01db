package tlspolicy

import (
	"crypto/x509"
	"testing"
	"time"

	"github.com/pgconnector/pgconnector/internal/testpki"
)

// BenchmarkVerifyChain is the check of an honest server's chain (its certificate and an
// intermediate, the root in the root file) that every verify-ca or verify-full connection makes.
func BenchmarkVerifyChain(b *testing.B) {
	p := testpki.New(b)
	trust := trustOf(newRootSet([]*x509.Certificate{p.Root.Cert}))
	peer := []*x509.Certificate{p.Leaf.Cert, p.Inter.Cert}
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := verifyChain(peer, trust, now); err != nil {
			b.Fatal(err)
		}
	}
}
