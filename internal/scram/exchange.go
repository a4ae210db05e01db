package scram

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
)

// Exchange is one SCRAM authentication exchange: Start, ClientFirst, ServerFirst, ServerFinal (RFC
// 5802 section 3; PostgreSQL doc sasl-authentication.html, "SCRAM-SHA-256 Authentication"). It is
// for one connection and not safe for concurrent use.
type Exchange struct {
	keys   *Keys
	server string   // Start's server: whose slots a derivation for this exchange waits for
	key    [32]byte // the entry's key
	keyed  bool     // false after Close: nothing is cached
	gen    *gen

	password string // for a fresh gen when the gen died (rebind)

	gs2         string // GS2 header: "n,,", "y,," or "p=tls-server-end-point,,"
	cb          []byte // channel binding data ('p')
	clientFirst string
	nonce       string // the client nonce (r= of client-first-message)

	state     exchangeState
	kf        keyFactors
	serverSig [sha256.Size]byte // expected in server-final-message
	cached    bool
}

// nonceLen is the client nonce's length in random bytes before base64, libpq's
// (SCRAM_RAW_NONCE_LEN, fe-auth-scram.c): 24 printable characters.
const nonceLen = 18

type exchangeState uint8

const (
	started   exchangeState = iota // client-first-message made
	finalSent                      // client-final-message made
	done                           // server signature verified
	failed
)

// Start begins one exchange. mechanism is MechanismSHA256 or MechanismSHA256Plus. cb is the channel
// binding data for -PLUS (tls-server-end-point: the hash of the server's certificate per RFC 5929
// section 4.1, SHA-256 for MD5/SHA-1 signatures; see EndPointBinding) and must be nil for
// SCRAM-SHA-256; advertise is true when the client could bind (TLS) but the server offered no
// -PLUS: the GS2 flag 'y' instead of 'n' (RFC 5802 section 6). It fails for another mechanism, for
// cb given with SCRAM-SHA-256 or missing with -PLUS, for advertise with -PLUS, and for an empty
// password (libpq refuses it too: "no password supplied"). user is used only to key the cache: the
// SCRAM user name sent is empty, as libpq sends it. server names the server the exchange is
// with, as the connection reached it (network and address: "tcp 192.0.2.1:5432", "unix
// /tmp/.s.PGSQL.5432"): a derivation this exchange needs waits only for the derivations of the
// same server (Config.PerServer). The keys cached are the same for every server.
func (k *Keys) Start(server, mechanism, user, password string, cb []byte, advertise bool) (*Exchange, error) {
	gs2 := "n,,"
	switch mechanism {
	case MechanismSHA256:
		if cb != nil {
			return nil, errors.New("SCRAM: channel binding data was given for SCRAM-SHA-256, which binds nothing; it is for SCRAM-SHA-256-PLUS")
		}
		if advertise {
			gs2 = "y,,"
		}
	case MechanismSHA256Plus:
		if len(cb) == 0 {
			return nil, errors.New("SCRAM-SHA-256-PLUS needs the tls-server-end-point channel binding data (RFC 5929 section 4.1), and none was given")
		}
		if advertise {
			return nil, errors.New("SCRAM: the GS2 flag 'y' (client could bind, server offered no -PLUS) does not go with SCRAM-SHA-256-PLUS, which binds")
		}
		gs2 = "p=tls-server-end-point,,"
	default:
		return nil, fmt.Errorf("SCRAM mechanism %q is not supported (want %s or %s)", clip(mechanism), MechanismSHA256, MechanismSHA256Plus)
	}
	if password == "" {
		return nil, errNoPassword
	}
	var raw [nonceLen]byte
	_, _ = rand.Read(raw[:]) // crypto/rand.Read never fails (Go 1.24+)
	e := &Exchange{keys: k, server: server, key: k.entryKey(user, password), password: password, gs2: gs2,
		cb: append([]byte(nil), cb...), nonce: base64.StdEncoding.EncodeToString(raw[:])}
	e.gen, e.keyed = k.genFor(e.key, password)
	e.clientFirst = gs2 + "n=,r=" + e.nonce
	return e, nil
}

// ClientFirst returns client-first-message, the data of SASLInitialResponse: GS2 header, an empty
// user and the client nonce, for example "n,,n=,r=<nonce>".
func (e *Exchange) ClientFirst() []byte { return []byte(e.clientFirst) }

