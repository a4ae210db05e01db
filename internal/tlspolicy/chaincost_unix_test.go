//go:build unix

package tlspolicy

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pgconnector/pgconnector/internal/testpki"
)

// cpuTime is the process's user and system CPU time.
func cpuTime(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// A server's list of 400 junk certificates (each matching half of the list by name and key
// identifier, no signature verifying) is refused for what it is, as OpenSSL refuses it, at the
// cost of crypto/x509's own refusal: the chain built to name the reason checks no signature
// (or the one that fails, when the junk leads to an anchor of the root file), and the whole
// refusal takes less than 100 ms of CPU (the best of three runs; ten times that under the race
// detector). Before, each step of the chain built to name the reason checked the signature of
// every candidate of the right name: 17,399 signatures (P-521), 36 s of CPU for these 400,
// inside the TLS handshake.
func TestJunkChainRefusalIsCheap(t *testing.T) {
	const n = 400
	junk := testpki.JunkChain(t, n)
	peer := append([]*x509.Certificate{junk.Leaf.Cert}, junk.List...)
	bound := 100 * time.Millisecond
	if raceEnabled {
		bound *= 10
	}
	dir := t.TempDir()
	for _, tt := range []struct {
		name   string
		root   *x509.Certificate
		want   string // the error's start
		checks int64  // signatures the package checks
	}{
		{"no anchor", testpki.NewCA(t).Cert, "certificate verify failed: certificate chain too long (certificate at depth 101, CN=Junk A)", 0},
		{"an anchor of the junk's name and key identifier", junk.Anchor, "certificate verify failed: certificate signature failure (certificate at depth 1, CN=Junk A)", 1},
	} {
		rootFile := filepath.Join(dir, fmt.Sprintf("root%d.pem", len(tt.name)))
		writeRoots(t, rootFile, 0, tt.root)
		chk := &ServerCheck{RootFile: rootFile, Verify: true, Host: "localhost", Cache: &RootCache{}}
		if err := chk.BeforeTLS(); err != nil { // the root file read and cached
			t.Fatal(err)
		}
		var err error
		checks := countSignatures(t, func() {
			err = chk.VerifyConnection(tls.ConnectionState{PeerCertificates: peer})
		})
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.want)
		}
		if checks != tt.checks {
			t.Errorf("%s: %d signatures checked, want %d", tt.name, checks, tt.checks)
		}
		best := time.Duration(1 << 62)
		for range 3 {
			runtime.GC()
			cpu0 := cpuTime(t)
			_ = chk.VerifyConnection(tls.ConnectionState{PeerCertificates: peer})
			best = min(best, cpuTime(t)-cpu0)
			if best <= bound || best > 10*bound {
				break
			}
		}
		t.Logf("%s: %d certificates refused in %v of CPU (best run), %d signatures checked beside crypto/x509's", tt.name, n, best, checks)
		if best > bound {
			t.Errorf("%s: %d certificates refused in %v of CPU, want at most %v", tt.name, n, best, bound)
		}
	}
}
