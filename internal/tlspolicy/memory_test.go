package tlspolicy

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"

	"github.com/pgconnector/pgconnector/internal/testpki"
)

// The root file cache holds the file read last: a file whose content changes before every
// connection replaces it each time, and a file removed leaves nothing held.
func TestRootCacheHoldsTheLastFileOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "root.crt")
	cache := &RootCache{}
	chk := &ServerCheck{RootFile: path, Cache: cache}
	for i := range 20 {
		certs := []*x509.Certificate{testpki.NewCA(t).Cert, testpki.NewCA(t).Cert}
		writeRoots(t, path, 0, certs...)
		if err := chk.BeforeTLS(); err != nil {
			t.Fatal(err)
		}
		cache.mu.Lock()
		held := cache.set.certs
		cache.mu.Unlock()
		if len(held) != len(certs) || !held[0].Equal(certs[0]) || !held[1].Equal(certs[1]) {
			t.Fatalf("file %d: the cache holds %d certificates, not the file's %d", i, len(held), len(certs))
		}
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := chk.BeforeTLS(); err != nil { // sslmode=prefer: no file, no verification
		t.Fatal(err)
	}
	cache.mu.Lock()
	defer cache.mu.Unlock()
	if cache.set != nil {
		t.Errorf("the cache still holds %d certificates of a file that is gone", len(cache.set.certs))
	}
}
