package scram

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"runtime"
	"sync"
	"time"
)

// derivedKeys are what an exchange needs of a password (RFC 5802 section 3): ClientKey =
// HMAC(SaltedPassword, "Client Key"), StoredKey = H(ClientKey), ServerKey = HMAC(SaltedPassword,
// "Server Key"). SaltedPassword itself is not kept.
type derivedKeys struct {
	clientKey, storedKey, serverKey [sha256.Size]byte
}

// flight is one running derivation of a gen's keyFactors, shared by the exchanges that wait for
// it. It is stopped (cancel) when the last of them stops waiting.
type flight struct {
	waiters int // guarded by Keys.mu
	cancel  context.CancelFunc
	done    chan struct{} // closed when keys or err is set
	keys    derivedKeys
	err     error
}

// checkEvery is how many PBKDF2 iterations run between two looks at whether the derivation is
// still wanted: about a millisecond here.
const checkEvery = 4096

// slots bounds the derivations running at once in the process: GOMAXPROCS as it is at the first
// derivation. A derivation waits for a slot as long as some exchange waits for it.
var slots = sync.OnceValue(func() chan struct{} { return make(chan struct{}, runtime.GOMAXPROCS(0)) })

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

// startFlight starts the derivation of kf for g, with one waiter. Keys.mu is held.
func (k *Keys) startFlight(g *gen, kf keyFactors) *flight {
	ctx, cancel := context.WithCancel(context.Background())
	fl := &flight{waiters: 1, cancel: cancel, done: make(chan struct{})}
	g.factors[kf] = &factor{state: pending, flight: fl}
	go k.run(ctx, g, kf, fl)
	return fl
}

// run derives kf's keys for g once a slot is free, unless ctx (the flight's) ends first, and
// records the outcome: the keys in g (derived), or, for a stopped or failed derivation, nothing
// (the keyFactors are absent again, for a later exchange to derive).
func (k *Keys) run(ctx context.Context, g *gen, kf keyFactors, fl *flight) {
	defer close(fl.done)
	defer fl.cancel()
	var (
		keys derivedKeys
		err  error
		took time.Duration
	)
	sem := slots()
	select {
	case sem <- struct{}{}:
		h := testHooks.Load()
		if h != nil {
			h.start()
		}
		start := time.Now()
		keys, err = deriveKeys(ctx, g.password, kf)
		took = time.Since(start)
		<-sem
		if h != nil {
			h.end(err == nil)
		}
	case <-ctx.Done():
		err = ctx.Err()
	}
	k.mu.Lock()
	f := g.factors[kf]
	mine := f != nil && f.flight == fl
	switch {
	case err != nil && mine:
		delete(g.factors, kf)
	case err == nil && mine:
		f.state, f.keys, f.flight = derived, keys, nil
	}
	fl.keys, fl.err = keys, err
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
	}
	k.mu.Unlock()
	return derivedKeys{}, ctx.Err()
}