// ServerFirst takes server-first-message (from AuthenticationSASLContinue) and returns
// client-final-message (for SASLResponse). It checks the message, the nonce, the salt and the
// iteration count (>= 1 and <= MaxIterations) BEFORE deriving; a derivation is waited for only
// until ctx ends (ctx.Err() returned, wrapped), and is stopped when no exchange waits for it any
// more. Concurrent exchanges that need the same keys wait for one derivation; at most
// Config.PerServer derivations run at once for the exchange's server. It may be called once.
func (e *Exchange) ServerFirst(ctx context.Context, msg []byte) ([]byte, error) {
	if e.state != started {
		return nil, fmt.Errorf("SCRAM server-first-message received %s", e.state.after())
	}
	e.state = failed
	sf, err := parseServerFirst(msg, e.nonce, e.keys.cfg.MaxIterations)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("SCRAM key derivation not started: %w", err)
	}
	kf := keyFactors{salt: string(sf.salt), iters: sf.iters}
	keys, cached, fl := e.prepare(kf)
	if fl != nil {
		if keys, err = e.keys.wait(ctx, e.gen, kf, fl); err != nil {
			return nil, fmt.Errorf("SCRAM key derivation (PBKDF2, %d iterations) not waited for: %w", kf.iters, err)
		}
	}
	// RFC 5802 section 3: AuthMessage = client-first-message-bare + "," + server-first-message +
	// "," + client-final-message-without-proof.
	withoutProof := "c=" + base64.StdEncoding.EncodeToString(append([]byte(e.gs2), e.cb...)) + ",r=" + sf.nonce
	authMessage := e.clientFirst[len(e.gs2):] + "," + string(msg) + "," + withoutProof
	m := hmac.New(sha256.New, keys.storedKey[:])
	m.Write([]byte(authMessage))
	proof := m.Sum(nil)
	for i := range proof {
		proof[i] ^= keys.clientKey[i]
	}
	m = hmac.New(sha256.New, keys.serverKey[:])
	m.Write([]byte(authMessage))
	m.Sum(e.serverSig[:0])
	e.kf, e.cached, e.state = kf, cached, finalSent
	return []byte(withoutProof + ",p=" + base64.StdEncoding.EncodeToString(proof)), nil
}

// ServerFinal takes server-final-message (AuthenticationSASLFinal) and verifies the server signature
// (mutual authentication, RFC 5802 section 3). An 'e=' error from the server, a malformed message
// or a wrong signature is an error, and then nothing this exchange derived or used stays cached.
// On success the keys count as verified: later exchanges with the same salt and iteration count
// are Cached.
func (e *Exchange) ServerFinal(msg []byte) error {
	if e.state != finalSent {
		return fmt.Errorf("SCRAM server-final-message received %s", e.state.after())
	}
	e.state = failed
	sig, err := parseServerFinal(msg)
	if err != nil {
		e.keys.forget(e)
		return err
	}
	if !hmac.Equal(sig, e.serverSig[:]) {
		e.keys.forget(e)
		return ErrServerSignature
	}
	e.state = done
	e.keys.verify(e)
	return nil
}

// Cached reports, after ServerFirst, whether the keys came from the cache: they had been verified
// by an earlier exchange, and this one neither ran PBKDF2 nor waited for it.
func (e *Exchange) Cached() bool { return e.cached }

// Abandon is for an exchange that failed after ServerFirst without ServerFinal (the server sent an
// ErrorResponse instead of AuthenticationSASLFinal, e.g. a wrong password): nothing it derived or
// used stays cached. It does nothing before a successful ServerFirst (a derivation that ServerFirst
// stopped waiting for is stopped, unless another exchange waits for it), after ServerFinal (which forgets on its own failure and
// whose success proved the keys), or a second time.
func (e *Exchange) Abandon() {
	if e.state == finalSent {
		e.state = failed
		e.keys.forget(e)
	}
}

// prepare finds kf in the exchange's gen: its keys when they are there (cached when verified),
// else the flight deriving them, joined or started. An exchange whose gen died (another exchange
// with it failed) moves to a fresh gen of its own first; a full gen (maxFactors) is replaced in
// its entry by a fresh one, and keeps serving the exchanges that hold it.
func (e *Exchange) prepare(kf keyFactors) (keys derivedKeys, cached bool, fl *flight) {
	k := e.keys
	k.mu.Lock()
	defer k.mu.Unlock()
	if e.gen.dead {
		e.gen = newGen(e.password) // nothing else holds it: nothing else can kill it
	}
	f := e.gen.factors[kf]
	switch {
	case f == nil:
		if len(e.gen.factors) >= maxFactors && e.keyed {
			if el, ok := k.entries[e.key]; ok && el.Value.(*entry).gen == e.gen {
				el.Value.(*entry).gen = newGen(e.password)
			}
		}
		return derivedKeys{}, false, k.startFlight(e.gen, kf, e.server)
	case f.state == pending:
		k.join(f.flight, e.server)
		return derivedKeys{}, false, f.flight
	default:
		return f.keys, f.state == verified, nil
	}
}

// verify records that e's keys got a valid server signature.
func (k *Keys) verify(e *Exchange) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if f := e.gen.factors[e.kf]; !e.gen.dead && f != nil && f.state == derived {
		f.state = verified
	}
}

// forget drops what a failed exchange derived or used: its gen dies (exchanges holding it move to
// fresh gens of their own at ServerFirst), and the entry of its (user, password) goes, whatever gen it has now.
func (k *Keys) forget(e *Exchange) {
	k.mu.Lock()
	defer k.mu.Unlock()
	e.gen.dead = true
	if !e.keyed {
		return
	}
	if el, ok := k.entries[e.key]; ok {
		el.Value.(*entry).gen.dead = true
		k.lru.Remove(el)
		delete(k.entries, e.key)
	}
}

func (s exchangeState) after() string {
	switch s {
	case started:
		return "before server-first-message"
	case finalSent:
		return "a second time"
	case done:
		return "after the exchange ended"
	default:
		return "after the exchange failed"
	}
}
