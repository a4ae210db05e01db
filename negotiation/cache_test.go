package negotiation

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const DefaultTestTTL = time.Minute

func TestCacheTTL(t *testing.T) {
	now := time.Unix(1000, 0)
	c := NewCache(time.Minute)
	c.now = func() time.Time { return now }
	k := Key{Host: "h", Port: 1}
	if got := c.Known(k); got != (Known{}) {
		t.Fatalf("empty cache knows %+v", got)
	}
	c.SetSSL(k, AnswerNo)
	if got := c.Known(k).SSL; got != AnswerNo {
		t.Fatalf("SSL = %v, want no", got)
	}
	now = now.Add(time.Minute)
	if got := c.Known(k).SSL; got != AnswerUnknown {
		t.Fatalf("after the TTL SSL = %v, want unknown", got)
	}
	c.SetSSL(k, AnswerYes)
	c.SetGSS(k, AnswerNo, 1)
	c.Forget(k)
	if got := c.Known(k); got != (Known{}) {
		t.Fatalf("after Forget: %+v", got)
	}
	other := Key{Host: "h", Port: 1, Principal: "alice@REALM"}
	c.SetGSS(other, AnswerNo, 1)
	if c.Known(k).GSS != AnswerUnknown {
		t.Fatal("principals share an entry")
	}
}

func TestCacheZeroTTLRemembersNothing(t *testing.T) {
	c := NewCache(0)
	k := Key{Host: "h", Port: 1}
	c.SetSSL(k, AnswerNo)
	if got := c.Known(k).SSL; got != AnswerUnknown {
		t.Fatalf("SSL = %v with TTL 0", got)
	}
}

// Many goroutines asking at once: one leads, the others wait until it ends. Run many times: a
// goroutine that reads Known just before the probe ends must not probe a second time.
func TestCacheSingleProbe(t *testing.T) {
	for range 200 {
		singleProbe(t)
	}
}

func singleProbe(t *testing.T) {
	c := NewCache(time.Minute)
	k := Key{Host: "h", Port: 1}
	var leaders atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for {
				seen := c.Known(k)
				if seen.SSL != AnswerUnknown {
					return
				}
				wait, probe := c.BeginProbe(k, seen)
				if probe != nil {
					leaders.Add(1)
					c.SetSSL(k, AnswerNo)
					probe.End()
					return
				}
				<-wait
			}
		}()
	}
	close(start)
	wg.Wait()
	if n := leaders.Load(); n != 1 {
		t.Fatalf("%d probes, want 1", n)
	}
}

// A probe's End never ends a later probe of the same key, however often it is called.
func TestProbeEndIsItsOwn(t *testing.T) {
	c := NewCache(time.Minute)
	k := Key{Host: "h", Port: 1}
	_, first := c.BeginProbe(k, Known{})
	first.End()
	_, second := c.BeginProbe(k, Known{})
	if second == nil {
		t.Fatal("no second probe after the first ended")
	}
	first.End() // again: must not release the second's waiters
	wait, p := c.BeginProbe(k, Known{})
	if p != nil {
		t.Fatal("a third connect leads while the second probes")
	}
	select {
	case <-wait:
		t.Fatal("the first probe's End released the second's waiters")
	default:
	}
	second.End()
	<-wait
	var none *Probe
	none.End() // a nil Probe is fine
}

// One sign that GSS cannot succeed is not remembered; two in a row with the same credentials
// are; a success in between, or other credentials, start again.
func TestStrikeGSS(t *testing.T) {
	c := NewCache(time.Minute)
	k := Key{Host: "h", Port: 1, Principal: "alice@R"}
	if c.StrikeGSS(k, 1) || c.Known(k).GSS != AnswerUnknown {
		t.Fatal("one strike remembered")
	}
	if !c.StrikeGSS(k, 1) || c.Known(k).GSS != AnswerNo {
		t.Fatal("two strikes not remembered")
	}
	c.Forget(k)
	c.StrikeGSS(k, 1)
	c.SetGSS(k, AnswerYes, 1)
	if c.StrikeGSS(k, 1) {
		t.Error("a strike before a success counted")
	}
	c.Forget(k)
	c.StrikeGSS(k, 1)
	if c.StrikeGSS(k, 2) {
		t.Error("strikes with other credentials counted together")
	}
	if NewCache(0).StrikeGSS(k, 1) || NewCache(0).StrikeGSS(k, 1) {
		t.Error("a cache that remembers nothing remembered a strike")
	}
}

