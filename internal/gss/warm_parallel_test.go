//go:build linux

package gss

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/pgconnector/pgconnector/internal/harness"
)

// BenchmarkCredentialsWarmParallel is the warm credentials check (FILE cache filled by MIT's
// kinit: its stamp, compared with the last decision) run by many goroutines at once. With
// -cpu 1,2,4,8,16, ns/op that stays flat or falls as the CPUs grow means the goroutines
// share nothing they wait for.
func BenchmarkCredentialsWarmParallel(b *testing.B) {
	k := harness.StartKDCT(b, harness.KDCOptions{})
	if _, err := k.AddPrincipal("alice"); err != nil {
		b.Fatal(err)
	}
	cc := "FILE:" + filepath.Join(b.TempDir(), "ccache")
	if err := k.KinitName(cc, "alice", 0); err != nil {
		b.Fatal(err)
	}
	c := NewClient(ClientConfig{Krb5Conf: k.Krb5Conf, CCache: cc})
	b.Cleanup(func() { c.Close() })
	ctx := context.Background()
	if g, err := c.Credentials(ctx); err != nil || !g.Valid {
		b.Fatalf("credentials %+v, %v", g, err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			g, err := c.Credentials(ctx)
			if err != nil || !g.Reused {
				b.Fatalf("credentials %+v, %v: not reused", g, err)
			}
		}
	})
}
