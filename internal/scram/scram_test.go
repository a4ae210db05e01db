package scram

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	xscram "github.com/xdg-go/scram"
)

func TestExchangeColdThenWarm(t *testing.T) {
	d := newDerivations()
	k := NewKeys(d.config(Config{}))
	p := passwordPeer(t, testPassword, testSalt, 4096)

	e, err := exchange(t, k, p, attempt{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(e.ClientFirst()), "n,,n=,r=") {
		t.Errorf("client-first-message %q: want the GS2 header \"n,,\" and an empty user, as libpq sends", e.ClientFirst())
	}
	if e.Cached() {
		t.Error("first exchange reports Cached")
	}
	d.expect(t, 1)

	for i := range 3 {
		if !mustExchange(t, k, p, attempt{}) {
			t.Errorf("warm exchange %d not Cached", i)
		}
	}
	d.expect(t, 1)
	if k.Len() != 1 {
		t.Errorf("Len() = %d, want 1", k.Len())
	}
}

func TestChannelBinding(t *testing.T) {
	cb := sha256.Sum256([]byte("the server's certificate"))
	other := sha256.Sum256([]byte("a man in the middle's certificate"))

	t.Run("plus", func(t *testing.T) {
		d := newDerivations()
		k := NewKeys(d.config(Config{}))
		p := passwordPeer(t, testPassword, testSalt, 4096)
		p.cb = cb[:]
		e, err := exchange(t, k, p, attempt{mechanism: MechanismSHA256Plus, cb: cb[:]})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(string(e.ClientFirst()), "p=tls-server-end-point,,n=,r=") {
			t.Errorf("client-first-message %q", e.ClientFirst())
		}
		// SCRAM-SHA-256 and -PLUS derive the same keys: one entry serves both.
		if !mustExchange(t, k, passwordPeer(t, testPassword, testSalt, 4096), attempt{}) {
			t.Error("SCRAM-SHA-256 after SCRAM-SHA-256-PLUS not Cached")
		}
		d.expect(t, 1)
	})

	t.Run("mismatch", func(t *testing.T) {
		d := newDerivations()
		k := NewKeys(d.config(Config{}))
		p := passwordPeer(t, testPassword, testSalt, 4096)
		p.cb = cb[:]
		_, err := exchange(t, k, p, attempt{mechanism: MechanismSHA256Plus, cb: other[:]})
		if !isKind(err, ErrServerError) || !strings.Contains(err.Error(), "channel-bindings-dont-match") {
			t.Fatalf("err = %v, want the server's channel-bindings-dont-match", err)
		}
		// The failed exchange leaves nothing: the next one derives again.
		if mustExchange(t, k, p, attempt{mechanism: MechanismSHA256Plus, cb: cb[:]}) {
			t.Error("exchange after a failed one is Cached")
		}
		d.expect(t, 2)
	})

	t.Run("advertise", func(t *testing.T) {
		k := NewKeys(Config{})
		e, err := exchange(t, k, passwordPeer(t, testPassword, testSalt, 4096), attempt{advertise: true})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(string(e.ClientFirst()), "y,,n=,r=") {
			t.Errorf("client-first-message %q: want the GS2 flag 'y'", e.ClientFirst())
		}
		// A server that offered -PLUS takes 'y' as a downgrade (RFC 5802 section 6).
		p := passwordPeer(t, testPassword, testSalt, 4096)
		p.cb = cb[:]
		e, err = k.Start("", MechanismSHA256, testUser, testPassword, nil, true)
		if err != nil {
			t.Fatal(err)
		}
		if resp, err := p.conv().Step(string(e.ClientFirst())); err == nil || resp != xscram.ErrServerDoesSupportChannelBinding {
			t.Errorf("server with -PLUS answered 'y' with %q, %v", resp, err)
		}
	})
}

func TestKeyFactorsChange(t *testing.T) {
	d := newDerivations()
	k := NewKeys(d.config(Config{}))
	p := passwordPeer(t, testPassword, testSalt, 4096)
	mustExchange(t, k, p, attempt{})
	d.expect(t, 1)

	// The password was set again on the server: a new salt.
	p2 := passwordPeer(t, testPassword, []byte("another salt 16b"), 4096)
	if mustExchange(t, k, p2, attempt{}) {
		t.Error("exchange with a new salt is Cached")
	}
	d.expect(t, 2)

	// scram_iterations raised (PostgreSQL 16+), then the password set again.
	p3 := passwordPeer(t, testPassword, testSalt, 8192)
	if mustExchange(t, k, p3, attempt{}) {
		t.Error("exchange with a new iteration count is Cached")
	}
	d.expect(t, 3)

	// Every (salt, count) stays until the entry is full.
	for _, q := range []*peer{p, p2, p3} {
		if !mustExchange(t, k, q, attempt{}) {
			t.Error("known salt and count not Cached")
		}
	}
	d.expect(t, 3)
}

func TestFullEntryReplaced(t *testing.T) {
	d := newDerivations()
	k := NewKeys(d.config(Config{}))
	var peers []*peer
	for i := range maxFactors + 1 {
		peers = append(peers, passwordPeer(t, testPassword, testSalt, 4096+i))
	}
	for _, p := range peers[:maxFactors] {
		mustExchange(t, k, p, attempt{})
	}
	d.expect(t, maxFactors)
	if !mustExchange(t, k, peers[0], attempt{}) {
		t.Fatal("first salt not Cached while the entry has room")
	}
	// A ninth (salt, count) replaces the entry's Client: it works, and the old ones are gone.
	if mustExchange(t, k, peers[maxFactors], attempt{}) {
		t.Error("ninth salt Cached")
	}
	d.expect(t, maxFactors+1)
	if mustExchange(t, k, peers[0], attempt{}) {
		t.Error("first salt still Cached after the entry was replaced")
	}
	d.expect(t, maxFactors+2)
}

func TestWrongServer(t *testing.T) {
	// A server built with another password refuses the proof (e=invalid-proof).
	t.Run("other password", func(t *testing.T) {
		d := newDerivations()
		k := NewKeys(d.config(Config{}))
		good := passwordPeer(t, testPassword, testSalt, 4096)
		mustExchange(t, k, good, attempt{})
		_, err := exchange(t, k, passwordPeer(t, "another password", testSalt, 4096), attempt{})
		if !isKind(err, ErrServerError) || !strings.Contains(err.Error(), "invalid-proof") {
			t.Fatalf("err = %v, want the server's invalid-proof", err)
		}
		if mustExchange(t, k, good, attempt{}) {
			t.Error("exchange after a failed one is Cached")
		}
		d.expect(t, 2)
	})

	// A server that has the StoredKey (enough to check the proof) but not the ServerKey: it accepts
	// the client and signs wrong. The client must refuse it: mutual authentication.
	t.Run("wrong signature", func(t *testing.T) {
		d := newDerivations()
		k := NewKeys(d.config(Config{}))
		good := passwordPeer(t, testPassword, testSalt, 4096)
		mustExchange(t, k, good, attempt{})
		if !mustExchange(t, k, good, attempt{}) {
			t.Fatal("warm exchange not Cached")
		}
		creds := good.creds
		creds.ServerKey = storedCredentials(t, "another password", testSalt, 4096).ServerKey
		_, err := exchange(t, k, newPeer(t, creds), attempt{})
		if !errors.Is(err, ErrServerSignature) {
			t.Fatalf("err = %v, want ErrServerSignature", err)
		}
		if err.Error() != "SCRAM server signature does not match: the server does not know the password" {
			t.Errorf("err = %q", err)
		}
		if mustExchange(t, k, good, attempt{}) {
			t.Error("exchange after a wrong server signature is Cached")
		}
		d.expect(t, 2)
	})
}

func TestAbandon(t *testing.T) {
	d := newDerivations()
	k := NewKeys(d.config(Config{}))
	p := passwordPeer(t, testPassword, testSalt, 4096)

	// Cold: the server answers client-final-message with an ErrorResponse (no SASLFinal).
	e, err := k.Start("", MechanismSHA256, testUser, testPassword, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	s1, _ := p.conv().Step(string(e.ClientFirst()))
	if _, err := e.ServerFirst(context.Background(), []byte(s1)); err != nil {
		t.Fatal(err)
	}
	e.Abandon()
	e.Abandon() // a second time does nothing
	if err := e.ServerFinal([]byte("v=AAAA")); err == nil {
		t.Error("ServerFinal after Abandon succeeded")
	}
	if mustExchange(t, k, p, attempt{}) {
		t.Error("exchange after Abandon is Cached")
	}
	d.expect(t, 2)

	// Warm: even verified keys go with an abandoned exchange.
	if !mustExchange(t, k, p, attempt{}) {
		t.Fatal("warm exchange not Cached")
	}
	e, _ = k.Start("", MechanismSHA256, testUser, testPassword, nil, false)
	s1, _ = p.conv().Step(string(e.ClientFirst()))
	if _, err := e.ServerFirst(context.Background(), []byte(s1)); err != nil || !e.Cached() {
		t.Fatalf("ServerFirst: %v, Cached %v", err, e.Cached())
	}
	e.Abandon()
	if mustExchange(t, k, p, attempt{}) {
		t.Error("exchange after Abandon of a warm one is Cached")
	}
	d.expect(t, 3)

	// Abandon after a successful ServerFinal keeps the proven keys.
	e, err = exchange(t, k, p, attempt{})
	if err != nil {
		t.Fatal(err)
	}
	e.Abandon()
	if !mustExchange(t, k, p, attempt{}) {
		t.Error("Abandon after a successful exchange dropped the keys")
	}
	d.expect(t, 3)
}

// An exchange that started before another one with the same entry failed does not use the
// dropped keys: it goes on with a fresh Client of its own and the same client-first-message.
func TestStartedBeforeFailure(t *testing.T) {
	d := newDerivations()
	k := NewKeys(d.config(Config{}))
	p := passwordPeer(t, testPassword, testSalt, 4096)
	mustExchange(t, k, p, attempt{})
	mustExchange(t, k, p, attempt{})
	d.expect(t, 1)

	early, _ := k.Start("", MechanismSHA256, testUser, testPassword, nil, false)
	earlySrv := p.conv()
	s1, _ := earlySrv.Step(string(early.ClientFirst()))

	failing, _ := k.Start("", MechanismSHA256, testUser, testPassword, nil, false)
	fs1, _ := p.conv().Step(string(failing.ClientFirst()))
	if _, err := failing.ServerFirst(context.Background(), []byte(fs1)); err != nil {
		t.Fatal(err)
	}
	failing.Abandon()

	c2, err := early.ServerFirst(context.Background(), []byte(s1))
	if err != nil {
		t.Fatal(err)
	}
	if early.Cached() {
		t.Error("exchange that started before a failure is Cached after it")
	}
	d.expect(t, 2)
	s2, err := earlySrv.Step(string(c2))
	if err != nil {
		t.Fatalf("server refused the rebound exchange: %v", err)
	}
	if err := early.ServerFinal([]byte(s2)); err != nil {
		t.Fatal(err)
	}
}

func TestIterationCountTooLarge(t *testing.T) {
	d := newDerivations()
	k := NewKeys(d.config(Config{}))
	// The server only sends the count: its keys are never used.
	p := newPeer(t, xscram.StoredCredentials{KeyFactors: xscram.KeyFactors{Salt: string(testSalt), Iters: 1<<31 - 1}})
	start := time.Now()
	_, err := exchange(t, k, p, attempt{})
	if took := time.Since(start); took > time.Second {
		t.Errorf("refusing the count took %v", took)
	}
	if !isKind(err, ErrServerMessage) || err.Error() != "SCRAM iteration count 2147483647 from the server exceeds the limit of 10000000" {
		t.Fatalf("err = %v", err)
	}
	d.expect(t, 0)

	k = NewKeys(d.config(Config{MaxIterations: 4096}))
	if _, err := exchange(t, k, passwordPeer(t, testPassword, testSalt, 4097), attempt{}); err == nil ||
		err.Error() != "SCRAM iteration count 4097 from the server exceeds the limit of 4096" {
		t.Fatalf("err = %v", err)
	}
	mustExchange(t, k, passwordPeer(t, testPassword, testSalt, 4096), attempt{})
	// PostgreSQL's scram_iterations may be 1; libpq accepts it.
	mustExchange(t, k, passwordPeer(t, testPassword, testSalt, 1), attempt{})
	d.expect(t, 2)
}

func TestContextEndsDuringDerivation(t *testing.T) {
	// Long enough that the derivation outlasts the context by far: 1 to 2 s here, for 5 000 000
	// iterations, or 1 000 000 under the race detector (about five times slower).
	iters := 5_000_000
	if raceEnabled {
		iters = 1_000_000
	}
	// The server's keys, derived meanwhile.
	credsc := make(chan xscram.StoredCredentials, 1)
	go func() { credsc <- storedCredentials(t, testPassword, testSalt, iters) }()
	p := newPeer(t, xscram.StoredCredentials{KeyFactors: xscram.KeyFactors{Salt: string(testSalt), Iters: iters}})

	var stopped atomic.Int64
	ended := make(chan bool, 16)
	testHooks.Store(&derivationHooks{start: func(string) {}, end: func(_ string, done bool) {
		if !done {
			stopped.Add(1)
		}
		ended <- done
	}})
	t.Cleanup(func() { testHooks.Store(nil) })

	d := newDerivations()
	k := NewKeys(d.config(Config{MaxIterations: 2 * iters}))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := exchange(t, k, p, attempt{ctx: ctx})
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the context's", err)
	}
	if took > 500*time.Millisecond {
		t.Errorf("ServerFirst returned %v after the start, the context ended after 50ms", took)
	}

	// No exchange waits for it any more: the derivation stops, and nothing is kept.
	if done := <-ended; done {
		t.Fatal("the derivation completed after its only exchange gave up")
	}
	d.expect(t, 0)
	if n := factorCount(t, k, testUser, testPassword); n != 0 {
		t.Errorf("%d key factors kept after a stopped derivation", n)
	}

	// The next exchange derives again.
	p = newPeer(t, <-credsc)
	if mustExchange(t, k, p, attempt{}) {
		t.Error("exchange with fresh keys is Cached")
	}
	<-ended
	d.expect(t, 1)
	if !mustExchange(t, k, p, attempt{}) {
		t.Error("exchange after a verified one is not Cached")
	}
	d.expect(t, 1)
	if n := stopped.Load(); n != 1 {
		t.Errorf("%d derivations stopped, want 1", n)
	}

	// A context already ended starts nothing.
	k2 := NewKeys(d.config(Config{MaxIterations: 2 * iters}))
	ended2, stop := context.WithCancel(context.Background())
	stop()
	if _, err := exchange(t, k2, p, attempt{ctx: ended2}); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	if n := factorCount(t, k2, testUser, testPassword); n != 0 {
		t.Errorf("%d derivations started or kept with an ended context", n)
	}
}

func TestColdHerd(t *testing.T) {
	const herd = 64
	d := newDerivations()
	k := NewKeys(d.config(Config{}))
	p := passwordPeer(t, testPassword, testSalt, 100_000) // long enough for the herd to meet it

	var wg sync.WaitGroup
	release := make(chan struct{})
	errs := make(chan error, herd)
	for range herd {
		wg.Go(func() {
			e, err := k.Start("", MechanismSHA256, testUser, testPassword, nil, false)
			if err != nil {
				errs <- err
				return
			}
			sc := p.conv()
			s1, err := sc.Step(string(e.ClientFirst()))
			if err != nil {
				errs <- err
				return
			}
			<-release
			c2, err := e.ServerFirst(context.Background(), []byte(s1))
			if err != nil {
				errs <- err
				return
			}
			s2, err := sc.Step(string(c2))
			if err != nil {
				errs <- err
				return
			}
			errs <- e.ServerFinal([]byte(s2))
		})
	}
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	d.expect(t, 1)
}

func TestMaxEntries(t *testing.T) {
	d := newDerivations()
	k := NewKeys(d.config(Config{MaxEntries: 2}))
	users := []string{"u1", "u2", "u3"}
	p := passwordPeer(t, testPassword, testSalt, 4096)
	for _, u := range users {
		mustExchange(t, k, p, attempt{user: u})
	}
	d.expect(t, 3)
	if k.Len() != 2 {
		t.Fatalf("Len() = %d, want 2", k.Len())
	}
	// u1 was the least recently started: evicted. u3 stays.
	if !mustExchange(t, k, p, attempt{user: "u3"}) {
		t.Error("u3 not Cached")
	}
	if mustExchange(t, k, p, attempt{user: "u1"}) {
		t.Error("evicted u1 Cached")
	}
	d.expect(t, 4)
	// Another password of the same user is another entry.
	p2 := passwordPeer(t, "another password", testSalt, 4096)
	if mustExchange(t, k, p2, attempt{user: "u1", password: "another password"}) {
		t.Error("another password Cached")
	}
	d.expect(t, 5)
}

func TestClose(t *testing.T) {
	d := newDerivations()
	k := NewKeys(d.config(Config{}))
	p := passwordPeer(t, testPassword, testSalt, 4096)
	mustExchange(t, k, p, attempt{})
	k.Close()
	if k.Len() != 0 {
		t.Fatalf("Len() = %d after Close", k.Len())
	}
	for range 2 {
		if mustExchange(t, k, p, attempt{}) {
			t.Error("exchange after Close Cached")
		}
	}
	d.expect(t, 3)
	if k.Len() != 0 {
		t.Errorf("Len() = %d after exchanges that followed Close", k.Len())
	}
}

func TestPasswordPreparation(t *testing.T) {
	for _, tc := range []struct{ name, password, serverPassword string }{
		// SASLprep maps U+00A0 to a space and removes U+00AD: the server stored "a bc".
		{"prepped", "a\u00a0b\u00adc", "a bc"},
		// SASLprep refuses a control character and invalid UTF-8: the password is used as it is.
		{"control", "bell\x07ring", "bell\x07ring"},
		{"invalid UTF-8", "caf\xe9", "caf\xe9"},
		// PostgreSQL's order (saslprep.go): prohibited and unassigned code points are looked for
		// before NFKC, and an empty result gives the password as it is.
		{"unassigned before NFKC", "x\u1d43", "x\u1d43"},
		{"only a soft hyphen", "\u00ad", "\u00ad"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := NewKeys(Config{})
			p := newPeer(t, storedCredentials(t, tc.serverPassword, testSalt, 4096))
			if _, err := exchange(t, k, p, attempt{password: tc.password}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestStartRefuses(t *testing.T) {
	k := NewKeys(Config{})
	cb := bytes.Repeat([]byte{1}, 32)
	for _, tc := range []struct {
		name, mechanism, password string
		cb                        []byte
		advertise                 bool
		want                      string
	}{
		{"unknown mechanism", "SCRAM-SHA-1", testPassword, nil, false, `SCRAM mechanism "SCRAM-SHA-1" is not supported`},
		{"binding without plus", MechanismSHA256, testPassword, cb, false, "channel binding data was given for SCRAM-SHA-256"},
		{"plus without binding", MechanismSHA256Plus, testPassword, nil, false, "needs the tls-server-end-point channel binding data"},
		{"plus with empty binding", MechanismSHA256Plus, testPassword, []byte{}, false, "needs the tls-server-end-point channel binding data"},
		{"plus and y", MechanismSHA256Plus, testPassword, cb, true, "does not go with SCRAM-SHA-256-PLUS"},
		{"empty password", MechanismSHA256, "", nil, false, "the password is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := k.Start("", tc.mechanism, testUser, tc.password, tc.cb, tc.advertise)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	if k.Len() != 0 {
		t.Errorf("refused Starts made %d entries", k.Len())
	}
}

func TestOutOfOrder(t *testing.T) {
	k := NewKeys(Config{})
	p := passwordPeer(t, testPassword, testSalt, 4096)
	e, _ := k.Start("", MechanismSHA256, testUser, testPassword, nil, false)
	if err := e.ServerFinal([]byte("v=AAAA")); err == nil || !strings.Contains(err.Error(), "before server-first-message") {
		t.Errorf("ServerFinal first: %v", err)
	}
	sc := p.conv()
	s1, _ := sc.Step(string(e.ClientFirst()))
	c2, err := e.ServerFirst(context.Background(), []byte(s1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.ServerFirst(context.Background(), []byte(s1)); err == nil || !strings.Contains(err.Error(), "a second time") {
		t.Errorf("ServerFirst twice: %v", err)
	}
	s2, _ := sc.Step(string(c2))
	if err := e.ServerFinal([]byte(s2)); err != nil {
		t.Fatal(err)
	}
	if err := e.ServerFinal([]byte(s2)); err == nil || !strings.Contains(err.Error(), "after the exchange ended") {
		t.Errorf("ServerFinal twice: %v", err)
	}
}
