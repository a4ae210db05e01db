package scram

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"sync"
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

// derivationWatch counts, through testHooks, the derivations of each server: started, running
// now, the most that ran at once, stopped and completed.
type derivationWatch struct {
	mu                         sync.Mutex
	started, running, peak     map[string]int
	stopped, completed, active int
	ended                      chan struct{}
}

func watchDerivations(t *testing.T) *derivationWatch {
	t.Helper()
	w := &derivationWatch{started: map[string]int{}, running: map[string]int{}, peak: map[string]int{}, ended: make(chan struct{}, 1024)}
	testHooks.Store(&derivationHooks{
		start: func(server string) {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.started[server]++
			w.running[server]++
			w.active++
			w.peak[server] = max(w.peak[server], w.running[server])
		},
		end: func(server string, done bool) {
			w.mu.Lock()
			w.running[server]--
			w.active--
			if done {
				w.completed++
			} else {
				w.stopped++
			}
			w.mu.Unlock()
			w.ended <- struct{}{}
		},
	})
	t.Cleanup(func() { testHooks.Store(nil) })
	return w
}

// count returns one of w's numbers, read under its lock.
func (w *derivationWatch) count(f func(w *derivationWatch) int) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return f(w)
}

// settle waits until no derivation of k runs and k keeps no server's slots (a derivation that
// ends gives its slot back just after its end hook), with a safety net far above what stopping
// takes.
func (w *derivationWatch) settle(t *testing.T, k *Keys) {
	t.Helper()
	safety := time.After(5 * time.Minute)
	for w.count(func(w *derivationWatch) int { return w.active }) > 0 {
		select {
		case <-w.ended:
		case <-safety:
			t.Fatal("derivations still running 5 minutes after every exchange gave up")
		}
	}
	for n := serverCount(k); n > 0; n = serverCount(k) {
		select {
		case <-time.After(time.Millisecond):
		case <-safety:
			t.Fatalf("%d servers kept 5 minutes after every exchange gave up, want none", n)
		}
	}
}

// serverCount returns how many servers k keeps slots for.
func serverCount(k *Keys) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.servers)
}

// Ten connects to one server with 200 ms budgets, against a server that sends a fresh salt with
// the largest iteration count allowed each time: at most PerServer derivations run at once, each
// one stops once no exchange waits for it, none completes, and nothing of the server stays in
// the Keys. Counted with hooks around each derivation, not timed.
func TestDerivationsBoundedAndStopped(t *testing.T) {
	const connects, iters = 10, 10_000_000
	w := watchDerivations(t)
	k := NewKeys(Config{MaxIterations: iters})
	cpu0, wall0 := cpuTime(t), time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, connects)
	for i := range connects {
		wg.Go(func() {
			// The server's keys are never reached: only its salt and count are sent.
			salt := []byte("fresh salt " + strconv.Itoa(i))
			p := newPeer(t, xscram.StoredCredentials{KeyFactors: xscram.KeyFactors{Salt: string(salt), Iters: iters}})
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			_, err := exchange(t, k, p, attempt{server: "tcp 192.0.2.1:5432", ctx: ctx})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("exchange: %v, want the deadline's error", err)
		}
	}
	w.settle(t, k)
	peak := w.peak["tcp 192.0.2.1:5432"]
	t.Logf("%d connects gave up: %d derivations started, at most %d at once (PerServer %d), %d stopped, %d completed; %v of CPU in %v",
		connects, w.started["tcp 192.0.2.1:5432"], peak, k.cfg.PerServer, w.stopped, w.completed,
		(cpuTime(t) - cpu0).Round(time.Millisecond), time.Since(wall0).Round(time.Millisecond))
	if peak > k.cfg.PerServer || peak < 1 {
		t.Errorf("%d derivations ran at once, want 1 to PerServer (%d)", peak, k.cfg.PerServer)
	}
	if w.completed > 0 {
		t.Errorf("%d derivations completed after every exchange waiting for them gave up", w.completed)
	}
}

// The default of PerServer: half of GOMAXPROCS, at least 1.
func TestDefaultPerServer(t *testing.T) {
	for _, tc := range []struct{ procs, want int }{{1, 1}, {2, 1}, {3, 1}, {4, 2}, {16, 8}} {
		t.Run(strconv.Itoa(tc.procs), func(t *testing.T) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(tc.procs))
			if got := NewKeys(Config{}).cfg.PerServer; got != tc.want {
				t.Errorf("PerServer with GOMAXPROCS %d: %d, want %d", tc.procs, got, tc.want)
			}
		})
	}
}

