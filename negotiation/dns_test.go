package negotiation

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// dnsFixture is a negotiator for the host name "db.example" with a resolver the test controls,
// a clock the test moves, and connects that dial the address chosen: 127.0.0.2 accepts (a
// listener on a port of its own), 127.0.0.1 on that port refuses.
type dnsFixture struct {
	n       *Negotiator
	trace   *stateTrace // hooks with per-connect state, as package tracing's
	lookups atomic.Int32
	dialed  chan string // each address dialed, in order (buffered)

	mu      sync.Mutex
	answer  []string
	lookErr error
	block   chan struct{} // when set, lookups wait for it to close
	now     time.Time
}

func newDNSFixture(t *testing.T, ttl time.Duration) *dnsFixture {
	t.Helper()
	_, ln := listen(t, "127.0.0.2")
	port := ln.Addr().(*net.TCPAddr).Port
	f := &dnsFixture{answer: []string{"127.0.0.2"}, now: time.Unix(1_000_000, 0), dialed: make(chan string, 100), trace: newStateTrace()}
	var err error
	f.n, err = NewNegotiator(Config{
		Hosts:          []Host{{Host: "db.example", Port: uint16(port), SSLMode: SSLModeDisable}},
		GSSEncMode:     GSSEncModeDisable,
		ConnectTimeout: 2 * time.Second,
		DNSTTL:         ttl,
		Trace:          f.trace.trace(),
		LookupFunc: func(ctx context.Context, host string) ([]string, error) {
			f.lookups.Add(1)
			f.mu.Lock()
			answer, lookErr, block := f.answer, f.lookErr, f.block
			f.mu.Unlock()
			if block != nil {
				select {
				case <-block:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			return answer, lookErr
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.n.Close() })
	if f.n.dns != nil {
		f.n.dns.now = func() time.Time {
			f.mu.Lock()
			defer f.mu.Unlock()
			return f.now
		}
	}
	return f
}

func (f *dnsFixture) set(fn func(f *dnsFixture)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// connect runs one connect whose attempts dial the address they were given.
func (f *dnsFixture) connect(ctx context.Context) error {
	return dialingConnect(ctx, f.n, "host=db.example user=u sslmode=disable", func(address string) {
		ip, _, _ := net.SplitHostPort(address)
		f.dialed <- ip
	})
}

func (f *dnsFixture) mustConnect(t *testing.T) {
	t.Helper()
	if err := f.connect(context.Background()); err != nil {
		t.Fatalf("connect: %v", err)
	}
}

// Within the TTL connects share one lookup; after it, the next connect looks up again. With a
// TTL of zero every connect looks up, as libpq does.
func TestDNSRememberedWithinTTL(t *testing.T) {
	f := newDNSFixture(t, 15*time.Second)
	for range 3 {
		f.mustConnect(t)
	}
	if got := f.lookups.Load(); got != 1 {
		t.Errorf("3 connects within the TTL: %d lookups, want 1", got)
	}
	f.set(func(f *dnsFixture) { f.now = f.now.Add(15 * time.Second) })
	f.mustConnect(t)
	if got := f.lookups.Load(); got != 2 {
		t.Errorf("a connect after the TTL: %d lookups in all, want 2", got)
	}

	libpq := newDNSFixture(t, 0)
	for range 3 {
		libpq.mustConnect(t)
	}
	if got := libpq.lookups.Load(); got != 3 {
		t.Errorf("TTL 0: 3 connects made %d lookups, want 3", got)
	}
}

// In the last fifth of an answer's life, a connect goes on with it while the name is looked up
// again in the background (here the resolver hangs until released: the connect must not wait
// for it), and the next connects use the new answer. The lookup is linked to the connect that
// started it and runs under no connect's context.
func TestDNSRefreshedInTheBackground(t *testing.T) {
	f := newDNSFixture(t, 15*time.Second)
	f.mustConnect(t)
	release := make(chan struct{})
	f.set(func(f *dnsFixture) {
		f.now = f.now.Add(13 * time.Second)
		f.block = release
		f.answer = []string{"127.0.0.2", "127.0.0.3"}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := f.connect(ctx); err != nil {
		t.Fatalf("a connect in the answer's last fifth, the resolver hanging: %v", err)
	}
	close(release)
	f.trace.waitWork(t, BackgroundDNSLookup, 2)
	deadline := time.Now().Add(5 * time.Second)
	for {
		f.n.dns.mu.Lock()
		e := f.n.dns.m["db.example"]
		refreshed := !e.refreshing && len(e.addrs) == 2
		f.n.dns.mu.Unlock()
		if refreshed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the background lookup's answer never replaced the remembered one")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := f.lookups.Load(); got != 2 {
		t.Errorf("%d lookups, want 2 (the first connect's, the background one)", got)
	}
	// The new answer is young: 14 s after the first lookup, no lookup.
	f.set(func(f *dnsFixture) { f.now = f.now.Add(time.Second) })
	f.mustConnect(t)
	if got := f.lookups.Load(); got != 2 {
		t.Errorf("after the refresh: %d lookups, want still 2", got)
	}
}

// Connects that find the name unknown at the same moment wait for one lookup.
func TestDNSOneLookupForAHerd(t *testing.T) {
	f := newDNSFixture(t, 15*time.Second)
	release := make(chan struct{})
	f.set(func(f *dnsFixture) { f.block = release })
	const herd = 16
	errs := make(chan error, herd)
	for range herd {
		go func() { errs <- f.connect(context.Background()) }()
	}
	// Let the herd reach the lookup (those that are later find the answer remembered).
	time.Sleep(100 * time.Millisecond)
	close(release)
	for range herd {
		if err := <-errs; err != nil {
			t.Errorf("connect: %v", err)
		}
	}
	if got := f.lookups.Load(); got != 1 {
		t.Errorf("%d connects at once: %d lookups, want 1", herd, got)
	}
}

// When every remembered address fails before a server answers, the connect asks again at once
// and tries the new addresses, and the next connects use the new answer.
func TestDNSResolvedAgainWhenEveryAddressFails(t *testing.T) {
	f := newDNSFixture(t, 15*time.Second)
	f.set(func(f *dnsFixture) { f.answer = []string{"127.0.0.1"} }) // refuses
	if err := f.connect(context.Background()); err == nil {
		t.Fatal("connected to an address that refuses")
	}
	if got := f.lookups.Load(); got != 1 {
		t.Fatalf("a fresh answer whose address refuses: %d lookups, want 1 (it was just asked)", got)
	}
	f.set(func(f *dnsFixture) { f.answer = []string{"127.0.0.1", "127.0.0.2"} }) // the name moved
	drain(f.dialed)
	f.mustConnect(t)
	if got := f.lookups.Load(); got != 2 {
		t.Errorf("every remembered address refused: %d lookups, want 2", got)
	}
	if got := drain(f.dialed); len(got) != 2 || got[0] != "127.0.0.1" || got[1] != "127.0.0.2" {
		t.Errorf("dialed %v, want the remembered 127.0.0.1, then only the new 127.0.0.2", got)
	}
	f.mustConnect(t)
	if got := f.lookups.Load(); got != 2 {
		t.Errorf("the next connect: %d lookups, want still 2 (the new answer remembered)", got)
	}
}

// A failed lookup is not remembered: the next connect asks again.
func TestDNSFailureNotRemembered(t *testing.T) {
	f := newDNSFixture(t, 15*time.Second)
	f.set(func(f *dnsFixture) { f.lookErr = errors.New("no such host") })
	for range 2 {
		if err := f.connect(context.Background()); err == nil {
			t.Fatal("connected without an address")
		}
	}
	if got := f.lookups.Load(); got != 2 {
		t.Errorf("2 connects after failed lookups: %d lookups, want 2", got)
	}
	f.set(func(f *dnsFixture) { f.lookErr = nil })
	f.mustConnect(t)
	f.mustConnect(t)
	if got := f.lookups.Load(); got != 3 {
		t.Errorf("then 2 connects: %d lookups in all, want 3", got)
	}
}

func drain(c chan string) []string {
	var got []string
	for {
		select {
		case s := <-c:
			got = append(got, s)
		default:
			return got
		}
	}
}
