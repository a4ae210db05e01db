//go:build linux

package gss

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgconnector/pgconnector/internal/contention"
	"github.com/pgconnector/pgconnector/internal/harness"
	"github.com/pgconnector/pgconnector/negotiation"
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

// A storm of 64 goroutines making the warm decision of a connect with GSS allowed (the
// credentials check on a FILE cache filled by MIT's kinit, what the negotiation cache knows,
// the plan) meets no lock of this module: no sample of the mutex profile taken during it has a
// lock taken in the module's code. The control storm (Profile, which takes the client's mutex)
// shows that one would be seen. PGCONNECTOR_PROFILE_DIR keeps the profiles.
func TestWarmCredentialsStormSharesNoLock(t *testing.T) {
	k := harness.StartKDCT(t, harness.KDCOptions{})
	if _, err := k.AddPrincipal("alice"); err != nil {
		t.Fatal(err)
	}
	cc := "FILE:" + filepath.Join(t.TempDir(), "ccache")
	if err := k.KinitName(cc, "alice", 0); err != nil {
		t.Fatal(err)
	}
	c := NewClient(ClientConfig{Krb5Conf: k.Krb5Conf, CCache: cc})
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	first, err := c.Credentials(ctx)
	if err != nil || !first.Valid {
		t.Fatalf("credentials %+v, %v", first, err)
	}
	cache := negotiation.NewCache(time.Minute)
	var keys []negotiation.Key
	for _, h := range []string{"db0.example", "db1.example", "db2.example", "db3.example"} {
		key := negotiation.Key{Host: h, Port: 5432, Principal: first.Principal}
		cache.SetGSS(key, negotiation.AnswerYes, first.Generation)
		keys = append(keys, key)
	}
	var bad atomic.Int32
	res, err := contention.Storm(64, 300, os.Getenv("PGCONNECTOR_PROFILE_DIR"), func(g, i int) {
		cr, err := c.Credentials(ctx)
		kn := cache.Known(keys[(g+i)%len(keys)])
		p, derr := negotiation.Decide(negotiation.Input{SSLMode: negotiation.SSLModePrefer, GSSEncMode: negotiation.GSSEncModePrefer,
			Known: kn, GSSCredentials: cr.Valid, GSSGeneration: cr.Generation})
		if err != nil || !cr.Reused || cr.Generation != first.Generation || derr != nil ||
			p.Methods()[0] != negotiation.MethodGSS || p.Learns {
			bad.Add(1)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if bad.Load() != 0 {
		t.Fatalf("%d decisions were not the warm plan with the same credentials", bad.Load())
	}
	res.Check(t) // no lock of the module contended in the warm decision

	if runtime.GOMAXPROCS(0) < 2 {
		return // one P: the control's callers seldom overlap
	}
	for deadline := time.Now().Add(20 * time.Second); ; {
		res, err := contention.Storm(64, 200, "", func(g, i int) { c.Profile() })
		if err != nil {
			t.Fatal(err)
		}
		seen := false
		for _, s := range res.Mutex {
			seen = seen || s.Ours()
		}
		if seen {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the control storm showed no contention on the client's mutex")
		}
	}
}
