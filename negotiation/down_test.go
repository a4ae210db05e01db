package negotiation

import (
	"context"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// downFixture is a negotiator for hosts on loopback addresses, each a listener the test opens
// and closes (closed: refused) or a black hole (the dial waits for its deadline, as for a host
// whose SYNs are dropped), with a clock the test moves; it records the addresses dialed.
type downFixture struct {
	n     *Negotiator
	trace *stateTrace // hooks with per-connect state, as package tracing's

	mu     sync.Mutex
	now    time.Time
	holes  map[string]bool // "ip:port" that never answer
	dialed []string
}

// newDownFixture returns a fixture for hosts with the given addresses ("ip:port").
func newDownFixture(t *testing.T, connectTimeout time.Duration, addrs ...string) *downFixture {
	t.Helper()
	f := &downFixture{now: time.Unix(1_000_000, 0), holes: map[string]bool{}, trace: newStateTrace()}
	var hosts []Host
	for _, a := range addrs {
		ip, port, _ := net.SplitHostPort(a)
		p, _ := strconv.Atoi(port)
		hosts = append(hosts, Host{Host: ip, Port: uint16(p), SSLMode: SSLModeDisable})
	}
	var d net.Dialer
	var err error
	f.n, err = NewNegotiator(Config{
		Hosts:          hosts,
		GSSEncMode:     GSSEncModeDisable,
		ConnectTimeout: connectTimeout,
		DownTTL:        10 * time.Second,
		Trace:          f.trace.trace(),
		DialFunc: func(ctx context.Context, network, address string) (net.Conn, error) {
			f.mu.Lock()
			hole := f.holes[address]
			f.mu.Unlock()
			if hole {
				<-ctx.Done()
				return nil, &net.OpError{Op: "dial", Net: network, Err: ctx.Err()}
			}
			return d.DialContext(ctx, network, address)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.n.Close() })
	f.n.down.now = func() time.Time {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.now
	}
	return f
}

// listen opens a listener on a loopback address with a free port and returns "ip:port".
func listen(t *testing.T, ip string) (string, net.Listener) {
	t.Helper()
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return ln.Addr().String(), ln
}

// refusing returns "ip:port" where nothing listens.
func refusing(t *testing.T, ip string) string {
	t.Helper()
	a, ln := listen(t, ip)
	ln.Close()
	return a
}

// connect runs one connect whose attempts dial their address; it returns the addresses dialed.
func (f *downFixture) connect(ctx context.Context) ([]string, error) {
	f.mu.Lock()
	f.dialed = nil
	f.mu.Unlock()
	err := dialingConnect(ctx, f.n, "user=u sslmode=disable", func(address string) {
		f.mu.Lock()
		f.dialed = append(f.dialed, address)
		f.mu.Unlock()
	})
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.dialed, err
}

// A first host that refuses, or whose dial times out (connect_timeout), is tried after the
// second one by the next connects, which then dial the second host alone; with every host
// down, each connect tries them all, in the string's order.
func TestDownHostTriedLast(t *testing.T) {
	for _, tt := range []struct {
		name string
		hole bool
	}{{"refused", false}, {"timed out", true}} {
		t.Run(tt.name, func(t *testing.T) {
			up, _ := listen(t, "127.0.0.2")
			dead := refusing(t, "127.0.0.1")
			f := newDownFixture(t, 300*time.Millisecond, dead, up)
			if tt.hole {
				f.holes[dead] = true
			}
			dialed, err := f.connect(context.Background())
			if err != nil || !slices.Equal(dialed, []string{dead, up}) {
				t.Fatalf("first connect: dialed %v, %v; want %v then %v, connected", dialed, err, dead, up)
			}
			for i := range 3 {
				dialed, err := f.connect(context.Background())
				if err != nil || !slices.Equal(dialed, []string{up}) {
					t.Errorf("connect %d after: dialed %v, %v; want %v alone", i+2, dialed, err, up)
				}
			}
		})
	}

	a, b := refusing(t, "127.0.0.1"), refusing(t, "127.0.0.3")
	f := newDownFixture(t, 300*time.Millisecond, a, b)
	for i := range 3 {
		dialed, err := f.connect(context.Background())
		if err == nil || !slices.Equal(dialed, []string{a, b}) {
			t.Errorf("every host down, connect %d: dialed %v, %v; want %v, %v, failed", i+1, dialed, err, a, b)
		}
	}
}

// A host remembered down is dialed again in the background once half the memory's life has
// passed, linked to the connect that put it last and under no connect's context; when it
// answers, it is forgotten and the next connect tries it first again. A memory nobody renews
// ends with its TTL.
func TestDownHostForgottenWhenItAnswers(t *testing.T) {
	first, _ := listen(t, "127.0.0.1")
	second, _ := listen(t, "127.0.0.2")
	f := newDownFixture(t, 300*time.Millisecond, first, second)
	f.holes[first] = true // its SYNs dropped
	if _, err := f.connect(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The first host answers again.
	f.mu.Lock()
	delete(f.holes, first)
	f.mu.Unlock()
	// Before half the TTL: still last, no background dial.
	f.mu.Lock()
	f.now = f.now.Add(4 * time.Second)
	f.mu.Unlock()
	if dialed, _ := f.connect(context.Background()); !slices.Equal(dialed, []string{second}) {
		t.Fatalf("4 s later: dialed %v, want %v alone", dialed, second)
	}
	// After half of it: the connect still goes to the second host, and starts the check.
	f.mu.Lock()
	f.now = f.now.Add(2 * time.Second)
	f.mu.Unlock()
	if dialed, _ := f.connect(context.Background()); !slices.Equal(dialed, []string{second}) {
		t.Fatalf("6 s later: dialed %v, want %v alone", dialed, second)
	}
	if done := f.trace.waitWork(t, BackgroundDownRecheck, 3); done.Err != nil {
		t.Errorf("the background dial of the host that came back: %v", done.Err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for f.n.down.count.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the background dial of the host that came back never forgot it")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if dialed, _ := f.connect(context.Background()); !slices.Equal(dialed, []string{first}) {
		t.Errorf("after it answered: dialed %v, want %v first", dialed, first)
	}

	// A memory that nothing renews ends with its TTL.
	g := newDownFixture(t, 300*time.Millisecond, refusing(t, "127.0.0.1"), second)
	g.connect(context.Background())
	g.mu.Lock()
	g.now = g.now.Add(10 * time.Second)
	g.mu.Unlock()
	if dialed, _ := g.connect(context.Background()); len(dialed) != 2 {
		t.Errorf("after the TTL: dialed %v, want the first host tried first again", dialed)
	}
}

// A dial ended by the caller's deadline (not connect_timeout) teaches nothing about the host.
func TestDownNotLearnedFromTheCallersDeadline(t *testing.T) {
	hole := refusing(t, "127.0.0.1")
	f := newDownFixture(t, 0, hole)
	f.holes[hole] = true
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := f.connect(ctx); err == nil {
		t.Fatal("connected to a black hole")
	}
	if got := f.n.down.count.Load(); got != 0 {
		t.Errorf("%d addresses remembered down after the caller's deadline, want 0", got)
	}
}
