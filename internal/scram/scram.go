// Package scram is the client side of SCRAM-SHA-256 and SCRAM-SHA-256-PLUS for PostgreSQL's SASL
// authentication (RFC 5802, RFC 7677; PostgreSQL doc sasl-authentication.html; libpq
// src/interfaces/libpq/fe-auth-scram.c), with the key cache of RFC 7677 section 4: the PBKDF2
// derivation of SaltedPassword, and from it ClientKey, StoredKey and ServerKey, runs once per (user,
// password, salt, iteration count, hash), not once per connection.
//
// The conversation is this package's own (RFC 5802 sections 3 and 7, as libpq's fe-auth-scram.c
// writes it), and so is the PBKDF2 derivation: a derivation has to stop when no connection waits
// for it any more, which neither github.com/xdg-go/scram's client nor crypto/pbkdf2 allows
// (derive.go). What is here for PostgreSQL and a connection pool: the empty SCRAM user name that
// PostgreSQL expects (the user is in the StartupMessage), PostgreSQL's password preparation
// (saslprep.go: pg_saslprep, or the password as it is where that fails), an upper bound on the
// server's iteration count checked before any derivation, a strict reading of the server's
// messages, one derivation for a herd of connections that miss the cache together, a
// derivation waited for only as long as the caller's context allows and stopped when no
// exchange waits for it, at most Config.PerServer derivations at once per server of a Keys
// (nothing shared between Keys, so that a server that asks for costly derivations delays only
// the exchanges with it, as libpq, where each connection derives on its own), and a cache
// bounded in entries and in salts per entry, whose keys count as cached only once a server has
// proven it knows them (a valid ServerSignature) and go as soon as an exchange with them fails.
//
// Errors name what is wrong; none carries a password, a key, a salt or a nonce.
package scram

import (
	"container/list"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"sync"
	"sync/atomic"
	"time"

	xscram "github.com/xdg-go/scram"
)

// The SASL mechanism names PostgreSQL offers in AuthenticationSASL (PostgreSQL doc
// sasl-authentication.html; RFC 7677, RFC 5802 section 4 for the -PLUS suffix).
const (
	MechanismSHA256     = "SCRAM-SHA-256"
	MechanismSHA256Plus = "SCRAM-SHA-256-PLUS"
)

const (
	defaultMaxEntries = 64
	// defaultMaxIterations is pgx's cap (pgconn/auth_scram.go, maxScramIterations).
	defaultMaxIterations = 10_000_000
	// maxFactors is the number of (salt, iteration count) pairs one entry keeps.
	maxFactors = 8
	// hashName is the part of a cache key that names the hash: SCRAM-SHA-256 and
	// SCRAM-SHA-256-PLUS derive the same keys, so they share entries.
	hashName = "SHA-256"
)

// Config sets the bounds of a Keys. The zero value is usable.
type Config struct {
	MaxEntries    int // (user, password) entries kept; 0 = 64
	MaxIterations int // the largest iteration count a server may ask for; 0 = 10_000_000 (pgx's cap)
	// PerServer is how many derivations run at once for one server (Start's server); the
	// others wait for one of its slots as long as an exchange waits for them. 0 = half of
	// GOMAXPROCS as it is in NewKeys, at least 1 (derive.go, defaultPerServer).
	PerServer int
	// OnDerive, if set, is called after each PBKDF2 derivation that completed with how long it
	// took (for metrics), not for one that was stopped. It is called on the goroutine that ran the
	// derivation, and possibly from several goroutines at once.
	OnDerive func(time.Duration)
}

// Keys starts SCRAM exchanges and keeps the keys they derive (RFC 7677 section 4). It is safe for
// concurrent use.
//
// An entry is keyed by an HMAC-SHA-256, under a random secret of this Keys, of the hash name, the
// user and the password, so the map's keys reveal nothing of the password. It holds the prepared
// password and, per (salt, iteration count), its state: being derived, derived (ClientKey,
// StoredKey and ServerKey kept, never SaltedPassword), or verified (an exchange with these keys
// got a valid ServerSignature).
type Keys struct {
	cfg    Config
	secret [32]byte

	mu      sync.Mutex
	closed  bool
	entries map[[32]byte]*list.Element // of *entry
	lru     *list.List                 // most recently started at the front
	// servers are the slots of the servers with a derivation that runs or waits (derive.go);
	// bounded by the exchanges that wait, empty when none does.
	servers map[string]*serverSlots
}

// entry is the cache of one (user, password).
type entry struct {
	key [32]byte
	gen *gen
}

// factorState is how far the keys of one keyFactors have come in a gen.
type factorState uint8

const (
	pending  factorState = iota + 1 // a derivation is running (factor.flight)
	derived                         // ClientKey, StoredKey and ServerKey are in factor.keys
	verified                        // and a server proved it knows them (ServerSignature)
)

// keyFactors are what a server's first message gives the derivation: the salt and the
// iteration count.
type keyFactors struct {
	salt  string
	iters int
}

