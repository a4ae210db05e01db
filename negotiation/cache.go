package negotiation

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Key identifies what one cache entry is about: a host of the connection string as written,
// with its port, and (for GSS) the client principal.
type Key struct {
	Host      string
	HostAddr  string // hostaddr, when given: the address is part of the server's identity
	Port      uint16
	Principal string
}

// Cache remembers, per [Key], what servers answered, for a TTL. It also makes concurrent connects
// to a host whose answer is unknown wait for a single probe. It is safe for concurrent use; the
// zero value is not usable, use [NewCache].
//
// What a connect reads ([Cache.Known], [Cache.Remembered], the check of [Cache.BeginRefresh] that
// finds nothing to do) takes no lock: the keys are an immutable map and each key's entry an
// immutable value, both behind atomic pointers. A writer takes mu, copies what it changes and
// publishes the copy: the map when it adds a key, the entry at every change.
//
// The keys are the hosts of the connection strings that share the cache, with the client
// principals their GSS credentials named: nothing a server or a resolver chooses. Still, the
// copy that adds a key leaves out the keys whose answers have all expired (no probe or refresh
// running for them), and at most [MaxCacheKeys] are kept: a full cache forgets the quarter
// learned longest ago. A key forgotten is negotiated again, as at the first connect: no answer
// is ever assumed, so forgetting one never turns encryption off.
type Cache struct {
	ttl time.Duration
	now func() time.Time

	entries atomic.Pointer[map[Key]*slot] // never nil after NewCache; replaced, never changed
	mu      sync.Mutex                    // held by writers
}

// MaxCacheKeys caps the keys (host, port, hostaddr and principal) a [Cache] holds. Only keys
// with a probe or a refresh running are kept past it (as many as the connects under way).
const MaxCacheKeys = 1024

// slot holds the current entry of one key. The entry it points to is never changed: a writer
// stores a changed copy, with Cache.mu held.
type slot struct {
	e atomic.Pointer[entry]
}

type entry struct {
	ssl, gss       Answer
	sslExp, gssExp time.Time
	gssGen         uint64
	direct         Answer // whether direct TLS is taken (Known.Direct)
	directExp      time.Time
	// A first sign that GSS cannot succeed (StrikeGSS), with the credentials generation it came
	// with, until when it counts.
	strikeGen uint64
	strikeExp time.Time
	// probe is non-nil while one connect probes this key; it is closed when the probe ends.
	probe chan struct{}
	// gotIn: a connect to k got in since an answer of this entry last changed (GotIn). A
	// rejection of a plan made from the answers is then news: the server changed since.
	gotIn bool
	// refresh is the background refresh of a negative answer running for this key, if any;
	// no other begins before refreshAfter (cache_refresh.go).
	refresh      *Refresh
	refreshAfter time.Time
}

// NewCache returns a cache whose answers are trusted for ttl. A ttl of zero or less disables
// remembering (every connect negotiates as libpq does), but concurrent probes are still shared.
func NewCache(ttl time.Duration) *Cache {
	c := &Cache{ttl: ttl, now: time.Now}
	c.entries.Store(&map[Key]*slot{})
	return c
}

// Known returns what is remembered for k and not expired. It takes no lock and does not
// allocate.
func (c *Cache) Known(k Key) Known {
	return c.known(k)
}

// load returns k's current entry, nil when there is none; without a lock.
func (c *Cache) load(k Key) *entry {
	if s := (*c.entries.Load())[k]; s != nil {
		return s.e.Load()
	}
	return nil
}

// edit returns k's slot, added when missing, and a copy of its entry for the caller to change
// and store (s.e.Store(&e)). c.mu is held.
func (c *Cache) edit(k Key) (s *slot, e entry) {
	m := *c.entries.Load()
	if s = m[k]; s == nil {
		next := c.kept(m)
		s = new(slot)
		s.e.Store(new(entry))
		next[k] = s
		c.entries.Store(&next)
	}
	return s, *s.e.Load()
}

