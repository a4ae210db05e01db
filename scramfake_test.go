package pgconnector_test

import (
	"context"
	"crypto/pbkdf2"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
	xscram "github.com/xdg-go/scram"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/scram"
	"github.com/pgconnector/pgconnector/negotiation"
)

// fakeSCRAM is a PostgreSQL server that speaks just enough of the protocol for a SCRAM-SHA-256
// exchange (protocol-flow.html, "SASL Authentication"), with xdg-go/scram's server side, and can
// lie. It answers 'N' to SSLRequest and GSSENCRequest, offers SCRAM-SHA-256 to each
// StartupMessage, and after a successful exchange sends AuthenticationOk, the usual
// ParameterStatus messages, BackendKeyData and ReadyForQuery, then waits for the client to leave.
type fakeSCRAM struct {
	// creds is the stored credentials (salt, iteration count, StoredKey, ServerKey) the server
	// uses for the i-th StartupMessage it receives, from 0.
	creds func(i int) xscram.StoredCredentials
	// lie, if not zero, replaces the exchange after SASLInitialResponse.
	lie fakeLie
	// iters is the iteration count of lieIterations.
	iters int

	ln       net.Listener
	startups atomic.Int64
	wg       sync.WaitGroup

	mu       sync.Mutex
	conns    map[net.Conn]bool
	problems []string    // the client's deviations from the protocol
	after    chan string // for each lie told: what the client sent after it, until it closed
}

type fakeLie int

const (
	lieNone fakeLie = iota
	// lieIterations sends a server-first-message with the iteration count iters, then waits for
	// the client to hang up.
	lieIterations
	// lieSkipExchange sends AuthenticationOk (and ReadyForQuery) right after
	// SASLInitialResponse.
	lieSkipExchange
	// lieFreshSalts sends a server-first-message with a salt of its own for each exchange and
	// the iteration count iters, then hangs up when the client answers or hangs up; it records
	// nothing (f.after stays empty), so it can serve any number of connects.
	lieFreshSalts
)

// listenLow listens on a free port of 127.0.0.1 below 32768 (the project's rule for test servers:
// the kernel hands out client ports from 32768 up).
func listenLow(t *testing.T) net.Listener {
	t.Helper()
	var err error
	for range 100 {
		var ln net.Listener
		if ln, err = net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", 20000+rand.IntN(12768))); err == nil {
			return ln
		}
	}
	t.Fatalf("no free port below 32768: %v", err)
	return nil
}

// startFakeSCRAM starts f; it stops at the end of the test, and the test fails if a client broke
// the protocol.
func startFakeSCRAM(t *testing.T, f *fakeSCRAM) *fakeSCRAM {
	t.Helper()
	f.ln = listenLow(t)
	f.conns = map[net.Conn]bool{}
	f.after = make(chan string, 64)
	f.wg.Go(func() {
		for {
			c, err := f.ln.Accept()
			if err != nil {
				return
			}
			f.mu.Lock()
			f.conns[c] = true
			f.mu.Unlock()
			f.wg.Go(func() {
				defer func() {
					f.mu.Lock()
					delete(f.conns, c)
					f.mu.Unlock()
					c.Close()
				}()
				f.serve(c)
			})
		}
	})
	t.Cleanup(func() {
		f.ln.Close()
		f.mu.Lock()
		for c := range f.conns {
			c.Close()
		}
		f.mu.Unlock()
		f.wg.Wait()
		for _, p := range f.problems {
			t.Errorf("fake server: %s", p)
		}
	})
	return f
}

// dsn is a connection string for f with password and the extra items.
func (f *fakeSCRAM) dsn(password string, extra ...string) string {
	port := f.ln.Addr().(*net.TCPAddr).Port
	return strings.Join(append([]string{fmt.Sprintf("host=127.0.0.1 port=%d user=u password=%s dbname=fake sslmode=disable gssencmode=disable", port, password)}, extra...), " ")
}

func (f *fakeSCRAM) problem(format string, args ...any) {
	f.mu.Lock()
	f.problems = append(f.problems, fmt.Sprintf(format, args...))
	f.mu.Unlock()
}