// Direct TLS: learned from the SSLRequest path only while no failed direct handshake is
// remembered; a direct connection renews both answers, taking the lock only past half the TTL.
func TestCacheDirect(t *testing.T) {
	now := time.Unix(1000, 0)
	c := NewCache(time.Minute)
	c.now = func() time.Time { return now }
	k := Key{Host: "h", Port: 1}
	c.SetSSL(k, AnswerYes)
	c.LearnDirect(k)
	if got := c.Known(k); got.Direct != AnswerYes || got.SSL != AnswerYes {
		t.Fatalf("after LearnDirect: %+v", got)
	}
	c.SetDirect(k, AnswerNo)
	c.LearnDirect(k)
	if got := c.Known(k).Direct; got != AnswerNo {
		t.Fatalf("LearnDirect overruled a failed direct handshake: %v", got)
	}
	now = now.Add(time.Minute)
	if got := c.Known(k).Direct; got != AnswerUnknown {
		t.Fatalf("after the TTL: %v", got)
	}
	c.LearnDirect(k)
	if got := c.Known(k).Direct; got != AnswerYes {
		t.Fatalf("learned again after the failure expired: %v", got)
	}

	// RenewDirect: both answers last a full TTL from the renewal once half of it is gone.
	c.SetSSL(k, AnswerYes)
	e := c.load(k)
	c.RenewDirect(k) // less than half the TTL gone: nothing written
	if c.load(k) != e {
		t.Error("RenewDirect wrote an entry that was still fresh")
	}
	now = now.Add(31 * time.Second)
	c.RenewDirect(k)
	if c.load(k) == e {
		t.Fatal("RenewDirect did not renew past half the TTL")
	}
	now = now.Add(50 * time.Second)
	if got := c.Known(k); got.SSL != AnswerYes || got.Direct != AnswerYes {
		t.Fatalf("renewed answers expired early: %+v", got)
	}
	c.Forget(k)
	if got := c.Known(k); got != (Known{}) {
		t.Fatalf("after Forget: %+v", got)
	}
	if testing.AllocsPerRun(100, func() { c.SetSSL(k, AnswerYes); c.RenewDirect(k) }) == 0 {
		t.Fatal("SetSSL always copies: the measure is broken")
	}
	c.SetSSL(k, AnswerYes)
	c.SetDirect(k, AnswerYes)
	if n := testing.AllocsPerRun(100, func() { c.RenewDirect(k) }); n != 0 {
		t.Errorf("RenewDirect of fresh answers: %v allocations", n)
	}

	z := NewCache(0)
	z.LearnDirect(k)
	z.SetDirect(k, AnswerYes)
	z.RenewDirect(k)
	if got := z.Known(k); got != (Known{}) {
		t.Errorf("a cache with no TTL remembered %+v", got)
	}
}

// GotIn holds until an answer changes: the same answer learned again keeps it, another answer,
// other credentials, a second strike or Forget drop it; a connect to a key with nothing
// remembered, or with a cache that remembers nothing, notes nothing.
func TestCacheGotInUntilAnAnswerChanges(t *testing.T) {
	k := Key{Host: "h", Port: 1, Principal: "alice@REALM"}
	for _, tt := range []struct {
		name  string
		after func(c *Cache)
		kept  bool
	}{
		{"same 'N' again", func(c *Cache) { c.SetSSL(k, AnswerNo) }, true},
		{"'S' now", func(c *Cache) { c.SetSSL(k, AnswerYes) }, false},
		{"same GSS answer", func(c *Cache) { c.SetGSS(k, AnswerNo, 1) }, true},
		{"GSS answer of other credentials", func(c *Cache) { c.SetGSS(k, AnswerNo, 2) }, false},
		{"GSS now works", func(c *Cache) { c.SetGSS(k, AnswerYes, 1) }, false},
		{"direct TLS learned", func(c *Cache) { c.SetDirect(k, AnswerNo) }, true},
		{"Forget", func(c *Cache) { c.Forget(k) }, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := NewCache(time.Minute)
			c.GotIn(k)
			if c.GotInSince(k) {
				t.Fatal("noted with nothing remembered")
			}
			c.SetSSL(k, AnswerNo)
			c.SetGSS(k, AnswerNo, 1)
			if c.GotInSince(k) {
				t.Fatal("noted before any connect got in")
			}
			c.GotIn(k)
			if !c.GotInSince(k) {
				t.Fatal("not noted")
			}
			tt.after(c)
			if got := c.GotInSince(k); got != tt.kept {
				t.Errorf("GotInSince = %v, want %v", got, tt.kept)
			}
		})
	}
	t.Run("second strike", func(t *testing.T) {
		c := NewCache(time.Minute)
		c.SetSSL(k, AnswerNo)
		c.GotIn(k)
		c.StrikeGSS(k, 1)
		if !c.GotInSince(k) {
			t.Fatal("a first strike, which remembers nothing, dropped it")
		}
		c.StrikeGSS(k, 1)
		if c.GotInSince(k) {
			t.Error("a second strike, which remembers no GSS, kept it")
		}
	})
	t.Run("TTL 0", func(t *testing.T) {
		c := NewCache(0)
		c.SetSSL(k, AnswerNo)
		c.GotIn(k)
		if c.GotInSince(k) {
			t.Error("a cache that remembers nothing noted a connect")
		}
	})
}

// Noting a connect that got in, once noted, takes no lock and allocates nothing: it runs on
// every connect.
func TestCacheGotInDoesNotAllocateOnceNoted(t *testing.T) {
	c := NewCache(time.Minute)
	k := Key{Host: "h", Port: 1}
	c.SetSSL(k, AnswerNo)
	c.GotIn(k)
	if n := testing.AllocsPerRun(100, func() { c.GotIn(k) }); n != 0 {
		t.Errorf("GotIn allocates %v times once noted", n)
	}
}
