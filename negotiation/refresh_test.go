package negotiation

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgconnector/pgconnector/internal/harness"
)

// refreshServer is a loopback server without TLS that answers a StartupMessage as a trusting
// server does and treats SSLRequest as its mode says: "N", "stall" (no answer, ever) or "reset".
type refreshServer struct {
	ln   net.Listener
	mode string
	ssl  chan struct{} // an SSLRequest arrived
	wg   sync.WaitGroup
	mu   sync.Mutex
	open map[net.Conn]bool
}

func startRefreshServer(t *testing.T, mode string) *refreshServer {
	t.Helper()
	ln, err := harness.Listen()
	if err != nil {
		t.Fatal(err)
	}
	s := &refreshServer{ln: ln, mode: mode, ssl: make(chan struct{}, 16), open: map[net.Conn]bool{}}
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.open[c] = true
			s.mu.Unlock()
			s.wg.Go(func() { s.serve(c) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		s.mu.Lock()
		for c := range s.open {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *refreshServer) port() uint16 { return uint16(s.ln.Addr().(*net.TCPAddr).Port) }

// openConns is how many connections the server has that the client has not closed.
func (s *refreshServer) openConns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.open)
}

func (s *refreshServer) serve(c net.Conn) {
	defer func() {
		c.Close()
		s.mu.Lock()
		delete(s.open, c)
		s.mu.Unlock()
	}()
	var hdr [8]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return
	}
	if binary.BigEndian.Uint32(hdr[:4]) == 8 && binary.BigEndian.Uint32(hdr[4:]) == 80877103 {
		s.ssl <- struct{}{}
		switch s.mode {
		case "N":
			c.Write([]byte("N"))
		case "reset":
			c.(*net.TCPConn).SetLinger(0)
			return
		}
		io.Copy(io.Discard, c) // stall, or after 'N' until the client hangs up
		return
	}
	rest := make([]byte, binary.BigEndian.Uint32(hdr[:4])-8)
	if _, err := io.ReadFull(c, rest); err != nil {
		return
	}
	c.Write(startupReply())
	io.Copy(io.Discard, c) // until Terminate and the close
}

type pgconnCloser struct{ c *pgconn.PgConn }

func (p pgconnCloser) Close() error { return p.c.Close(context.Background()) }

// refreshNegotiator is a negotiator for s with sslmode=prefer, a cache with TTL 2 s (refresh age
// 1 s) on a clock the test moves, 'N' remembered and a refresh age old, and hooks that keep
// per-connect state (stateTrace), check that the refresh takes none of it and report its end.
func refreshNegotiator(t *testing.T, s *refreshServer, connectTimeout time.Duration) (*Negotiator, *Cache, Key, chan RefreshDoneInfo) {
	t.Helper()
	var mu sync.Mutex
	now := time.Now()
	cache := NewCache(2 * time.Second)
	cache.now = func() time.Time { // a clock that moves, if only by a microsecond a reading
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(time.Microsecond)
		return now
	}
	key := Key{Host: "127.0.0.1", Port: s.port()}
	cache.SetSSL(key, AnswerNo)
	mu.Lock()
	now = now.Add(time.Second)
	mu.Unlock()

	base, err := pgconn.ParseConfig("host=127.0.0.1 user=u dbname=d sslmode=prefer")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan RefreshDoneInfo, 4)
	tr := newStateTrace().trace() // hooks with per-connect state, as package tracing's
	checkRefresh(t, tr)
	tr.RefreshDone = func(_ context.Context, info RefreshDoneInfo) { done <- info }
	var n *Negotiator
	n, err = NewNegotiator(Config{
		Hosts:          []Host{{Host: "127.0.0.1", Port: s.port(), SSLMode: SSLModePrefer, TLSConfig: &tls.Config{InsecureSkipVerify: true}}},
		GSSEncMode:     GSSEncModeDisable,
		Cache:          cache,
		ConnectTimeout: connectTimeout,
		Trace:          tr,
		Open: func(ctx context.Context) (io.Closer, error) {
			cfg := base.Copy()
			if err := n.Configure(ctx, cfg); err != nil {
				return nil, err
			}
			conn, err := pgconn.ConnectConfig(ctx, cfg)
			if err != nil {
				return nil, err
			}
			return pgconnCloser{conn}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n, cache, key, done
}

// refreshGoroutines is how many goroutines run a refresh (a frame of refresh.go in their stack).
func refreshGoroutines() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "negotiation.(*Negotiator).refresh") {
			n++
		}
	}
	return n
}

