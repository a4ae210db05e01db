package negotiation

import (
	"context"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgconnector/pgconnector/internal/contention"
)

// A storm of 64 goroutines making warm decisions (the negotiator's decision step: Known,
// Decide, the refresh check) over four hosts meets no lock of this module: no sample of the
// mutex profile taken during it has a lock taken in the module's code. The control storm, of
// writers, shows that one would be seen. PGCONNECTOR_PROFILE_DIR keeps the profiles.
func TestWarmDecisionStormSharesNoLock(t *testing.T) {
	n, keys := warmHosts(t, NewCache(DefaultTestTTL))
	ctx := context.Background()
	var bad atomic.Int32
	res, err := contention.Storm(64, 500, os.Getenv("PGCONNECTOR_PROFILE_DIR"), func(g, i int) {
		j := (g + i) % len(keys)
		b := n.newBudget()
		plan, _, probe, err := n.decide(ctx, &b, &n.cfg.Hosts[j], keys[j], GSSCredentials{}, false)
		b.release()
		if err != nil || probe != nil || plan.Methods()[0] != MethodPlain {
			bad.Add(1)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if bad.Load() != 0 {
		t.Fatalf("%d decisions were not the warm plan", bad.Load())
	}
	res.Check(t) // no lock of the module contended in the warm decision

	// The control: writers do take the cache's mutex, and the check sees it.
	if runtime.GOMAXPROCS(0) < 2 {
		return // one P: the writers seldom overlap
	}
	c := NewCache(DefaultTestTTL)
	k := Key{Host: "control.example", Port: 5432}
	for deadline := time.Now().Add(20 * time.Second); ; {
		res, err := contention.Storm(64, 200, "", func(g, i int) { c.SetSSL(k, AnswerNo) })
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
			t.Fatal("the control storm of writers showed no contention on the cache's mutex")
		}
	}
}
