package pgconnector_test

import (
	"context"
	"flag"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
	"github.com/pgconnector/pgconnector/negotiation"
)

var soakDuration = flag.Duration("soak", 30*time.Second, "how long TestSoak runs (go test -run Soak -soak 10m .)")

// TestSoak has 64 goroutines connect, run a statement and close, for -soak, through a proxy that
// injects a random fault into a random share of the connections to a real server offering GSS
// encryption (and allowing plaintext): corrupted AP-REPs and wrap tokens, resets, stalls, slow
// trickles. Afterwards: no goroutine, file descriptor or heap growth, nothing remembered that
// would turn GSS encryption off, and the next connect is GSS-encrypted. (The race detector of
// the test command checks the rest.)
func TestSoak(t *testing.T) {
	lab := newKerberosLab(t)
	srv := lab.server(t, true, lab.gssHBA(), "hostnogssenc all all 127.0.0.1/32 trust")
	// The faults that two in a row teach "no GSS" (a close after the AP-REQ, an ErrorResponse to
	// GSSENCRequest) are left out: drawn at random they would come twice in a row sooner or
	// later, and be remembered as they should (TestGSSFaultsAreNotRemembered has them).
	none := harness.Fault{}
	faults := []harness.Fault{
		none, none, none, none, none, none,
		{Step: harness.StepAPRep, Kind: harness.FaultCorrupt},
		{Step: harness.StepAPRep, Kind: harness.FaultReset},
		{Step: harness.StepAPRep, Kind: harness.FaultTrickle},
		{Step: harness.StepWrapToken, Kind: harness.FaultCorrupt},
		{Step: harness.StepWrapToken, Kind: harness.FaultReset},
		{Step: harness.StepWrapToken, Kind: harness.FaultStall},
		{Step: harness.StepGSSENCAnswer, Kind: harness.FaultTrickle},
		{Step: harness.StepSSLAnswer, Kind: harness.FaultStall},
	}
	px, err := harness.NewRandomFaultProxy(srv.Addr(), faults, uint64(time.Now().UnixNano()))
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	_, port := px.Addr()
	dsn := strings.Replace(aliceDSN(srv, "localhost", "connect_timeout=1"), "port="+strconv.Itoa(srv.Port), "port="+strconv.Itoa(port), 1)
	// Half the goroutines with gssencmode=prefer, which may go on in plaintext within a connect
	// whose GSS context failed (libpq's rule); half with require, which never may.
	c := lab.connector(t, dsn)
	required := lab.connector(t, dsn+" gssencmode=require")

	var ok, failed, plain, requiredPlain atomic.Int64
	run := func(ctx context.Context, workers int) {
		var wg sync.WaitGroup
		for i := range workers {
			c := c
			if i%2 == 1 {
				c = required
			}
			wg.Go(func() {
				for ctx.Err() == nil {
					cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					conn, err := c.Connect(cctx)
					cancel()
					if err != nil {
						failed.Add(1)
						continue
					}
					switch {
					case gssEncrypted(t, conn):
						ok.Add(1)
					case c == required:
						requiredPlain.Add(1)
					default:
						plain.Add(1) // the fallback after a failed AP-REP, for this connect only
					}
					conn.Close()
				}
			})
		}
		wg.Wait()
	}

	// Warm up, then take the baseline.
	warm, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	run(warm, 64)
	cancel()
	goroutines, fds, heap := resources()

	ctx, cancel := context.WithTimeout(context.Background(), *soakDuration)
	defer cancel()
	run(ctx, 64)
	t.Logf("%v: %d GSS-encrypted connects, %d in plaintext after a failed GSS context, %d failed; %d connections got a fault",
		*soakDuration, ok.Load(), plain.Load(), failed.Load(), px.Stats().Faults)
	if ok.Load() == 0 || px.Stats().Faults == 0 {
		t.Fatal("the soak connected nothing or injected nothing: it proves nothing")
	}
	if n := requiredPlain.Load(); n > 0 {
		t.Errorf("%d connects with gssencmode=require went in plaintext", n)
	}

	// Nothing learned from the faults turns GSS encryption off.
	key := negotiation.Key{Host: "localhost", Port: uint16(port), Principal: "alice@" + lab.kdc.Realm}
	if k := pgconnector.CacheOf(c).Known(key); k.GSS == negotiation.AnswerNo {
		t.Errorf("after the soak the cache says GSS encryption cannot succeed: %+v", k)
	}
	// The proxy goes first: the connections it still stalls hold backends of the server, which a
	// loaded machine may take more than the soak's connect_timeout of 1 s to wind down. The clean
	// connect asserts the transport, not the time, so it has a budget of its own.
	px.Close()
	cleanDSN := strings.Replace(dsn, "port="+strconv.Itoa(port), "port="+strconv.Itoa(srv.Port), 1)
	clean := lab.connector(t, strings.Replace(cleanDSN, "connect_timeout=1", "connect_timeout=30", 1))
	conn, err := clean.Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !gssEncrypted(t, conn) {
		t.Error("a connect after the soak is not GSS-encrypted")
	}
	conn.Close()

	// No growth: what the connects and the faults left settles within a few seconds (a stalled
	// socket is closed by the proxy, a shared KDC exchange ends).
	deadline := time.Now().Add(15 * time.Second)
	for {
		g, f, h := resources()
		grew := g > goroutines+8 || f > fds+8 || h > heap+16<<20
		if !grew {
			t.Logf("goroutines %d -> %d, file descriptors %d -> %d, heap %d KiB -> %d KiB", goroutines, g, fds, f, heap>>10, h>>10)
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("growth after the soak: goroutines %d -> %d, file descriptors %d -> %d, heap %d KiB -> %d KiB",
				goroutines, g, fds, f, heap>>10, h>>10)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// resources returns the goroutines, open file descriptors and live heap of this process.
func resources() (goroutines, fds int, heap uint64) {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	entries, _ := os.ReadDir("/proc/self/fd")
	return runtime.NumGoroutine(), len(entries), m.HeapAlloc
}
