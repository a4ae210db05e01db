package negotiation

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestRefreshAge(t *testing.T) {
	for _, tt := range []struct{ ttl, want time.Duration }{
		{0, 0},
		{-time.Second, 0},
		{2 * time.Second, time.Second},
		{90 * time.Second, 45 * time.Second},
		{2 * time.Minute, time.Minute},
		{5 * time.Minute, time.Minute},
		{time.Hour, time.Minute},
	} {
		if got := NewCache(tt.ttl).RefreshAge(); got != tt.want {
			t.Errorf("TTL %v: refresh age %v, want %v", tt.ttl, got, tt.want)
		}
	}
}

// fakeClockCache is a cache whose clock the test moves.
func fakeClockCache(ttl time.Duration) (*Cache, *time.Time) {
	now := time.Unix(1000, 0)
	c := NewCache(ttl)
	c.now = func() time.Time { return now }
	return c, &now
}

var sslSkipped = []Method{MethodSSL}

// A negative answer is refreshed once it is RefreshAge old, not before; only one refresh of a
// key runs at a time; after one ends the next waits RefreshAge; a confirmed answer (learned
// again) restarts its age.
func TestBeginRefreshAge(t *testing.T) {
	c, now := fakeClockCache(10 * time.Minute) // refresh age 1 min
	k := Key{Host: "h", Port: 1}
	if r := c.BeginRefresh(k, sslSkipped, 0); r != nil {
		t.Fatal("a refresh of nothing remembered")
	}
	c.SetSSL(k, AnswerNo)
	learned := *now
	*now = learned.Add(time.Minute - time.Nanosecond)
	if r := c.BeginRefresh(k, sslSkipped, 0); r != nil {
		t.Fatal("a refresh before the refresh age")
	}
	*now = learned.Add(time.Minute)
	r := c.BeginRefresh(k, sslSkipped, 0)
	if r == nil || !slices.Equal(r.Methods(), []Method{MethodSSL}) || r.Key() != k {
		t.Fatalf("refresh at the refresh age: %+v", r)
	}
	if again := c.BeginRefresh(k, sslSkipped, 0); again != nil {
		t.Fatal("a second refresh while the first runs")
	}
	*now = now.Add(5 * time.Second)
	r.End() // inconclusive: nothing was learned
	if a, l := c.Remembered(k, MethodSSL); a != AnswerNo || !l.Equal(learned) {
		t.Fatalf("after an inconclusive refresh: %v learned at %v, want no at %v", a, l, learned)
	}
	ended := *now
	*now = ended.Add(time.Minute - time.Nanosecond)
	if again := c.BeginRefresh(k, sslSkipped, 0); again != nil {
		t.Fatal("another refresh less than the refresh age after the last one ended")
	}
	*now = ended.Add(time.Minute)
	r = c.BeginRefresh(k, sslSkipped, 0)
	if r == nil {
		t.Fatal("no refresh the refresh age after the last one ended")
	}
	c.SetSSL(k, AnswerNo) // confirmed
	relearned := *now
	r.End()
	r.End() // twice: harmless
	if a, l := c.Remembered(k, MethodSSL); a != AnswerNo || !l.Equal(relearned) {
		t.Fatalf("after a confirmed refresh: %v learned at %v, want no at %v", a, l, relearned)
	}
	*now = relearned.Add(time.Minute - time.Nanosecond)
	if again := c.BeginRefresh(k, sslSkipped, 0); again != nil {
		t.Fatal("a confirmed answer was refreshed before its new age")
	}
	*now = relearned.Add(time.Minute)
	if r := c.BeginRefresh(k, sslSkipped, 0); r == nil {
		t.Fatal("no refresh of the confirmed answer at its new age")
	} else {
		r.End()
	}
	var none *Refresh
	none.End() // a nil Refresh is fine
}

// What is not refreshed: a positive answer, an expired one, a GSS answer learned with other
// credentials, anything in a cache that remembers nothing. Both negative answers of a key are
// refreshed together, in the order given.
func TestBeginRefreshWhat(t *testing.T) {
	c, now := fakeClockCache(2 * time.Second) // refresh age 1 s
	k := Key{Host: "h", Port: 1, Principal: "alice@R"}
	both := []Method{MethodGSS, MethodSSL}

	c.SetSSL(k, AnswerYes)
	*now = now.Add(time.Second)
	if r := c.BeginRefresh(k, both, 1); r != nil {
		t.Fatal("a positive answer refreshed")
	}
	c.SetSSL(k, AnswerNo)
	*now = now.Add(2 * time.Second)
	if r := c.BeginRefresh(k, both, 1); r != nil {
		t.Fatal("an expired answer refreshed")
	}

	k2 := Key{Host: "h2", Port: 1, Principal: "alice@R"}
	c.SetGSS(k2, AnswerNo, 1)
	c.SetSSL(k2, AnswerNo)
	*now = now.Add(time.Second)
	if r := c.BeginRefresh(k2, both, 2); r == nil || !slices.Equal(r.Methods(), []Method{MethodSSL}) {
		t.Fatalf("with other credentials: %+v, want only ssl", r)
	} else {
		r.End()
	}
	k3 := Key{Host: "h3", Port: 1, Principal: "alice@R"}
	c.SetGSS(k3, AnswerNo, 1)
	c.SetSSL(k3, AnswerNo)
	*now = now.Add(time.Second)
	r := c.BeginRefresh(k3, both, 1)
	if r == nil || !slices.Equal(r.Methods(), both) {
		t.Fatalf("both due: %+v, want gss,ssl", r)
	}
	r.End()

	z := NewCache(0)
	z.SetSSL(k, AnswerNo)
	if r := z.BeginRefresh(k, both, 1); r != nil {
		t.Fatal("a cache that remembers nothing refreshes")
	}
}

// Many connects deciding at once from an old negative answer start one refresh.
func TestBeginRefreshSingleFlight(t *testing.T) {
	for range 100 {
		c, now := fakeClockCache(time.Minute)
		k := Key{Host: "h", Port: 1}
		c.SetSSL(k, AnswerNo)
		*now = now.Add(30 * time.Second)
		var claims atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range 50 {
			wg.Go(func() {
				<-start
				if r := c.BeginRefresh(k, sslSkipped, 0); r != nil {
					claims.Add(1)
				}
			})
		}
		close(start)
		wg.Wait()
		if n := claims.Load(); n != 1 {
			t.Fatalf("%d refreshes claimed, want 1", n)
		}
	}
}

// The check a connect makes for every plan that skips a method does not allocate when there is
// nothing to refresh.
func TestBeginRefreshNothingToDoDoesNotAllocate(t *testing.T) {
	c := NewCache(DefaultTestTTL)
	k := Key{Host: "db.example", Port: 5432}
	c.SetSSL(k, AnswerNo)
	skipped := []Method{MethodSSL}
	allocs := testing.AllocsPerRun(1000, func() {
		if c.BeginRefresh(k, skipped, 0) != nil {
			t.Fatal("refresh of a young answer")
		}
	})
	if allocs != 0 {
		t.Errorf("BeginRefresh allocates %v times", allocs)
	}
}