// kept returns a copy of m, with room for one key more, without the keys that hold nothing
// any more (idle) and, when that leaves MaxCacheKeys or more, without the quarter of the others
// learned longest ago. c.mu is held.
func (c *Cache) kept(m map[Key]*slot) map[Key]*slot {
	now := c.now()
	next := make(map[Key]*slot, len(m)+1)
	for k, s := range m {
		if !s.e.Load().idle(now) {
			next[k] = s
		}
	}
	if len(next) < MaxCacheKeys {
		return next
	}
	var learned []time.Time
	for _, s := range next {
		if e := s.e.Load(); e.probe == nil && e.refresh == nil {
			learned = append(learned, e.learned())
		}
	}
	if len(learned) == 0 {
		return next
	}
	slices.SortFunc(learned, time.Time.Compare)
	limit := learned[max(len(learned)/4, 1)-1]
	for k, s := range next {
		if e := s.e.Load(); e.probe == nil && e.refresh == nil && !e.learned().After(limit) {
			delete(next, k)
		}
	}
	return next
}

// idle reports whether e holds nothing at now: every answer, strike and wait for a refresh
// expired, and no probe or refresh running.
func (e *entry) idle(now time.Time) bool {
	return e.probe == nil && e.refresh == nil &&
		!now.Before(e.sslExp) && !now.Before(e.gssExp) && !now.Before(e.directExp) &&
		!now.Before(e.strikeExp) && !now.Before(e.refreshAfter)
}

// learned is when e last learned something: the latest of its expiries (each is a learning
// plus the TTL).
func (e *entry) learned() time.Time {
	t := e.sslExp
	for _, x := range [...]time.Time{e.gssExp, e.directExp, e.strikeExp, e.refreshAfter} {
		if x.After(t) {
			t = x
		}
	}
	return t
}

func (c *Cache) known(k Key) Known {
	e := c.load(k)
	if e == nil {
		return Known{}
	}
	var kn Known
	now := c.now()
	if e.ssl != AnswerUnknown && now.Before(e.sslExp) {
		kn.SSL = e.ssl
	}
	if e.gss != AnswerUnknown && now.Before(e.gssExp) {
		kn.GSS, kn.GSSGeneration = e.gss, e.gssGen
	}
	if e.direct != AnswerUnknown && now.Before(e.directExp) {
		kn.Direct = e.direct
	}
	return kn
}

// BeginProbe claims the probe of k for a caller that decided to probe from seen, what [Cache.Known]
// returned. It returns a Probe when the caller is the one to probe and must end it
// ([Probe.End]). Otherwise it returns a channel that is closed when the running probe ends, or
// already closed when what is known of k is no longer seen (a probe ended between the caller's
// Known and this call); either way the caller then decides again from [Cache.Known]. Checking
// seen under the same lock as the claim is what makes one probe per key: without it a caller
// that read Known just before another probe ended would probe a second time. It does not
// allocate unless it makes the caller the prober.
func (c *Cache) BeginProbe(k Key, seen Known) (wait <-chan struct{}, p *Probe) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.known(k) != seen {
		return decideAgain, nil
	}
	s, e := c.edit(k)
	if e.probe != nil {
		return e.probe, nil
	}
	e.probe = make(chan struct{})
	s.e.Store(&e)
	return nil, &Probe{c: c, k: k, ch: e.probe}
}

// decideAgain is a closed channel: "decide again now".
var decideAgain = func() chan struct{} { ch := make(chan struct{}); close(ch); return ch }()

// Probe is one connect's claim on the probe of a key: the others wait until it ends.
type Probe struct {
	c    *Cache
	k    Key
	ch   chan struct{}
	once sync.Once
}

// End releases the waiting connects. It may be called more than once, and on a nil Probe; it
// never ends a later probe of the same key.
func (p *Probe) End() {
	if p == nil {
		return
	}
	p.once.Do(func() {
		p.c.mu.Lock()
		defer p.c.mu.Unlock()
		if s := (*p.c.entries.Load())[p.k]; s != nil && s.e.Load().probe == p.ch {
			e := *s.e.Load()
			e.probe = nil
			s.e.Store(&e)
		}
		close(p.ch)
	})
}

func (c *Cache) remembers() bool { return c.ttl > 0 }

// SetSSL remembers the answer to SSLRequest.
func (c *Cache) SetSSL(k Key, a Answer) {
	if c.ttl <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s, e := c.edit(k)
	e.gotIn = e.gotIn && e.ssl == a
	e.ssl, e.sslExp = a, c.now().Add(c.ttl)
	s.e.Store(&e)
}

// SetDirect remembers whether the server takes direct TLS: AnswerYes after a direct TLS
// connection succeeded, AnswerNo after a direct TLS handshake failed.
func (c *Cache) SetDirect(k Key, a Answer) {
	if c.ttl <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s, e := c.edit(k)
	e.direct, e.directExp = a, c.now().Add(c.ttl)
	s.e.Store(&e)
}

