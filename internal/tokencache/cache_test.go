package tokencache

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// clock is a test clock that moves only when told.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// counting returns a fetch that counts its calls and returns "s<n>" valid for life (0: until
// refused).
func counting(clk *clock, life time.Duration, calls *atomic.Int32) Fetch {
	return func(context.Context) (Secret, error) {
		n := calls.Add(1)
		s := Secret{Value: fmt.Sprintf("s%d", n)}
		if life != 0 {
			s.Expiry = clk.Now().Add(life)
		}
		return s, nil
	}
}

// waiters is the number of Gets waiting for key's fetch.
func (c *Cache) waiters(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if fl := c.flights[key]; fl != nil {
		return fl.waiters
	}
	return 0
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestHerdFetchesOnce(t *testing.T) {
	c := New(Config{})
	release := make(chan struct{})
	var calls atomic.Int32
	fetch := func(ctx context.Context) (Secret, error) {
		calls.Add(1)
		<-release
		return Secret{Value: "tok", Expiry: time.Now().Add(time.Hour)}, nil
	}
	const herd = 8
	var wg sync.WaitGroup
	results := make(chan string, herd)
	for range herd {
		wg.Go(func() {
			s, cached, err := c.Get(context.Background(), "k", fetch, nil)
			if err != nil || cached {
				t.Errorf("Get = %v, cached %v", err, cached)
			}
			results <- s.Value
		})
	}
	waitFor(t, "8 waiters", func() bool { return c.waiters("k") == herd })
	close(release)
	wg.Wait()
	close(results)
	for v := range results {
		if v != "tok" {
			t.Errorf("secret %q", v)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d fetches for a herd of %d, want 1", n, herd)
	}
	if _, cached, _ := c.Get(context.Background(), "k", fetch, nil); !cached {
		t.Fatal("the herd's secret was not kept")
	}
}

func TestExpiryAndMargin(t *testing.T) {
	clk := newClock()
	c := New(Config{Now: clk.Now})
	var calls atomic.Int32
	fetch := counting(clk, time.Minute, &calls)
	ctx := context.Background()
	if s, cached, err := c.Get(ctx, "k", fetch, nil); err != nil || cached || s.Value != "s1" {
		t.Fatalf("first Get = %q, %v, %v", s.Value, cached, err)
	}
	clk.Add(time.Minute - Margin - time.Nanosecond)
	if s, cached, _ := c.Get(ctx, "k", fetch, nil); !cached || s.Value != "s1" {
		t.Fatalf("just before the margin: %q cached %v, want s1 from the cache", s.Value, cached)
	}
	clk.Add(time.Nanosecond)
	if s, cached, _ := c.Get(ctx, "k", fetch, nil); cached || s.Value != "s2" {
		t.Fatalf("within the margin: %q cached %v, want a fetch", s.Value, cached)
	}

	// A secret that lives less than the margin serves its own connect, and is not kept.
	var short atomic.Int32
	shortFetch := counting(clk, Margin-time.Second, &short)
	for i := range 2 {
		s, cached, err := c.Get(ctx, "short", shortFetch, nil)
		if err != nil || cached || s.Value != fmt.Sprintf("s%d", i+1) {
			t.Fatalf("short-lived Get %d = %q, %v, %v", i, s.Value, cached, err)
		}
	}

	// Zero expiry: valid until dropped.
	var forever atomic.Int32
	ff := counting(clk, 0, &forever)
	c.Get(ctx, "forever", ff, nil)
	clk.Add(1000 * time.Hour)
	if _, cached, _ := c.Get(ctx, "forever", ff, nil); !cached {
		t.Fatal("a secret without expiry was not kept")
	}
}

func TestFetchErrorNotKept(t *testing.T) {
	c := New(Config{})
	boom := errors.New("boom")
	_, _, err := c.Get(context.Background(), "k", func(context.Context) (Secret, error) { return Secret{}, boom }, nil)
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
	if c.Len() != 0 {
		t.Fatal("a failed fetch was kept")
	}
}

// background runs do on a goroutine of its own, counting the calls.
type background struct {
	calls atomic.Int32
	wg    sync.WaitGroup
	errs  chan error
}

func (b *background) run(do func(context.Context) error) bool {
	b.calls.Add(1)
	b.wg.Go(func() { b.errs <- do(context.Background()) })
	return true
}

func TestRefreshAhead(t *testing.T) {
	clk := newClock()
	c := New(Config{Now: clk.Now})
	ctx := context.Background()
	life := 100*time.Second + Margin // 100 s of use: the last fifth starts at 80 s
	var calls atomic.Int32
	release := make(chan struct{})
	fetch := func(ctx context.Context) (Secret, error) {
		n := calls.Add(1)
		if Refreshing(ctx) != (n > 1) { // the first fetch is a Get's, the second a refresh
			t.Errorf("fetch %d: Refreshing %v", n, Refreshing(ctx))
		}
		if n > 1 {
			<-release
		}
		return Secret{Value: fmt.Sprintf("s%d", n), Expiry: clk.Now().Add(life)}, nil
	}
	bg := &background{errs: make(chan error, 10)}
	c.Get(ctx, "k", fetch, bg.run)
	clk.Add(79 * time.Second)
	c.Get(ctx, "k", fetch, bg.run)
	if bg.calls.Load() != 0 {
		t.Fatal("a refresh before the last fifth")
	}
	clk.Add(2 * time.Second)
	for range 5 { // the refresh blocks: the Gets do not wait for it, and start no second one
		s, cached, err := c.Get(ctx, "k", fetch, bg.run)
		if err != nil || !cached || s.Value != "s1" {
			t.Fatalf("Get during the refresh = %q, %v, %v", s.Value, cached, err)
		}
	}
	if n := bg.calls.Load(); n != 1 {
		t.Fatalf("%d refreshes started, want 1", n)
	}
	close(release)
	if err := <-bg.errs; err != nil {
		t.Fatal(err)
	}
	if s, cached, _ := c.Get(ctx, "k", fetch, bg.run); !cached || s.Value != "s2" {
		t.Fatalf("after the refresh: %q cached %v, want s2", s.Value, cached)
	}
}

func TestFailedRefreshKeepsSecret(t *testing.T) {
	clk := newClock()
	c := New(Config{Now: clk.Now})
	ctx := context.Background()
	var calls atomic.Int32
	fetch := func(ctx context.Context) (Secret, error) {
		if calls.Add(1) > 1 {
			return Secret{}, errors.New("issuer down")
		}
		return Secret{Value: "s1", Expiry: clk.Now().Add(100*time.Second + Margin)}, nil
	}
	bg := &background{errs: make(chan error, 10)}
	c.Get(ctx, "k", fetch, bg.run)
	clk.Add(90 * time.Second)
	c.Get(ctx, "k", fetch, bg.run)
	if err := <-bg.errs; err == nil {
		t.Fatal("the refresh did not fail")
	}
	// 10 s left: the next refresh waits 5 s.
	if s, cached, _ := c.Get(ctx, "k", fetch, bg.run); !cached || s.Value != "s1" {
		t.Fatalf("after a failed refresh: %q cached %v", s.Value, cached)
	}
	if n := bg.calls.Load(); n != 1 {
		t.Fatalf("%d refreshes, want 1 before the retry wait", n)
	}
	clk.Add(5 * time.Second)
	c.Get(ctx, "k", fetch, bg.run)
	<-bg.errs
	if n := bg.calls.Load(); n != 2 {
		t.Fatalf("%d refreshes, want 2 after the retry wait", n)
	}
	clk.Add(5 * time.Second) // the margin: expired
	if _, _, err := c.Get(ctx, "k", fetch, bg.run); err == nil {
		t.Fatal("an expired secret was served")
	}
}

func TestDrop(t *testing.T) {
	c := New(Config{})
	ctx := context.Background()
	clk := newClock()
	var calls atomic.Int32
	fetch := counting(clk, 0, &calls)
	c.Get(ctx, "k", fetch, nil)
	c.Drop("k", "other")
	if s, cached, _ := c.Get(ctx, "k", fetch, nil); !cached || s.Value != "s1" {
		t.Fatal("Drop of another secret dropped the kept one")
	}
	c.Drop("k", "s1")
	if s, cached, _ := c.Get(ctx, "k", fetch, nil); cached || s.Value != "s2" {
		t.Fatalf("after Drop: %q cached %v, want a fetch", s.Value, cached)
	}
}

func TestCanceledWaitersStopFetch(t *testing.T) {
	c := New(Config{})
	stopped := make(chan error, 1)
	var calls atomic.Int32
	fetch := func(ctx context.Context) (Secret, error) {
		if calls.Add(1) == 1 {
			<-ctx.Done()
			stopped <- ctx.Err()
			return Secret{}, ctx.Err()
		}
		return Secret{Value: "fresh"}, nil
	}
	const n = 3
	cancels := make([]context.CancelFunc, n)
	errs := make(chan error, n)
	for i := range n {
		ctx, cancel := context.WithCancel(context.WithValue(context.Background(), struct{}{}, i))
		cancels[i] = cancel
		go func() {
			_, _, err := c.Get(ctx, "k", fetch, nil)
			errs <- err
		}()
	}
	waitFor(t, "3 waiters", func() bool { return c.waiters("k") == n })
	for i, cancel := range cancels[:n-1] {
		cancel()
		if err := <-errs; !errors.Is(err, context.Canceled) {
			t.Fatalf("waiter %d: %v", i, err)
		}
	}
	select {
	case <-stopped:
		t.Fatal("the fetch stopped while a waiter was left")
	case <-time.After(50 * time.Millisecond):
	}
	cancels[n-1]()
	<-errs
	select {
	case err := <-stopped:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("fetch context: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the fetch went on with no waiter left")
	}
	// A later Get starts a fetch of its own.
	if s, _, err := c.Get(context.Background(), "k", fetch, nil); err != nil || s.Value != "fresh" {
		t.Fatalf("Get after the canceled fetch = %q, %v", s.Value, err)
	}
}

func TestBound(t *testing.T) {
	clk := newClock()
	c := New(Config{MaxKeys: 3, Now: clk.Now})
	ctx := context.Background()
	put := func(key string, life time.Duration) {
		t.Helper()
		_, _, err := c.Get(ctx, key, func(context.Context) (Secret, error) {
			s := Secret{Value: key}
			if life != 0 {
				s.Expiry = clk.Now().Add(life)
			}
			return s, nil
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
	}
	has := func(key string) bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		_, ok := c.entries[key]
		return ok
	}
	put("short", time.Minute)
	put("long", time.Hour)
	put("forever", 0)
	clk.Add(time.Minute) // "short" expired
	put("new", 2*time.Hour)
	if has("short") || !has("long") || !has("forever") || !has("new") || c.Len() != 3 {
		t.Fatalf("after a key past the bound with one expired: %d kept", c.Len())
	}
	put("newer", 3*time.Hour) // none expired: the one that expires first goes
	if has("long") || !has("forever") || !has("new") || !has("newer") || c.Len() != 3 {
		t.Fatalf("after a key past the bound: %d kept", c.Len())
	}
}