// A hostile server's exchanges fill its slots with derivations that never end in time (a fresh
// salt, 10,000,000 iterations each); an exchange with another server through the same Keys
// derives at once and succeeds, while the hostile exchanges still wait. When they give up,
// every derivation stops and no server stays in the Keys.
func TestDerivationsPerServer(t *testing.T) {
	const hostile, iters = 4, 10_000_000
	const bad, good = "tcp 192.0.2.1:5432", "tcp 192.0.2.2:5432"
	w := watchDerivations(t)
	k := NewKeys(Config{MaxIterations: iters, PerServer: 1})
	ctx, giveUp := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range hostile {
		wg.Go(func() {
			salt := "fresh salt " + strconv.Itoa(i)
			p := newPeer(t, xscram.StoredCredentials{KeyFactors: xscram.KeyFactors{Salt: salt, Iters: iters}})
			if _, err := exchange(t, k, p, attempt{server: bad, ctx: ctx}); !errors.Is(err, context.Canceled) {
				t.Errorf("hostile exchange: %v, want the cancel's error", err)
			}
		})
	}
	for w.count(func(w *derivationWatch) int { return w.started[bad] }) == 0 {
		time.Sleep(time.Millisecond)
	}

	p := passwordPeer(t, testPassword, testSalt, 4096)
	hctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := exchange(t, k, p, attempt{server: good, ctx: hctx}); err != nil {
		t.Errorf("exchange with the honest server beside the hostile one: %v", err)
	}
	if n := w.count(func(w *derivationWatch) int { return w.started[bad] }); n != 1 {
		t.Errorf("%d hostile derivations started, want 1 (PerServer): the others wait", n)
	}

	giveUp()
	wg.Wait()
	w.settle(t, k)
	if w.peak[bad] != 1 {
		t.Errorf("%d hostile derivations ran at once, want 1 (PerServer)", w.peak[bad])
	}
	if w.completed != 1 {
		t.Errorf("%d derivations completed, want the honest one", w.completed)
	}
}

// An exchange with server B that needs the keys a derivation waiting for server A's slot will
// derive joins it, and the derivation runs with B's free slot: A's busy slots do not delay B.
// The exchange with A that started the derivation gets the keys too; one derivation for both.
func TestDerivationJoinedFromAnotherServer(t *testing.T) {
	const iters = 10_000_000
	const a, b = "tcp 192.0.2.1:5432", "tcp 192.0.2.2:5432"
	w := watchDerivations(t)
	d := newDerivations()
	k := NewKeys(d.config(Config{MaxIterations: iters, PerServer: 1}))
	// A's slot: taken by a derivation that does not end in time.
	busy, stopBusy := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		p := newPeer(t, xscram.StoredCredentials{KeyFactors: xscram.KeyFactors{Salt: "a salt of A's own", Iters: iters}})
		if _, err := exchange(t, k, p, attempt{server: a, ctx: busy}); !errors.Is(err, context.Canceled) {
			t.Errorf("exchange that holds A's slot: %v, want the cancel's error", err)
		}
	})
	queued := func() int {
		k.mu.Lock()
		defer k.mu.Unlock()
		if s := k.servers[a]; s != nil {
			return len(s.queue)
		}
		return 0
	}
	for serverCount(k) == 0 {
		time.Sleep(time.Millisecond)
	}

	p := passwordPeer(t, testPassword, testSalt, 4096)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errA := make(chan error, 1)
	go func() {
		_, err := exchange(t, k, p, attempt{server: a, ctx: ctx})
		errA <- err
	}()
	for queued() == 0 {
		time.Sleep(time.Millisecond)
	}
	if _, err := exchange(t, k, p, attempt{server: b, ctx: ctx}); err != nil {
		t.Errorf("exchange with B: %v", err)
	}
	if err := <-errA; err != nil {
		t.Errorf("exchange with A that waited for A's slot: %v", err)
	}
	d.expect(t, 1)
	if n := queued(); n != 0 {
		t.Errorf("%d derivations still wait for A's slot, want none", n)
	}
	stopBusy()
	wg.Wait()
	w.settle(t, k)
}
