package gss

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pgconnector/pgconnector/internal/harness"
)

// A KCM daemon that accepts and never answers: Credentials returns when the connect's context
// ends, not after KCMTimeout (5 s), and Close then closes the connection it left.
func TestCredentialsKCMNoAnswerContext(t *testing.T) {
	kcm := harness.FakeKCMT(t, func(uint16, []byte) ([]byte, time.Duration) { return nil, -1 })
	c := NewClient(ClientConfig{Krb5Conf: kcm.Krb5Conf, CCache: "KCM:"})
	const wait = 200 * time.Millisecond
	for i := range 3 { // the later calls find the first's check still hanging
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		start := time.Now()
		_, err := c.Credentials(ctx)
		d := time.Since(start)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("call %d: Credentials: %v, want context.DeadlineExceeded", i, err)
		}
		if d > wait+300*time.Millisecond {
			t.Errorf("call %d: Credentials took %v with a %v context", i, d, wait)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	// Every connection the client made is closed at its end: the daemon's end reads EOF.
	opened := kcm.Accepts()
	if opened == 0 {
		t.Fatal("no connection to the daemon")
	}
	for deadline := time.Now().Add(2 * time.Second); kcm.ClosedByPeer() < opened && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if closed := kcm.ClosedByPeer(); closed < opened {
		t.Errorf("%d of %d connections not closed after Close: the daemon's end did not read EOF", opened-closed, opened)
	}
	if _, err := c.Credentials(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Credentials after Close: %v, want ErrClosed", err)
	}
	time.Sleep(50 * time.Millisecond)
	if n := kcm.Accepts(); n != opened {
		t.Errorf("%d connections to the daemon after Close", n-opened)
	}
}
