package scram

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	xscram "github.com/xdg-go/scram"
)

// cpuTime is the process's user and system CPU time.
func cpuTime(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Ten connects with 200 ms budgets against a server that sends a fresh salt with the largest
// iteration count allowed each time: at most GOMAXPROCS derivations run at once, and each one
// stops once no exchange waits for it; none completes. Counted with hooks around each
// derivation, not timed.
func TestDerivationsBoundedAndStopped(t *testing.T) {
	const connects, iters = 10, 10_000_000
	var running, peak, started, stopped, completed atomic.Int64
	ended := make(chan struct{}, 1024)
	testHooks.Store(&derivationHooks{
		start: func() {
			started.Add(1)
			n := running.Add(1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
		},
		end: func(done bool) {
			running.Add(-1)
			if done {
				completed.Add(1)
			} else {
				stopped.Add(1)
			}
			ended <- struct{}{}
		},
	})
	t.Cleanup(func() { testHooks.Store(nil) })

	k := NewKeys(Config{MaxIterations: iters})
	cpu0, wall0 := cpuTime(t), time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, connects)
	for i := range connects {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The server's keys are never reached: only its salt and count are sent.
			salt := []byte("fresh salt " + strconv.Itoa(i))
			p := newPeer(t, xscram.StoredCredentials{KeyFactors: xscram.KeyFactors{Salt: string(salt), Iters: iters}})
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			_, err := exchange(t, k, p, attempt{ctx: ctx})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("exchange: %v, want the deadline's error", err)
		}
	}
	// Every derivation that started ends; a safety net far above what stopping takes.
	safety := time.After(5 * time.Minute)
	for running.Load() > 0 {
		select {
		case <-ended:
		case <-safety:
			t.Fatalf("%d derivations still running 5 minutes after every exchange gave up", running.Load())
		}
	}
	t.Logf("%d connects gave up: %d derivations started, at most %d at once (GOMAXPROCS %d), %d stopped, %d completed; %v of CPU in %v",
		connects, started.Load(), peak.Load(), runtime.GOMAXPROCS(0), stopped.Load(), completed.Load(),
		(cpuTime(t) - cpu0).Round(time.Millisecond), time.Since(wall0).Round(time.Millisecond))
	if p := peak.Load(); p > int64(runtime.GOMAXPROCS(0)) || p < 1 {
		t.Errorf("%d derivations ran at once, want 1 to GOMAXPROCS (%d)", p, runtime.GOMAXPROCS(0))
	}
	if n := completed.Load(); n > 0 {
		t.Errorf("%d derivations completed after every exchange waiting for them gave up", n)
	}
}
