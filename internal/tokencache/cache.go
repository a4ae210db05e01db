// Package tokencache keeps secrets (passwords of an application's function, OAuth bearer tokens)
// by key between connects: one fetch for a herd of concurrent Gets of a key, an expiry margin,
// a refresh ahead of expiry in the background, a bound on the number of keys. It never puts
// anything of a secret in an error: the errors it returns are the fetch's and the contexts'.
package tokencache

import (
	"context"
	"sync"
	"time"
)

// Margin is how long before its expiry a secret counts as expired: one that expires within
// Margin is not given to a connect from the cache (a connect and its authentication exchange
// take well under it, and the clocks of client, issuer and server may differ by seconds). It is
// golang.org/x/oauth2's own margin (its expiryDelta), so that a token of an oauth2.TokenSource
// (oauth2.ReuseTokenSource) is replaced by it when the cache asks for a new one. A secret that
// lives less than Margin when fetched is given to the connects that waited for it, never kept.
const Margin = 10 * time.Second

// DefaultMaxKeys is Config.MaxKeys's default.
const DefaultMaxKeys = 1024

// refreshFraction: a Get that finds its secret in the last 1/refreshFraction of its life (from
// its fetch to its expiry less Margin) starts a refresh in the background.
const refreshFraction = 5

// minRetry is the least wait before a refresh is tried again after one that failed or got no
// later expiry.
const minRetry = time.Second

// Secret is what a fetch returns.
type Secret struct {
	Value string
	// Expiry is when Value stops being valid; zero: valid until the server refuses it (Drop).
	Expiry time.Time
	// Note is the caller's, given back with the secret (where it came from, say).
	Note uint8
}

// Fetch obtains a secret. Its context ends when no Get waits for it any more (or, for a
// refresh, with the caller's background bound).
type Fetch func(ctx context.Context) (Secret, error)

// Background runs do in the background, not tied to a Get's context; false: it did not run it.
type Background func(do func(ctx context.Context) error) bool

// refreshKey marks the context of a refresh ahead of expiry.
type refreshKey struct{}

// Refreshing reports whether ctx is that of a fetch refreshing a kept secret ahead of its
// expiry (in the background, nobody waiting for it): a fetch that would need a human (the
// device flow's prompt) should fail there instead, and leave it to a connect.
func Refreshing(ctx context.Context) bool { return ctx.Value(refreshKey{}) != nil }

// Config configures a Cache.
type Config struct {
	// MaxKeys bounds the secrets kept: when full, a new key first drops the expired secrets,
	// then the one that expires first. Zero: DefaultMaxKeys.
	MaxKeys int
	// Now is the clock (tests); nil: time.Now.
	Now func() time.Time
}

// Cache is a cache of secrets by key. Its zero value is not usable: use New. It is safe for
// concurrent use.
type Cache struct {
	maxKeys int
	now     func() time.Time

	mu      sync.Mutex
	entries map[string]*entry
	flights map[string]*flight
}

// entry is a kept secret.
type entry struct {
	Secret
	fetched time.Time
	// refreshing: a refresh runs; notBefore: no refresh starts before it (after a failed one).
	refreshing bool
	notBefore  time.Time
}

// flight is one fetch for the Gets of a key that wait for it; stopped (cancel) when the last
// of them stops waiting.
type flight struct {
	waiters int // guarded by Cache.mu
	cancel  context.CancelFunc
	done    chan struct{} // closed when secret or err is set
	secret  Secret
	err     error
}

