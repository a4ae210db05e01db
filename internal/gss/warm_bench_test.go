//go:build linux

package gss

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/pgconnector/pgconnector/internal/harness"
	"github.com/pgconnector/pgconnector/negotiation"
)

// BenchmarkWarmDecision is what a warm connect pays to decide with GSS allowed, for each
// credential cache type: the credentials check (the cache's stamp, compared with the last
// one; nothing is parsed) and the plan from what the negotiation cache knows. The caches are
// filled by MIT's kinit, the KCM one kept by a real KCM daemon. The KEYRING case uses a
// collection of the user keyring, destroyed and unlinked at the end.
func BenchmarkWarmDecision(b *testing.B) {
	k := harness.StartKDCT(b, harness.KDCOptions{})
	if _, err := k.AddPrincipal("alice"); err != nil {
		b.Fatal(err)
	}
	kcm := harness.StartKCMT(b)
	dir := b.TempDir()
	keyring := harness.UserKeyringCache(b)
	cases := []struct {
		name, ccache, krb5Conf string
		kinit                  func() error
	}{
		{"ccache=FILE", "FILE:" + filepath.Join(dir, "file"), k.Krb5Conf, nil},
		{"ccache=DIR", "DIR:" + filepath.Join(dir, "dir"), k.Krb5Conf, nil},
		{"ccache=KEYRING", keyring, k.Krb5Conf, nil},
		{"ccache=KCM", "KCM:", k.Krb5Conf + ":" + kcm.Krb5Conf, func() error { return kcm.Kinit(k, "KCM:", "alice", 0) }},
	}
	ctx := context.Background()
	cache := negotiation.NewCache(time.Minute)
	key := negotiation.Key{Host: "db.example", Port: 5432}
	cache.SetSSL(key, negotiation.AnswerNo)
	for _, tc := range cases {
		kinit := tc.kinit
		if kinit == nil {
			kinit = func() error { return k.KinitName(tc.ccache, "alice", 0) }
		}
		if err := kinit(); err != nil {
			b.Fatal(err)
		}
		c := NewClient(ClientConfig{Krb5Conf: tc.krb5Conf, CCache: tc.ccache})
		if g, err := c.Credentials(ctx); err != nil || !g.Valid {
			b.Fatalf("%s: credentials %+v, %v", tc.ccache, g, err)
		}
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				g, err := c.Credentials(ctx)
				if err != nil || !g.Reused {
					b.Fatalf("credentials %+v, %v: not reused", g, err)
				}
				p, _ := negotiation.Decide(negotiation.Input{SSLMode: negotiation.SSLModePrefer,
					GSSEncMode: negotiation.GSSEncModePrefer, Known: cache.Known(key), GSSCredentials: true})
				if p.Methods()[0] != negotiation.MethodGSS {
					b.Fatal("unexpected plan")
				}
			}
		})
	}
}
