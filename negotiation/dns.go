package negotiation

import (
	"context"
	"sync"
	"time"
)

// What a connect remembers of a host name's addresses (Config.DNSTTL). libpq and pgx resolve
// every host name at every connect (fe-connect.c, PQconnectPoll: pg_getaddrinfo_all for each
// host; pgconn.connectPreferred: LookupFunc); a connection storm then asks the resolver as often
// as it connects. pgbouncer caps the life of an answer at dns_max_ttl, 15 s by default; the
// connector keeps an answer that long by default, and:
//
//   - an answer is shared: connects that find a name unknown or expired at the same moment wait
//     for one lookup (each bounded by its own context and connect_timeout: one that gives up
//     looks up on its own);
//   - in the last fifth of its life, the first connect that uses it starts a lookup in the
//     background and goes on with it: the next connects find the new answer, none waits;
//   - a failed lookup is not remembered (the next connect asks again), and a failed background
//     lookup leaves the answer to expire;
//   - when every address of a remembered answer fails before the server answers (no socket:
//     refused, unreachable, timed out), the connect forgets it, asks again at once and tries
//     the addresses it has not tried yet.
//
// DNS time-to-live values are not read (the resolver behind LookupFunc does not give them);
// the bound is DNSTTL.
//
// The names are the connection string's own (Host.Host), one answer each: a resolver chooses
// the addresses of an answer, never a key, so the memory has no cap of its own beyond the
// string's hosts. An expired answer is replaced at the next connect to its host; a host no
// connect resolves any more has its expired answer dropped at the first lookup of another
// name at least DNSTTL after the last such sweep (dnsCache.sweep).

// dnsCache is the remembered addresses of the host names of one negotiator.
type dnsCache struct {
	ttl time.Duration
	now func() time.Time // time.Now; tests move it

	mu sync.Mutex
	m  map[string]*dnsEntry
	// sweepAt: the first get at or after it drops every expired answer (sweep).
	sweepAt time.Time
}

// dnsEntry is one host name's answer, and the lookup under way for it.
type dnsEntry struct {
	addrs      []string  // shared: never modified (callers clone before they shuffle)
	at         time.Time // when addrs were resolved; zero: none
	refreshing bool      // a background lookup is under way
	flight     *dnsFlight
}

// dnsFlight is a lookup that connects wait for.
type dnsFlight struct {
	done  chan struct{}
	addrs []string
	err   error
}

// dnsAnswer is what a connect got for a host name.
type dnsAnswer struct {
	addrs []string // in the order to try them
	raw   []string // as resolved (the cache's slice)
	// remembered: the addresses were resolved before this connect (by another connect or in the
	// background), age ago.
	remembered bool
	age        time.Duration
}

func newDNSCache(ttl time.Duration) *dnsCache {
	return &dnsCache{ttl: ttl, now: time.Now, m: map[string]*dnsEntry{}}
}

// get returns h's addresses: remembered ones while they are younger than the TTL, else those
// of a lookup (n.lookup, bounded by ctx), run once for every connect that asks meanwhile. In
// the last fifth of an answer's life the first connect that uses it starts n.refreshDNS (one
// at a time per name) and goes on with it.
func (c *dnsCache) get(ctx context.Context, n *Negotiator, h *Host) (dnsAnswer, error) {
	host := h.Host
	c.mu.Lock()
	if now := c.now(); !now.Before(c.sweepAt) {
		c.sweep(now)
	}
	e := c.m[host]
	if e == nil {
		e = &dnsEntry{}
		c.m[host] = e
	}
	if !e.at.IsZero() {
		if age := c.now().Sub(e.at); age < c.ttl {
			a := dnsAnswer{addrs: e.addrs, remembered: true, age: age}
			refresh := age >= c.ttl-c.ttl/5 && !e.refreshing
			e.refreshing = e.refreshing || refresh
			c.mu.Unlock()
			if refresh {
				n.refreshDNS(ctx, h)
			}
			return a, nil
		}
	}
	if f := e.flight; f != nil {
		c.mu.Unlock()
		select {
		case <-f.done:
			if f.err == nil {
				return dnsAnswer{addrs: f.addrs, remembered: true}, nil
			}
			// The lookup of the connect that ran it failed (perhaps with that connect's own
			// deadline): this one asks on its own.
		case <-ctx.Done():
			return dnsAnswer{}, ctx.Err()
		}
		addrs, err := n.lookup(ctx, h)
		if err == nil {
			c.put(host, addrs)
		}
		return dnsAnswer{addrs: addrs}, err
	}
	f := &dnsFlight{done: make(chan struct{})}
	e.flight = f
	c.mu.Unlock()

	f.addrs, f.err = n.lookup(ctx, h)
	c.mu.Lock()
	if f.err == nil {
		e.addrs, e.at = f.addrs, c.now()
	}
	e.flight = nil
	c.mu.Unlock()
	close(f.done)
	return dnsAnswer{addrs: f.addrs}, f.err
}

// sweep drops the answers expired at now, and the entries with neither an answer nor a lookup
// under way; it sets the next sweep. c.mu is held.
func (c *dnsCache) sweep(now time.Time) {
	c.sweepAt = now.Add(c.ttl)
	for host, e := range c.m {
		if !e.at.IsZero() && now.Sub(e.at) >= c.ttl {
			e.addrs, e.at = nil, time.Time{}
		}
		if e.at.IsZero() && e.flight == nil && !e.refreshing {
			delete(c.m, host)
		}
	}
}

// peek returns host's remembered addresses while they are younger than the TTL, else nil; it
// starts nothing.
func (c *dnsCache) peek(host string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.m[host]; e != nil && !e.at.IsZero() && c.now().Sub(e.at) < c.ttl {
		return e.addrs
	}
	return nil
}

// put remembers addrs as host's answer, resolved now.
func (c *dnsCache) put(host string, addrs []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.m[host]
	if e == nil {
		e = &dnsEntry{}
		c.m[host] = e
	}
	e.addrs, e.at = addrs, c.now()
}

// refreshed ends host's background lookup: addrs (nil after a failure) replaces the answer.
func (c *dnsCache) refreshed(host string, addrs []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.m[host]
	if e == nil {
		return
	}
	e.refreshing = false
	if addrs != nil {
		e.addrs, e.at = addrs, c.now()
	}
}

// forget drops host's answer when it is still addrs (another connect may have replaced it).
func (c *dnsCache) forget(host string, addrs []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.m[host]; e != nil && sameAddrs(e.addrs, addrs) {
		e.addrs, e.at = nil, time.Time{}
	}
}

// sameAddrs reports whether a and b are the same answer (the same slice).
func sameAddrs(a, b []string) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}