// New returns an empty cache.
func New(cfg Config) *Cache {
	if cfg.MaxKeys <= 0 {
		cfg.MaxKeys = DefaultMaxKeys
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Cache{maxKeys: cfg.MaxKeys, now: cfg.Now, entries: map[string]*entry{}, flights: map[string]*flight{}}
}

// valid reports whether s may be given to a connect at now.
func valid(s Secret, now time.Time) bool {
	return s.Expiry.IsZero() || now.Before(s.Expiry.Add(-Margin))
}

// Get returns key's secret: the kept one, when it is valid (cached true), else the result of
// fetch, called once for all the Gets of key that wait at the same time, on a goroutine of its
// own, with a context that keeps the values of the first Get's ctx but not its end: the fetch is
// canceled when every waiting Get's ctx has ended. A Get returns at most when its ctx ends,
// with ctx's error. A failed fetch is not kept: the next Get fetches again.
//
// When the kept secret is in the last fifth of its life, Get starts one refresh through
// background (nil: none) with fetch and still returns the kept secret; the refresh's secret
// replaces it, and a failed refresh (or one that brings no later expiry) leaves it until it
// expires, the next refresh waiting half of its remaining life (at least a second).
func (c *Cache) Get(ctx context.Context, key string, fetch Fetch, background Background) (s Secret, cached bool, err error) {
	c.mu.Lock()
	now := c.now()
	if e := c.entries[key]; e != nil {
		if valid(e.Secret, now) {
			s = e.Secret
			if background != nil && c.wantsRefresh(e, now) {
				e.refreshing = true
				c.mu.Unlock()
				if !background(func(ctx context.Context) error { return c.refresh(ctx, key, e, fetch) }) {
					c.mu.Lock()
					e.refreshing = false
					c.mu.Unlock()
				}
				return s, true, nil
			}
			c.mu.Unlock()
			return s, true, nil
		}
		delete(c.entries, key)
	}
	fl := c.flights[key]
	if fl == nil {
		fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		fl = &flight{cancel: cancel, done: make(chan struct{})}
		c.flights[key] = fl
		go c.run(fctx, key, fl, fetch)
	}
	fl.waiters++
	c.mu.Unlock()
	return c.wait(ctx, key, fl)
}

// wantsRefresh reports whether e, valid at now, should be refreshed. Cache.mu is held.
func (c *Cache) wantsRefresh(e *entry, now time.Time) bool {
	if e.Expiry.IsZero() || e.refreshing || now.Before(e.notBefore) {
		return false
	}
	end := e.Expiry.Add(-Margin)
	life := end.Sub(e.fetched)
	return end.Sub(now) <= life/refreshFraction
}

// run fetches key's secret for fl's waiters and keeps it when it lives past Margin.
func (c *Cache) run(ctx context.Context, key string, fl *flight, fetch Fetch) {
	s, err := fetch(ctx)
	fl.cancel()
	c.mu.Lock()
	if c.flights[key] == fl {
		delete(c.flights, key)
		if err == nil {
			c.keep(key, s)
		}
	}
	fl.secret, fl.err = s, err
	close(fl.done)
	c.mu.Unlock()
}

// wait waits for fl until ctx ends; the last waiter to leave stops the fetch, and a later Get
// starts a fetch of its own.
func (c *Cache) wait(ctx context.Context, key string, fl *flight) (Secret, bool, error) {
	select {
	case <-fl.done:
		return fl.secret, false, fl.err
	case <-ctx.Done():
	}
	c.mu.Lock()
	fl.waiters--
	if fl.waiters == 0 {
		fl.cancel()
		if c.flights[key] == fl {
			delete(c.flights, key)
		}
	}
	c.mu.Unlock()
	return Secret{}, false, ctx.Err()
}

// refresh fetches key's secret in the background for e, the kept entry it found in the last
// part of its life.
func (c *Cache) refresh(ctx context.Context, key string, e *entry, fetch Fetch) error {
	s, err := fetch(context.WithValue(ctx, refreshKey{}, true))
	c.mu.Lock()
	defer c.mu.Unlock()
	e.refreshing = false
	now := c.now()
	if err == nil && (s.Expiry.IsZero() || s.Expiry.After(e.Expiry)) && valid(s, now) {
		if c.entries[key] == e { // not dropped or replaced meanwhile
			c.keep(key, s)
		}
		return nil
	}
	e.notBefore = now.Add(max(e.Expiry.Add(-Margin).Sub(now)/2, minRetry))
	return err
}

// keep stores s for key when it is valid now, making room when the cache is full. Cache.mu is
// held.
func (c *Cache) keep(key string, s Secret) {
	now := c.now()
	if !valid(s, now) {
		delete(c.entries, key)
		return
	}
	if _, ok := c.entries[key]; !ok && len(c.entries) >= c.maxKeys {
		c.evict(now)
	}
	c.entries[key] = &entry{Secret: s, fetched: now}
}

// evict drops the expired entries, or, when none is, the one that expires first (one that is
// valid until refused last). Cache.mu is held.
func (c *Cache) evict(now time.Time) {
	var first string
	var firstExp time.Time
	found, dropped := false, false
	for k, e := range c.entries {
		if !valid(e.Secret, now) {
			delete(c.entries, k)
			dropped = true
			continue
		}
		exp := e.Expiry
		if exp.IsZero() {
			exp = time.Unix(1<<62, 0)
		}
		if !found || exp.Before(firstExp) {
			first, firstExp, found = k, exp, true
		}
	}
	if !dropped && found {
		delete(c.entries, first)
	}
}

// Drop forgets key's secret if it is still value (the server refused it): a secret another
// connect already put in its place stays.
func (c *Cache) Drop(key, value string) {
	c.mu.Lock()
	if e := c.entries[key]; e != nil && e.Value == value {
		delete(c.entries, key)
	}
	c.mu.Unlock()
}

// Len is the number of secrets kept (tests).
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}
