package scram

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	xscram "github.com/xdg-go/scram"
)

// Exchange is one SCRAM authentication exchange: Start, ClientFirst, ServerFirst, ServerFinal (RFC
// 5802 section 3; PostgreSQL doc sasl-authentication.html, "SCRAM-SHA-256 Authentication"). It is
// for one connection and not safe for concurrent use.
type Exchange struct {
	keys  *Keys
	key   [32]byte // the entry's key
	keyed bool     // false after Close: nothing is cached
	gen   *gen
	conv  *xscram.ClientConversation

	password  string // for a fresh Client when the gen died (rebind)
	binding   xscram.ChannelBinding
	advertise bool

	clientFirst string
	nonce       string // the client nonce (r= of client-first-message)

	state  exchangeState
	kf     xscram.KeyFactors
	cached bool
}

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
// SCRAM user name sent is empty, as libpq sends it.
func (k *Keys) Start(mechanism, user, password string, cb []byte, advertise bool) (*Exchange, error) {
	var binding xscram.ChannelBinding
	switch mechanism {
	case MechanismSHA256:
		if cb != nil {
			return nil, errors.New("SCRAM: channel binding data was given for SCRAM-SHA-256, which binds nothing; it is for SCRAM-SHA-256-PLUS")
		}
	case MechanismSHA256Plus:
		if len(cb) == 0 {
			return nil, errors.New("SCRAM-SHA-256-PLUS needs the tls-server-end-point channel binding data (RFC 5929 section 4.1), and none was given")
		}
		if advertise {
			return nil, errors.New("SCRAM: the GS2 flag 'y' (client could bind, server offered no -PLUS) does not go with SCRAM-SHA-256-PLUS, which binds")
		}
		binding = xscram.ChannelBinding{Type: xscram.ChannelBindingTLSServerEndpoint, Data: append([]byte(nil), cb...)}
	default:
		return nil, fmt.Errorf("SCRAM mechanism %q is not supported (want %s or %s)", clip(mechanism), MechanismSHA256, MechanismSHA256Plus)
	}
	if password == "" {
		return nil, errNoPassword
	}
	e := &Exchange{keys: k, key: k.entryKey(user, password), password: password, binding: binding, advertise: advertise}
	e.gen, e.keyed = k.genFor(e.key, password)
	e.conv = e.conversation(e.gen)
	first, err := e.conv.Step("")
	if err != nil { // xdg-go/scram's first step cannot fail
		return nil, errors.New("SCRAM client-first-message could not be made")
	}
	i := strings.LastIndex(first, ",r=")
	if i < 0 {
		return nil, errors.New("SCRAM client-first-message has no nonce")
	}
	e.clientFirst, e.nonce = first, first[i+len(",r="):]
	return e, nil
}

// conversation starts an xdg-go/scram conversation with g's Client: 'p' with the tls-server-end-point
// binding, 'y' when advertising, else 'n' (RFC 5802 section 6).
func (e *Exchange) conversation(g *gen) *xscram.ClientConversation {
	switch {
	case e.binding.IsSupported():
		return g.client.NewConversationWithChannelBinding(e.binding)
	case e.advertise:
		return g.client.NewConversationAdvertisingChannelBinding()
	default:
		return g.client.NewConversation()
	}
}

// ClientFirst returns client-first-message, the data of SASLInitialResponse: GS2 header, an empty
// user and the client nonce, for example "n,,n=,r=<nonce>".
func (e *Exchange) ClientFirst() []byte { return []byte(e.clientFirst) }