// factor is the state of one keyFactors in a gen.
type factor struct {
	state  factorState
	keys   derivedKeys // derived or verified
	flight *flight     // pending
}

// gen is the prepared password of an entry with what was derived from it. An entry replaces its
// gen with a fresh one when the gen is full (maxFactors) or an exchange with it fails; exchanges
// that started with the old gen keep it.
type gen struct {
	password string // prepared (SASLprep)

	// Guarded by Keys.mu.
	factors map[keyFactors]*factor
	dead    bool // an exchange with this gen failed: nothing in it is to be used again
}

// NewKeys returns an empty Keys. MaxEntries, MaxIterations or PerServer of 0 (or less) take the
// defaults.
func NewKeys(cfg Config) *Keys {
	if cfg.MaxEntries <= 0 {
		cfg.MaxEntries = defaultMaxEntries
	}
	if cfg.MaxIterations <= 0 {
		cfg.MaxIterations = defaultMaxIterations
	}
	if cfg.PerServer <= 0 {
		cfg.PerServer = defaultPerServer()
	}
	k := &Keys{cfg: cfg, entries: make(map[[32]byte]*list.Element), lru: list.New(), servers: make(map[string]*serverSlots)}
	_, _ = rand.Read(k.secret[:]) // crypto/rand.Read never fails (Go 1.24+)
	return k
}

// Close drops every entry. Exchanges already started finish with the keys they hold. Start after
// Close still works but caches nothing: every exchange derives its own keys.
func (k *Keys) Close() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.closed = true
	clear(k.entries)
	k.lru.Init()
}

// Len returns the number of (user, password) entries kept.
func (k *Keys) Len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.entries)
}

// EndPointBinding returns the tls-server-end-point channel binding data of a TLS connection, for
// Start with MechanismSHA256Plus: the hash of the server's certificate as RFC 5929 section 4.1
// says, with SHA-256 for certificates signed with MD5 or SHA-1 (PostgreSQL's
// be_tls_get_certificate_hash, libpq's pgtls_get_peer_certificate_hash do the same). It fails for a
// connection without a peer certificate or a signature algorithm without a hash (Ed25519).
func EndPointBinding(cs *tls.ConnectionState) ([]byte, error) {
	cb, err := xscram.NewTLSServerEndpointBinding(cs)
	if err != nil {
		// xdg-go/scram's messages name the missing state or the signature algorithm, nothing secret.
		return nil, fmt.Errorf("SCRAM channel binding (tls-server-end-point): %w", err)
	}
	return cb.Data, nil
}

// entryKey is HMAC-SHA-256 under k.secret of the hash name, the user and the password, each
// preceded by its length.
func (k *Keys) entryKey(user, password string) [32]byte {
	m := hmac.New(sha256.New, k.secret[:])
	for _, s := range [...]string{hashName, user, password} {
		writeLenPrefixed(m, s)
	}
	var key [32]byte
	m.Sum(key[:0])
	return key
}

func writeLenPrefixed(h hash.Hash, s string) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(s)))
	h.Write(n[:])
	h.Write([]byte(s))
}

// newGen returns a gen for password, prepared as PostgreSQL prepares it (SASLprep: the password
// as it is where pg_saslprep fails, as libpq and the server do).
func newGen(password string) *gen {
	prepared, _ := SASLprep(password)
	return &gen{password: prepared, factors: make(map[keyFactors]*factor)}
}

// genFor returns the gen of the entry for (user, password), making the entry if there is none (and
// evicting the least recently started past MaxEntries), and whether it is shared (false after
// Close).
func (k *Keys) genFor(key [32]byte, password string) (*gen, bool) {
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return newGen(password), false
	}
	if el, ok := k.entries[key]; ok {
		k.lru.MoveToFront(el)
		g := el.Value.(*entry).gen
		k.mu.Unlock()
		return g, true
	}
	k.mu.Unlock()

	g := newGen(password) // SASLprep outside the lock
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return g, false
	}
	if el, ok := k.entries[key]; ok { // made meanwhile by another Start
		k.lru.MoveToFront(el)
		return el.Value.(*entry).gen, true
	}
	k.entries[key] = k.lru.PushFront(&entry{key: key, gen: g})
	for k.lru.Len() > k.cfg.MaxEntries {
		old := k.lru.Remove(k.lru.Back()).(*entry)
		delete(k.entries, old.key)
	}
	return g, true
}

// testHooks, set by tests only, are called around each PBKDF2 derivation with the server whose
// slot it holds: start as it begins, end as it ends (completed false when it was stopped).
var testHooks atomic.Pointer[derivationHooks]

type derivationHooks struct {
	start func(server string)
	end   func(server string, completed bool)
}

// errNoPassword is what libpq says (PQnoPasswordSupplied) when it has no password for SCRAM;
// PostgreSQL never stores an empty password, so an empty one cannot succeed.
var errNoPassword = errors.New("SCRAM authentication needs a password, and the password is empty")