// wantNothingAfterLie checks that one lie was told, after which the client sent nothing but
// perhaps a Terminate (pgx's asyncClose races with its close of the socket), and closed the
// connection.
func (f *fakeSCRAM) wantNothingAfterLie(t *testing.T) {
	t.Helper()
	select {
	case rest := <-f.after:
		if rest != "" && rest != "X\x00\x00\x00\x04" {
			t.Errorf("after the lie, the client sent %q; want nothing, or a Terminate", rest)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the client did not close the connection after the lie")
	}
	select {
	case rest := <-f.after:
		t.Errorf("a second lie told (the client then sent %q): the client connected again", rest)
	default:
	}
}

func (f *fakeSCRAM) serve(c net.Conn) {
	c.SetDeadline(time.Now().Add(time.Minute))
	be := pgproto3.NewBackend(c, c)
startup:
	for {
		m, err := be.ReceiveStartupMessage()
		if err != nil {
			return
		}
		switch m.(type) {
		case *pgproto3.SSLRequest, *pgproto3.GSSEncRequest:
			if _, err := c.Write([]byte{'N'}); err != nil {
				return
			}
		case *pgproto3.StartupMessage:
			break startup
		default:
			f.problem("%T where a StartupMessage was expected", m)
			return
		}
	}
	i := int(f.startups.Add(1) - 1)
	be.Send(&pgproto3.AuthenticationSASL{AuthMechanisms: []string{"SCRAM-SHA-256"}})
	if be.Flush() != nil {
		return
	}
	be.SetAuthType(pgproto3.AuthTypeSASL)
	m, err := be.Receive()
	if err != nil {
		return
	}
	first, ok := m.(*pgproto3.SASLInitialResponse)
	if !ok || first.AuthMechanism != "SCRAM-SHA-256" {
		f.problem("%T (%+v) where a SASLInitialResponse for SCRAM-SHA-256 was expected", m, m)
		return
	}
	switch f.lie {
	case lieSkipExchange:
		be.Send(&pgproto3.AuthenticationOk{})
		sendReady(be)
		f.lied(c, be)
		return
	case lieIterations:
		cf := string(first.Data)
		nonce := cf[strings.LastIndex(cf, ",r=")+len(",r="):] + "fakeServerNonce"
		salt := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef"))
		be.Send(&pgproto3.AuthenticationSASLContinue{Data: fmt.Appendf(nil, "r=%s,s=%s,i=%d", nonce, salt, f.iters)})
		f.lied(c, be)
		return
	case lieFreshSalts:
		cf := string(first.Data)
		nonce := cf[strings.LastIndex(cf, ",r=")+len(",r="):] + "fakeServerNonce"
		salt := base64.StdEncoding.EncodeToString(fmt.Appendf(nil, "fresh salt %06d", i))
		be.Send(&pgproto3.AuthenticationSASLContinue{Data: fmt.Appendf(nil, "r=%s,s=%s,i=%d", nonce, salt, f.iters)})
		if be.Flush() == nil {
			c.Read(make([]byte, 1))
		}
		return
	}

	creds := f.creds(i)
	srv, err := xscram.SHA256.NewServer(func(string) (xscram.StoredCredentials, error) { return creds, nil })
	if err != nil {
		f.problem("xdg-go/scram server: %v", err)
		return
	}
	conv := srv.NewConversation()
	s1, err := conv.Step(string(first.Data))
	if err != nil {
		f.problem("client-first-message %q refused: %v", first.Data, err)
		return
	}
	be.Send(&pgproto3.AuthenticationSASLContinue{Data: []byte(s1)})
	if be.Flush() != nil {
		return
	}
	be.SetAuthType(pgproto3.AuthTypeSASLContinue)
	if m, err = be.Receive(); err != nil {
		return
	}
	final, ok := m.(*pgproto3.SASLResponse)
	if !ok {
		f.problem("%T where a SASLResponse was expected", m)
		return
	}
	s2, err := conv.Step(string(final.Data))
	if err != nil { // a wrong password: what PostgreSQL answers (auth.c, auth_failed)
		be.Send(&pgproto3.ErrorResponse{Severity: "FATAL", Code: "28P01", Message: `password authentication failed for user "u"`})
		be.Flush()
		return
	}
	be.Send(&pgproto3.AuthenticationSASLFinal{Data: []byte(s2)})
	be.Send(&pgproto3.AuthenticationOk{})
	sendReady(be)
	if be.Flush() != nil {
		return
	}
	for {
		if _, err := be.Receive(); err != nil {
			return
		}
	}
}

// sendReady queues what a server sends after AuthenticationOk.
func sendReady(be *pgproto3.Backend) {
	for _, p := range [][2]string{
		{"server_version", "15.0"}, {"client_encoding", "UTF8"}, {"standard_conforming_strings", "on"},
		{"DateStyle", "ISO, MDY"}, {"integer_datetimes", "on"},
	} {
		be.Send(&pgproto3.ParameterStatus{Name: p[0], Value: p[1]})
	}
	be.Send(&pgproto3.BackendKeyData{ProcessID: 1, SecretKey: []byte{0, 0, 0, 1}})
	be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
}

// lied sends what is queued and records what the client sends afterwards, until it closes.
func (f *fakeSCRAM) lied(c net.Conn, be *pgproto3.Backend) {
	if be.Flush() != nil {
		return
	}
	rest, _ := io.ReadAll(c)
	f.after <- string(rest)
}

// storedCreds is what a server stores for password (pg_authid's SCRAM secret).
func storedCreds(t *testing.T, password, salt string, iters int) xscram.StoredCredentials {
	t.Helper()
	c, err := xscram.SHA256.NewClient("", password, "")
	if err != nil {
		t.Fatal(err)
	}
	creds, err := c.GetStoredCredentialsWithError(xscram.KeyFactors{Salt: salt, Iters: iters})
	if err != nil {
		t.Fatal(err)
	}
	return creds
}

// slowIterations is an iteration count whose PBKDF2 takes about d here (race detector or not),
// measured now, and at most 9,000,000: below the connector's cap of 10,000,000.
func slowIterations(t *testing.T, d time.Duration) int {
	t.Helper()
	const probe = 100_000
	start := time.Now()
	if _, err := pbkdf2.Key(sha256.New, "calibration", []byte("0123456789abcdef"), probe, sha256.Size); err != nil {
		t.Fatal(err)
	}
	n := int(float64(probe) * float64(d) / float64(time.Since(start)))
	return min(n, 9_000_000)
}

// Servers that lie in the SCRAM exchange: the connect fails with an error that says what the
// server did wrong, no key that failed is kept, and nothing is derived for a server that
// asks too much.
func TestSCRAMLyingServer(t *testing.T) {
	const pw = "fake-Secret-3b9"
	honest := storedCreds(t, pw, "salt-number-one!", 4096)
	connect := func(t *testing.T, w *authWatch) (time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		start := time.Now()
		dc, err := w.c.Connect(ctx)
		if err == nil {
			dc.Close()
		}
		return time.Since(start), err
	}
	wantAuthError := func(t *testing.T, err error, text string) {
		t.Helper()
		var ae *negotiation.AuthError
		if !errors.As(err, &ae) || !strings.Contains(err.Error(), text) {
			t.Fatalf("error %v: want a negotiation.AuthError saying %q", err, text)
		}
		checkNoSecret(t, err, pw)
	}

	// server-final-message signed with another ServerKey: the server does not know the
	// password. The keys are not kept: the next connect derives them again.
	t.Run("wrong server signature", func(t *testing.T) {
		creds := honest
		creds.ServerKey = storedCreds(t, "another password", "salt-number-one!", 4096).ServerKey
		f := startFakeSCRAM(t, &fakeSCRAM{creds: func(int) xscram.StoredCredentials { return creds }})
		w := newAuthWatch(t, f.dsn(pw))
		for i := range 2 {
			_, err := connect(t, w)
			wantAuthError(t, err, "server signature does not match")
			if !errors.Is(err, scram.ErrServerSignature) {
				t.Errorf("error %v is not scram.ErrServerSignature", err)
			}
			w.wantDerivations(t, int64(i+1))
			if s := w.lastStartup(t); s.cached != "false" || !s.failed {
				t.Errorf("connect %d: startup span %+v", i, s)
			}
		}
	})

	// An iteration count over the cap (10,000,000): refused before any derivation.
	t.Run("iteration count over the limit", func(t *testing.T) {
		f := startFakeSCRAM(t, &fakeSCRAM{lie: lieIterations, iters: 2147483647})
		w := newAuthWatch(t, f.dsn(pw))
		took, err := connect(t, w)
		wantAuthError(t, err, "exceeds the limit of 10000000")
		if !errors.Is(err, scram.ErrServerMessage) {
			t.Errorf("error %v is not scram.ErrServerMessage", err)
		}
		if took > 2*time.Second {
			t.Errorf("the connect took %v: the count was not refused before deriving", took)
		}
		w.wantDerivations(t, 0)
		f.wantNothingAfterLie(t)
	})

	// Half of 16 connects at once get salt S1, the other half S2 (the password set again on
	// the server between them): two derivations, every connect succeeds, and the keys of both
	// salts are kept (the connect after the herd gets S1, the next S2).
	t.Run("salt changes mid-herd", func(t *testing.T) {
		const n = 16
		other := storedCreds(t, pw, "salt-number-two!", 4096)
		f := startFakeSCRAM(t, &fakeSCRAM{creds: func(i int) xscram.StoredCredentials {
			if i < n/2 || i == n {
				return honest
			}
			return other
		}})
		w := newAuthWatch(t, f.dsn(pw))
		if errs := herd(t, n, w.c.Connect); len(errs) > 0 {
			t.Fatalf("%d of %d connects failed, the first: %v", len(errs), n, errs[0])
		}
		if got := f.startups.Load(); got != n {
			t.Errorf("%d StartupMessages, want %d", got, n)
		}
		w.wantDerivations(t, 2)
		for range 2 {
			if _, err := connect(t, w); err != nil {
				t.Fatal(err)
			}
			if s := w.lastStartup(t); s.cached != "true" {
				t.Errorf("after the herd: startup span %+v, want cached keys", s)
			}
		}
		w.wantDerivations(t, 2)
	})

	// AuthenticationOk right after SASLInitialResponse: the server skipped the proof that it
	// knows the password. The client sends nothing more.
	t.Run("AuthenticationOk before the exchange ends", func(t *testing.T) {
		f := startFakeSCRAM(t, &fakeSCRAM{lie: lieSkipExchange})
		w := newAuthWatch(t, f.dsn(pw))
		_, err := connect(t, w)
		wantAuthError(t, err, "before completing the SCRAM exchange")
		w.wantDerivations(t, 0)
		f.wantNothingAfterLie(t)
	})

	// An iteration count under the cap whose derivation outlasts connect_timeout: the connect
	// ends at the deadline, and the derivation, which no connect waits for any more, is stopped
	// (internal/scram's TestDerivationsBoundedAndStopped counts that): none is counted.
	t.Run("slow derivation under connect_timeout", func(t *testing.T) {
		iters := slowIterations(t, 4*time.Second)
		f := startFakeSCRAM(t, &fakeSCRAM{lie: lieIterations, iters: iters})
		w := newAuthWatch(t, f.dsn(pw, "connect_timeout=1"))
		took, err := connect(t, w)
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "timeout expired (connect_timeout 1s)") {
			t.Fatalf("error %v: want connect_timeout's", err)
		}
		if took < 900*time.Millisecond || took > 2*time.Second {
			t.Errorf("the connect took %v, want about connect_timeout (1s)", took)
		}
		// The connect did not wait for the derivation, and it was not completed.
		w.wantDerivations(t, 0)
	})
}

