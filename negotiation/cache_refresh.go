package negotiation

import (
	"sync"
	"time"
)

// MaxRefreshAge caps [Cache.RefreshAge]: with the default TTL of 5 minutes a server that gains
// a hostgssenc line or ssl=on goes unused for about a minute, not five.
const MaxRefreshAge = time.Minute

// RefreshAge is the age after which a remembered negative answer (GSS encryption could not be
// had, 'N' to SSLRequest) is asked again in the background when a connect's plan leaves its
// method out: min(TTL/2, [MaxRefreshAge]); 0 when the cache does not remember (TTL <= 0).
//
// Why: a negative answer hides a server that gains GSS encryption or TLS until it expires, and
// with sslmode=prefer or gssencmode=prefer that means plaintext where libpq, which remembers
// nothing, would already encrypt. Half the TTL leaves the refresh time to finish (it is bounded
// by connect_timeout or [RefreshTimeout]) before the answer would have expired anyway; the cap
// bounds the delay for long TTLs.
func (c *Cache) RefreshAge() time.Duration {
	if c.ttl <= 0 {
		return 0
	}
	return min(c.ttl/2, MaxRefreshAge)
}

// Remembered returns what is remembered about m (MethodSSL, or MethodGSS with whatever
// credentials it was learned with) for k, and when it was learned; AnswerUnknown and the zero
// time when nothing is or it expired. A negative answer that is asked again and confirmed is
// learned again: its time moves and its TTL restarts. It takes no lock.
func (c *Cache) Remembered(k Key, m Method) (a Answer, learned time.Time) {
	e := c.load(k)
	if e == nil {
		return AnswerUnknown, time.Time{}
	}
	a, exp := e.answer(m)
	if a == AnswerUnknown || !c.now().Before(exp) {
		return AnswerUnknown, time.Time{}
	}
	return a, exp.Add(-c.ttl)
}

func (e *entry) answer(m Method) (Answer, time.Time) {
	switch m {
	case MethodSSL:
		return e.ssl, e.sslExp
	case MethodGSS:
		return e.gss, e.gssExp
	}
	return AnswerUnknown, time.Time{}
}

// BeginRefresh claims the background refresh of k for the negative answers behind skipped (a
// plan's [Plan.Skipped]; gen the credentials generation of its input) that are at least
// [Cache.RefreshAge] old. It returns nil, without allocating or taking a lock, when there is
// nothing to refresh: the cache does not remember, no such answer is that old, a refresh of k
// is running (one at a time per key: concurrent connects must not each open a connection for
// the same question), or the last one of k ended less than RefreshAge ago (so that a refresh
// that learns nothing, a timeout, costs at most one connection per key and RefreshAge, not one
// per connect). The caller must End the Refresh it gets.
func (c *Cache) BeginRefresh(k Key, skipped []Method, gen uint64) *Refresh {
	if c.ttl <= 0 || len(skipped) == 0 {
		return nil
	}
	// Without the lock first: a warm connect finds nothing to do, and must not queue for it.
	if _, n := c.refreshDue(c.load(k), skipped, gen); n == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	due, n := c.refreshDue(c.load(k), skipped, gen) // again: another writer may have come first
	if n == 0 {
		return nil
	}
	s, e := c.edit(k)
	r := &Refresh{c: c, k: k, methods: due, n: uint8(n)}
	e.refresh = r
	s.e.Store(&e)
	return r
}

// refreshDue returns the methods of skipped whose negative answer in e is due for a refresh
// (see BeginRefresh), none when a refresh of e's key runs or ended less than RefreshAge ago.
func (c *Cache) refreshDue(e *entry, skipped []Method, gen uint64) (due [2]Method, n int) {
	if e == nil || e.refresh != nil {
		return due, 0
	}
	now := c.now()
	if now.Before(e.refreshAfter) {
		return due, 0
	}
	age := c.RefreshAge()
	for _, m := range skipped {
		a, exp := e.answer(m)
		if a != AnswerNo || !now.Before(exp) || now.Sub(exp.Add(-c.ttl)) < age {
			continue
		}
		if m == MethodGSS && e.gssGen != gen {
			continue // learned with other credentials: Decide did not use it
		}
		if n < len(due) {
			due[n] = m
			n++
		}
	}
	return due, n
}

// Refresh is the claim on the background refresh of one key (see [Cache.BeginRefresh]).
type Refresh struct {
	c       *Cache
	k       Key
	methods [2]Method
	n       uint8
	once    sync.Once
}

// Key returns the key being refreshed.
func (r *Refresh) Key() Key { return r.k }

// Methods returns the methods whose negative answer is to be asked again, in libpq's order.
func (r *Refresh) Methods() []Method { return r.methods[:r.n] }

// End releases the claim: another refresh of the key may begin, RefreshAge from now. It may be
// called more than once, and on a nil Refresh.
func (r *Refresh) End() {
	if r == nil {
		return
	}
	r.once.Do(func() {
		c := r.c
		c.mu.Lock()
		defer c.mu.Unlock()
		if s := (*c.entries.Load())[r.k]; s != nil && s.e.Load().refresh == r {
			e := *s.e.Load()
			e.refresh = nil
			e.refreshAfter = c.now().Add(c.RefreshAge())
			s.e.Store(&e)
		}
	})
}
