package pgconnector_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/pgconnector/pgconnector/internal/harness"
	"github.com/pgconnector/pgconnector/negotiation"
)

// A connect waiting for another connect's probe of the same host waits no longer than its own
// attempt's budget, here (no connect_timeout) negotiation.DefaultProbeWait, and then tries
// itself, as libpq would have from the start. A proxy swallows the first SSLRequest: the
// probing connect hangs until its 10 s deadline; a second one with no deadline at all (as
// database/sql's background opener connects) gets in through its own connection after about
// DefaultProbeWait, not when the first one gives up.
func TestProbeWaitIsBoundedWithoutConnectTimeout(t *testing.T) {
	srv := harness.StartT(t, harness.Options{})
	px := harness.FaultProxyT(t, srv.Addr(), harness.Fault{Step: harness.StepSSLAnswer, Kind: harness.FaultStall, Count: 1})
	_, port := px.Addr()
	c := newConnector(t, "host=127.0.0.1 port="+strconv.Itoa(port)+" user="+srv.User+" password="+srv.Password+" dbname="+srv.Database)

	probeCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	probed := make(chan error, 1)
	go func() {
		conn, err := c.Connect(probeCtx)
		if err == nil {
			conn.Close()
		}
		probed <- err
	}()
	for deadline := time.Now().Add(5 * time.Second); px.Stats().SSLRequests < 1; {
		if time.Now().After(deadline) {
			t.Fatal("the first connect sent no SSLRequest")
		}
		time.Sleep(5 * time.Millisecond)
	}

	start := time.Now()
	conn, err := c.Connect(context.Background())
	took := time.Since(start)
	if err != nil {
		t.Fatalf("the waiting connect: %v", err)
	}
	conn.Close()
	if took < negotiation.DefaultProbeWait-100*time.Millisecond || took > negotiation.DefaultProbeWait+time.Second {
		t.Errorf("the waiting connect took %v, want about DefaultProbeWait (%v)", took, negotiation.DefaultProbeWait)
	}
	if st := px.Stats(); st.Connections != 2 || st.SSLRequests != 2 {
		t.Errorf("proxy saw %+v, want 2 connections with an SSLRequest each (the waiter's own)", st)
	}
	select {
	case err := <-probed:
		t.Fatalf("the probing connect ended (%v) before its deadline", err)
	default:
	}
	cancel()
	if err := <-probed; err == nil {
		t.Error("the probing connect got in through a swallowed SSLRequest")
	}
}