// A server that answers every exchange with a salt of its own and the largest iteration count
// allowed (10,000,000) costs the client a derivation per connect, as it costs libpq. It slows only
// the connects that go to it: while 4 connects to it run, a connect of another connector to an
// honest server (a harness PostgreSQL, scram-sha-256, a new connector for each connect, so that
// each one derives its keys) takes at most twice its time alone when the 4 go through one
// connector (one derivation at a time for the hostile server on 2 processors), and at most 4
// times (8 under the race detector) when each has a connector of its own: 4 derivations then
// share the processors with the honest connect, as 4 threads of libpq would (1.1 to 2.2 times
// measured, 6 to 8 if the derivations did not yield at each check). Compared by the medians of
// 10 connects each. The connects alone and beside the hostile ones alternate, so that the
// machine's other load weighs on both alike; the hostile connects start before each honest
// connect beside them and are given up after it, their budget (a minute) far longer.
func TestSCRAMHostileServerSlowsOnlyItsConnects(t *testing.T) {
	const rounds, hostile = 10, 4
	_, srv := servers(t)
	honestDSN := srv.DSN("sslmode=disable gssencmode=disable")
	honest := func(t *testing.T) (time.Duration, error) {
		t.Helper()
		c := newConnector(t, honestDSN)
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		start := time.Now()
		dc, err := c.Connect(ctx)
		took := time.Since(start)
		if err == nil {
			dc.Close()
		}
		return took, err
	}
	median := func(d []time.Duration) time.Duration {
		d = slices.Clone(d)
		slices.Sort(d)
		return d[len(d)/2]
	}
	honest(t) // the first connect of the process pays for what is set up once

	for _, tc := range []struct {
		name       string
		connectors int // for the hostile connects
		factor     int // the bound of the honest median beside them, in medians alone
	}{
		{"one connector", 1, 2},
		{"a connector each", hostile, 4},
	} {
		if raceDetector && tc.connectors > 1 {
			tc.factor *= 2
		}
		t.Run(tc.name, func(t *testing.T) {
			f := startFakeSCRAM(t, &fakeSCRAM{lie: lieFreshSalts, iters: 10_000_000})
			hcs := make([]*pgconnector.Connector, tc.connectors)
			for i := range hcs {
				hcs[i] = newConnector(t, f.dsn("fake-Secret-3b9"))
				defer hcs[i].Close()
			}
			// startHostile starts the hostile connects and returns once each one has sent
			// its client-first-message and a derivation had time to start; the function it
			// returns gives them up and waits for them.
			startHostile := func() (stop func()) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				var wg sync.WaitGroup
				seen := f.startups.Load()
				for i := range hostile {
					wg.Go(func() {
						if dc, err := hcs[i%len(hcs)].Connect(ctx); err == nil {
							dc.Close()
							t.Error("a connect to the hostile server succeeded")
						}
					})
				}
				for f.startups.Load() < seen+hostile && ctx.Err() == nil {
					time.Sleep(time.Millisecond)
				}
				time.Sleep(20 * time.Millisecond)
				return func() {
					cancel()
					wg.Wait()
				}
			}

			var alone, beside []time.Duration
			var failed []error
			for range rounds {
				took, err := honest(t)
				if err != nil {
					t.Fatalf("honest connect alone: %v", err)
				}
				alone = append(alone, took)
				stop := startHostile()
				took, err = honest(t)
				stop()
				beside = append(beside, took)
				if err != nil {
					failed = append(failed, err)
				}
			}

			ma, mb := median(alone), median(beside)
			t.Logf("honest connect alone: median %v %v; beside %d connects to the hostile server: median %v %v (%d failed); %.2fx",
				ma, alone, hostile, mb, beside, len(failed), float64(mb)/float64(ma))
			if len(failed) > 0 {
				t.Errorf("%d of %d honest connects failed beside the hostile server's, the first: %v", len(failed), rounds, failed[0])
			}
			if mb > time.Duration(tc.factor)*ma {
				t.Errorf("honest connects took %v (median) beside the hostile server's, %v alone: more than %d times as long", mb, ma, tc.factor)
			}
		})
	}
}