// A connect whose plan skips SSL because of an old 'N' goes on at once in plaintext while a
// refresh asks the stalled server again; Close cancels the refresh, waits for it, and leaves
// neither its goroutine nor its socket; the remembered 'N' is as it was.
func TestRefreshDoesNotHoldTheConnectAndEndsWithClose(t *testing.T) {
	s := startRefreshServer(t, "stall")
	n, cache, key, done := refreshNegotiator(t, s, 0)
	base, _ := pgconn.ParseConfig("host=127.0.0.1 user=u dbname=d sslmode=prefer")
	_, learned := cache.Remembered(key, MethodSSL)

	if err := n.Connect(context.Background(), pgxOpen(n, base)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.ssl: // the refresh asks
	case <-time.After(10 * time.Second):
		t.Fatal("no refresh asked the server")
	}
	select {
	case info := <-done:
		t.Fatalf("the refresh ended against a stalled server: %+v", info)
	default:
	}
	// A second connect meanwhile: no second refresh.
	if err := n.Connect(context.Background(), pgxOpen(n, base)); err != nil {
		t.Fatal(err)
	}
	n.Close()
	select {
	case info := <-done:
		if info.Outcome != RefreshCanceled || info.Method != MethodSSL || info.Attempts != 1 {
			t.Errorf("refresh ended with %+v, want canceled after one socket", info)
		}
	default:
		t.Fatal("Close returned before the refresh ended")
	}
	if g := refreshGoroutines(); g != 0 {
		t.Errorf("%d refresh goroutines after Close", g)
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.openConns() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if c := s.openConns(); c != 0 {
		t.Errorf("%d connections still open after Close", c)
	}
	if a, l := cache.Remembered(key, MethodSSL); a != AnswerNo || !l.Equal(learned) {
		t.Errorf("after a canceled refresh: %v learned at %v, want no at %v", a, l, learned)
	}
	select {
	case <-s.ssl:
		t.Error("more than one refresh asked")
	default:
	}
	// After Close connects still work, without refreshes.
	if err := n.Connect(context.Background(), pgxOpen(n, base)); err != nil {
		t.Fatal(err)
	}
}

// A refresh that times out (connect_timeout) or is reset learns nothing: the remembered 'N'
// keeps its age; one that gets 'N' again remembers it anew.
func TestRefreshOutcomes(t *testing.T) {
	for _, tt := range []struct {
		mode    string
		outcome RefreshOutcome
	}{
		{"stall", RefreshInconclusive},
		{"reset", RefreshInconclusive},
		{"N", RefreshConfirmed},
	} {
		t.Run(tt.mode, func(t *testing.T) {
			s := startRefreshServer(t, tt.mode)
			n, cache, key, done := refreshNegotiator(t, s, 300*time.Millisecond)
			base, _ := pgconn.ParseConfig("host=127.0.0.1 user=u dbname=d sslmode=prefer")
			_, learned := cache.Remembered(key, MethodSSL)
			if err := n.Connect(context.Background(), pgxOpen(n, base)); err != nil {
				t.Fatal(err)
			}
			var info RefreshDoneInfo
			select {
			case info = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("the refresh did not end")
			}
			if info.Outcome != tt.outcome {
				t.Errorf("outcome %v (%v), want %v", info.Outcome, info.Err, tt.outcome)
			}
			a, l := cache.Remembered(key, MethodSSL)
			switch {
			case a != AnswerNo:
				t.Errorf("after the refresh the cache says %v, want no", a)
			case tt.outcome == RefreshInconclusive && !l.Equal(learned):
				t.Errorf("an inconclusive refresh moved the answer's time from %v to %v", learned, l)
			case tt.outcome == RefreshConfirmed && !l.After(learned):
				t.Errorf("a confirmed answer was not learned again (%v, before %v)", l, learned)
			}
			if tt.outcome == RefreshInconclusive && info.Err == nil {
				t.Error("an inconclusive refresh without its error")
			}
		})
	}
}

// The decision of a connect whose plan skips a method because of a remembered answer too young
// to refresh allocates nothing for the refresh check.
func TestDecisionWithYoungNegativeAnswerDoesNotAllocate(t *testing.T) {
	cache := NewCache(DefaultTestTTL)
	key := Key{Host: "db.example", Port: 5432}
	cache.SetSSL(key, AnswerNo)
	n, err := NewNegotiator(Config{
		Hosts:      []Host{{Host: "db.example", Port: 5432, SSLMode: SSLModePrefer}},
		GSSEncMode: GSSEncModeDisable,
		Cache:      cache,
		Open:       func(context.Context) (io.Closer, error) { t.Fatal("a refresh opened a connection"); return nil, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	h := &n.cfg.Hosts[0]
	b := n.newBudget()
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		plan, _, _, err := n.decide(ctx, &b, h, key, GSSCredentials{}, false)
		if err != nil || len(plan.Skipped()) != 1 {
			t.Fatal("not a plan that skips SSL")
		}
	})
	if allocs != 0 {
		t.Errorf("the decision allocates %v times", allocs)
	}
}