// RenewDirect notes a direct TLS connection that succeeded: it proves the answers behind it
// (the server takes TLS and direct TLS), which are learned again once half their TTL has gone;
// until then it takes no lock and does not allocate, as it runs on every such connect.
func (c *Cache) RenewDirect(k Key) {
	if c.ttl <= 0 {
		return
	}
	now := c.now()
	if e := c.load(k); e != nil && e.direct == AnswerYes && e.ssl == AnswerYes &&
		e.directExp.Sub(now) > c.ttl/2 && e.sslExp.Sub(now) > c.ttl/2 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s, e := c.edit(k)
	e.ssl, e.sslExp = AnswerYes, now.Add(c.ttl)
	e.direct, e.directExp = AnswerYes, now.Add(c.ttl)
	s.e.Store(&e)
}

// LearnDirect remembers that the server takes direct TLS, as shown by a connection over
// SSLRequest (the server selected ALPN postgresql and reported server_version 17 or later),
// unless a failed direct handshake is remembered: an answer seen on the SSLRequest path does
// not overrule one seen on the direct path, which would make every connect try direct TLS and
// fail again.
func (c *Cache) LearnDirect(k Key) {
	if c.ttl <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s, e := c.edit(k)
	if e.direct == AnswerNo && c.now().Before(e.directExp) {
		return
	}
	if e.direct == AnswerYes && c.now().Before(e.directExp) {
		return // nothing new: no copy of the entry
	}
	e.direct, e.directExp = AnswerYes, c.now().Add(c.ttl)
	s.e.Store(&e)
}

// SetGSS remembers whether GSSAPI encryption could be established with the credentials of
// generation gen.
func (c *Cache) SetGSS(k Key, a Answer, gen uint64) {
	if c.ttl <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s, e := c.edit(k)
	e.gotIn = e.gotIn && e.gss == a && e.gssGen == gen
	e.gss, e.gssExp, e.gssGen = a, c.now().Add(c.ttl), gen
	if a == AnswerYes {
		e.strikeExp = time.Time{}
	}
	s.e.Store(&e)
}

// StrikeGSS notes a sign that GSS encryption cannot succeed for k with the credentials of
// generation gen which one event on the path could also make (see gssStrike). The second in a
// row within the TTL, with the same credentials, is remembered as SetGSS(k, AnswerNo, gen) is;
// StrikeGSS reports whether this one was. A success (SetGSS AnswerYes) clears the first.
func (c *Cache) StrikeGSS(k Key, gen uint64) (remembered bool) {
	if c.ttl <= 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s, e := c.edit(k)
	defer func() { s.e.Store(&e) }()
	now := c.now()
	if e.strikeGen == gen && now.Before(e.strikeExp) {
		e.strikeExp = time.Time{}
		e.gotIn = e.gotIn && e.gss == AnswerNo && e.gssGen == gen
		e.gss, e.gssExp, e.gssGen = AnswerNo, now.Add(c.ttl), gen
		return true
	}
	e.strikeGen, e.strikeExp = gen, now.Add(c.ttl)
	return false
}

// Forget drops what is remembered for k (an answer that turned out wrong).
func (c *Cache) Forget(k Key) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := (*c.entries.Load())[k]; s != nil {
		e := *s.e.Load()
		e.ssl, e.gss, e.direct = AnswerUnknown, AnswerUnknown, AnswerUnknown
		e.gotIn = false
		s.e.Store(&e)
	}
}

// GotIn notes that a connect to k got in. Until an answer remembered for k changes (Set*,
// a second strike, Forget), a plan made from the answers that meets a rejection then meets
// something new, which a change of the server may explain ([Cache.GotInSince]). It takes no
// lock and does not allocate once noted, as it runs on every connect that gets in.
func (c *Cache) GotIn(k Key) {
	if c.ttl <= 0 {
		return
	}
	if e := c.load(k); e == nil || e.gotIn {
		return // nothing remembered to confirm, or noted already
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s, e := c.edit(k)
	e.gotIn = true
	s.e.Store(&e)
}

// GotInSince reports whether a connect to k got in ([Cache.GotIn]) since an answer remembered
// for k last changed. It takes no lock.
func (c *Cache) GotInSince(k Key) bool {
	e := c.load(k)
	return e != nil && e.gotIn
}