// ServerFirst takes server-first-message (from AuthenticationSASLContinue) and returns
// client-final-message (for SASLResponse). It checks the message, the nonce, the salt and the
// iteration count (>= 1 and <= MaxIterations) BEFORE deriving; a derivation is waited for only
// until ctx ends (ctx.Err() returned, wrapped); the derivation itself may finish in the background
// (bounded by the cap) and is then kept for the next exchange. Concurrent exchanges that need the
// same keys wait for one derivation. It may be called once.
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
	kf := xscram.KeyFactors{Salt: string(sf.salt), Iters: sf.iters}
	cached, derive, err := e.prepare(kf)
	if err != nil {
		return nil, err
	}
	if derive {
		g, k := e.gen, e.keys
		ch := g.flight.DoChan(flightKey(kf), func() (any, error) { return nil, k.derive(g, kf) })
		select {
		case r := <-ch:
			if r.Err != nil {
				// crypto/pbkdf2's errors are fixed texts (key length, FIPS 140 limits).
				return nil, fmt.Errorf("SCRAM key derivation (PBKDF2, %d iterations) failed: %w", kf.Iters, r.Err)
			}
		case <-ctx.Done():
			return nil, fmt.Errorf("SCRAM key derivation (PBKDF2, %d iterations) not waited for: %w", kf.Iters, ctx.Err())
		}
	}
	out, err := e.conv.Step(string(msg))
	if err != nil {
		// Unreachable after parseServerFirst; xdg-go/scram's parse errors quote the message (nonce,
		// salt), so its text is not passed on.
		return nil, errors.New("SCRAM server-first-message refused by the SCRAM library")
	}
	e.kf, e.cached, e.state = kf, cached, finalSent
	return []byte(out), nil
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
	if err := parseServerFinal(msg); err != nil {
		e.keys.forget(e)
		return err
	}
	if _, err := e.conv.Step(string(msg)); err != nil || !e.conv.Valid() {
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
// stopped waiting for stays, unverified), after ServerFinal (which forgets on its own failure and
// whose success proved the keys), or a second time.
func (e *Exchange) Abandon() {
	if e.state == finalSent {
		e.state = failed
		e.keys.forget(e)
	}
}

// prepare finds the state of kf in the exchange's gen and marks it pending when it has to be
// derived. An exchange whose gen died (another exchange with it failed) moves to a fresh Client of
// its own first; a full gen (maxFactors) is replaced in its entry by a fresh one, and keeps serving
// the exchanges that hold it.
func (e *Exchange) prepare(kf xscram.KeyFactors) (cached, derive bool, err error) {
	k := e.keys
	k.mu.Lock()
	if e.gen.dead {
		k.mu.Unlock()
		if err := e.rebind(); err != nil { // a gen of its own, which nothing else can kill
			return false, false, err
		}
		k.mu.Lock()
	}
	defer k.mu.Unlock()
	switch e.gen.factors[kf] {
	case verified:
		return true, false, nil
	case derived:
		return false, false, nil
	case absent:
		if len(e.gen.factors) >= maxFactors && e.keyed {
			if el, ok := k.entries[e.key]; ok && el.Value.(*entry).gen == e.gen {
				el.Value.(*entry).gen = newGen(e.password)
			}
		}
		e.gen.factors[kf] = pending
	}
	return false, true, nil
}

// rebind moves the exchange to a fresh Client of its own, continuing the conversation from the same
// client-first-message (the nonce is already sent): the dead gen's keys are not used.
func (e *Exchange) rebind() error {
	g := newGen(e.password)
	g.client.WithNonceGenerator(func() string { return e.nonce })
	conv := e.conversation(g)
	if first, err := conv.Step(""); err != nil || first != e.clientFirst {
		return errors.New("SCRAM conversation could not be continued with a fresh client")
	}
	e.gen, e.conv = g, conv
	return nil
}

// derive runs PBKDF2 for kf into g's Client (xdg-go/scram's map), unless it is there already, and
// reports the time to OnDerive. It runs on the singleflight's goroutine.
func (k *Keys) derive(g *gen, kf xscram.KeyFactors) error {
	k.mu.Lock()
	st := g.factors[kf]
	k.mu.Unlock()
	if st >= derived { // a derivation finished just before this flight began
		return nil
	}
	start := time.Now()
	_, err := g.client.GetStoredCredentialsWithError(kf)
	took := time.Since(start)
	k.mu.Lock()
	switch {
	case err != nil && g.factors[kf] == pending:
		delete(g.factors, kf)
	case err == nil && g.factors[kf] < derived:
		g.factors[kf] = derived
	}
	k.mu.Unlock()
	if err == nil && k.cfg.OnDerive != nil {
		k.cfg.OnDerive(took)
	}
	return err
}

// verify records that e's keys got a valid server signature.
func (k *Keys) verify(e *Exchange) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !e.gen.dead {
		e.gen.factors[e.kf] = verified
	}
}

// forget drops what a failed exchange derived or used: its gen dies (exchanges holding it move to
// fresh Clients at ServerFirst), and the entry of its (user, password) goes, whatever gen it has now.
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

// flightKey names kf for the singleflight of one gen.
func flightKey(kf xscram.KeyFactors) string {
	return strconv.Itoa(kf.Iters) + "," + kf.Salt
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
