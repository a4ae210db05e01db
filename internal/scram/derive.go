package scram

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"runtime"
	"slices"
	"time"
)

// derivedKeys are what an exchange needs of a password (RFC 5802 section 3): ClientKey =
// HMAC(SaltedPassword, "Client Key"), StoredKey = H(ClientKey), ServerKey = HMAC(SaltedPassword,
// "Server Key"). SaltedPassword itself is not kept.
type derivedKeys struct {
	clientKey, storedKey, serverKey [sha256.Size]byte
}

// flight is one derivation of a gen's keyFactors, shared by the exchanges that wait for it. It
// waits for a slot of a server (serverSlots) and then runs; it is stopped (cancel) when the last
// exchange waiting for it stops waiting.
type flight struct {
	waiters int // guarded by Keys.mu
	ctx     context.Context
	cancel  context.CancelFunc
	done    chan struct{} // closed when keys or err is set
	keys    derivedKeys
	err     error

	g  *gen
	kf keyFactors

	// Guarded by Keys.mu.
	running bool     // it holds a slot of slot's server, and its goroutine derives
	slot    string   // that server
	queued  []string // before it runs: the servers in whose queues it waits
}

// serverSlots are the derivations of one server (Start's server): how many run, and the flights
// waiting for one of its slots, oldest first. A server has its serverSlots only while some
// derivation of it runs or waits (Keys.servers).
type serverSlots struct {
	running int
	queue   []*flight
}

// checkEvery is how many PBKDF2 iterations run between two looks at whether the derivation is
// still wanted: about a millisecond here. At each look the derivation also yields its processor
// (runtime.Gosched), so that the goroutines of other connects run between two checks, not only
// when Go preempts the loop (10 ms). Measured on 2 processors, 4 derivations for a server
// running through 4 connectors: a connect to another server took 1.1 to 2.2 times its time
// alone with the yield, 6 to 8 times without (TestSCRAMHostileServerSlowsOnlyItsConnects).
const checkEvery = 4096

// defaultPerServer is Config.PerServer's default: half of GOMAXPROCS, at least 1. One server's
// derivations (a server that sends a fresh salt with a huge iteration count to each connect)
// then keep half of the processors at most, and the connects to other servers have the other
// half; a server with many users connecting for the first time still derives in parallel on a
// large machine. On 2 processors: 1.
func defaultPerServer() int { return max(1, runtime.GOMAXPROCS(0)/2) }

// saltedPassword is PBKDF2-HMAC-SHA-256 (RFC 8018 section 5.2) of password and salt with iters
// iterations, for a key of one block (32 bytes, SHA-256's size, as SCRAM-SHA-256 uses it):
// U1 = HMAC(password, salt || INT(1)), Ui = HMAC(password, Ui-1), the key is U1 xor ... xor
// Uiters. It is crypto/pbkdf2's computation, written here so that it stops, with ctx's error,
// within checkEvery iterations of ctx's end.
func saltedPassword(ctx context.Context, password string, salt []byte, iters int) ([sha256.Size]byte, error) {
	var t [sha256.Size]byte
	mac := hmac.New(sha256.New, []byte(password))
	mac.Write(salt)
	var one [4]byte
	binary.BigEndian.PutUint32(one[:], 1)
	mac.Write(one[:])
	u := mac.Sum(make([]byte, 0, sha256.Size))
	copy(t[:], u)
	for i := 2; i <= iters; i++ {
		if i%checkEvery == 0 {
			if err := ctx.Err(); err != nil {
				return [sha256.Size]byte{}, err
			}
			runtime.Gosched()
		}
		mac.Reset()
		mac.Write(u)
		u = mac.Sum(u[:0])
		for j := range t {
			t[j] ^= u[j]
		}
	}
	return t, nil
}

// deriveKeys derives the keys of password for kf, stopping when ctx ends.
func deriveKeys(ctx context.Context, password string, kf keyFactors) (derivedKeys, error) {
	sp, err := saltedPassword(ctx, password, []byte(kf.salt), kf.iters)
	if err != nil {
		return derivedKeys{}, err
	}
	var dk derivedKeys
	m := hmac.New(sha256.New, sp[:])
	m.Write([]byte("Client Key"))
	m.Sum(dk.clientKey[:0])
	dk.storedKey = sha256.Sum256(dk.clientKey[:])
	m = hmac.New(sha256.New, sp[:])
	m.Write([]byte("Server Key"))
	m.Sum(dk.serverKey[:0])
	return dk, nil
}

// startFlight starts the derivation of kf for g, with one waiter of server: at once if server
// has a free slot, else when it gets one. Keys.mu is held.
func (k *Keys) startFlight(g *gen, kf keyFactors, server string) *flight {
	ctx, cancel := context.WithCancel(context.Background())
	fl := &flight{waiters: 1, ctx: ctx, cancel: cancel, done: make(chan struct{}), g: g, kf: kf}
	g.factors[kf] = &factor{state: pending, flight: fl}
	k.enqueue(fl, server)
	return fl
}

// join adds a waiter of server to fl. A flight that does not run yet also waits for a slot of
// server: it runs with the first slot it gets, of any of its waiters' servers, so that a server
// whose slots are taken delays no exchange with another server that needs the same keys.
// Keys.mu is held.
func (k *Keys) join(fl *flight, server string) {
	fl.waiters++
	if !fl.running && !slices.Contains(fl.queued, server) {
		k.enqueue(fl, server)
	}
}

// enqueue runs fl with a slot of server if one is free, else puts it in server's queue.
// Keys.mu is held.
func (k *Keys) enqueue(fl *flight, server string) {
	s := k.servers[server]
	if s == nil {
		s = &serverSlots{}
		k.servers[server] = s
	}
	if s.running < k.cfg.PerServer {
		k.launch(fl, server, s)
		return
	}
	s.queue = append(s.queue, fl)
	fl.queued = append(fl.queued, server)
}

// launch takes a slot of server (s) for fl, takes fl out of the queues it waits in, and starts
// its derivation. Keys.mu is held.
func (k *Keys) launch(fl *flight, server string, s *serverSlots) {
	s.running++
	k.dequeue(fl)
	fl.running, fl.slot = true, server
	go k.run(fl)
}

// dequeue takes fl out of the queues it waits in, and drops the serverSlots left with nothing
// running or waiting. Keys.mu is held.
func (k *Keys) dequeue(fl *flight) {
	for _, server := range fl.queued {
		s := k.servers[server]
		s.queue = slices.DeleteFunc(s.queue, func(q *flight) bool { return q == fl })
		if s.running == 0 && len(s.queue) == 0 {
			delete(k.servers, server)
		}
	}
	fl.queued = nil
}

// release gives back fl's slot: the oldest flight waiting for its server runs with it, or the
// server's serverSlots go when nothing runs or waits there any more. Keys.mu is held.
func (k *Keys) release(fl *flight) {
	s := k.servers[fl.slot]
	s.running--
	if len(s.queue) > 0 {
		k.launch(s.queue[0], fl.slot, s) // launch takes it out of the queue
		return
	}
	if s.running == 0 {
		delete(k.servers, fl.slot)
	}
}

// run derives fl's keyFactors for its gen, unless fl's context ends first, records the outcome:
// the keys in the gen (derived), or, for a stopped or failed derivation, nothing (the keyFactors
// are absent again, for a later exchange to derive), and gives back fl's slot.
func (k *Keys) run(fl *flight) {
	defer close(fl.done)
	defer fl.cancel()
	h := testHooks.Load()
	if h != nil {
		h.start(fl.slot)
	}
	start := time.Now()
	keys, err := deriveKeys(fl.ctx, fl.g.password, fl.kf)
	took := time.Since(start)
	if h != nil {
		h.end(fl.slot, err == nil)
	}
	k.mu.Lock()
	f := fl.g.factors[fl.kf]
	mine := f != nil && f.flight == fl
	switch {
	case err != nil && mine:
		delete(fl.g.factors, fl.kf)
	case err == nil && mine:
		f.state, f.keys, f.flight = derived, keys, nil
	}
	fl.keys, fl.err = keys, err
	k.release(fl)
	k.mu.Unlock()
	if err == nil && k.cfg.OnDerive != nil {
		k.cfg.OnDerive(took)
	}
}

// wait waits for fl, g's derivation of kf, until ctx ends. An exchange that stops waiting leaves
// the flight; the last one to leave stops it, and takes it out of g at once: an exchange that
// comes later starts a derivation of its own.
func (k *Keys) wait(ctx context.Context, g *gen, kf keyFactors, fl *flight) (derivedKeys, error) {
	select {
	case <-fl.done:
		return fl.keys, fl.err
	case <-ctx.Done():
	}
	k.mu.Lock()
	fl.waiters--
	if fl.waiters == 0 {
		fl.cancel()
		if f := g.factors[kf]; f != nil && f.flight == fl {
			delete(g.factors, kf)
		}
		if !fl.running { // it waited for a slot: it never will run
			k.dequeue(fl)
			fl.err = context.Canceled
			close(fl.done)
		}
	}
	k.mu.Unlock()
	return derivedKeys{}, ctx.Err()
}
