package negotiation

import (
	"context"
	"errors"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Addresses that do not answer (Config.DownTTL). libpq and pgx try the hosts of a connection
// string, and each host's addresses, in order at every connect (fe-connect.c, PQconnectPoll;
// pgconn.connectPreferred): a first host whose SYNs are dropped costs every connect its
// connect_timeout. The connector remembers an address (IP and port) whose TCP connect timed out
// (connect_timeout, not the caller's deadline), was refused or found no route, for DownTTL:
//
//   - a connect tries the addresses not remembered down first, in their order, then the
//     remembered ones, in theirs: none is skipped, and with all of them down all are tried in
//     the string's order. A host whose every known address (hostaddr, an IP address, the
//     remembered answer of its name) is remembered down goes after the other hosts, the
//     order among those staying the string's;
//   - an address remembered down for half of DownTTL is dialed again in the background (a TCP
//     connect, closed at once: the server logs nothing for it) when a connect puts it last;
//     that renews the memory while the address stays down;
//   - any socket opened to the address, by a connect or in the background, forgets it at once.
//
// It changes the order of addresses only, never a method or an encryption decision; Unix-domain
// sockets are not remembered (a missing socket fails at once).
//
// The addresses are a resolver's to choose: one that names new ones at every lookup must not
// grow the memory. An expired address goes when a connect looks at it, and every address
// expired goes at the first walk of the memory (a connect while anything is remembered, a new
// address remembered) at least DownTTL/2 after the last such sweep, or when it is full: at
// most [MaxDownAddrs] addresses are remembered, the oldest forgotten first. Forgetting an
// address costs one dial of it in the string's order, nothing else.

// MaxDownAddrs caps the addresses (IP and port) one negotiator remembers down. A full memory
// first drops the expired ones, then the quarter remembered longest. With the addresses of a
// connection string's hosts far fewer, only a resolver that names new addresses at every
// lookup fills it (about 120 bytes an address).
const MaxDownAddrs = 1024

// downKey is an address: an IP address as resolved and a port.
type downKey struct {
	ip   string
	port uint16
}

// downAddrs is the addresses remembered down by one negotiator.
type downAddrs struct {
	ttl   time.Duration
	now   func() time.Time // time.Now; tests move it
	count atomic.Int32     // len(m): no lock on a connect while nothing is remembered

	mu sync.Mutex
	m  map[downKey]*downEntry
	// sweepAt: the first walk at or after it drops every expired address (sweep).
	sweepAt time.Time
}

type downEntry struct {
	since    time.Time // the last failure
	checking bool      // a background dial is under way
}

func newDownAddrs(ttl time.Duration) *downAddrs {
	return &downAddrs{ttl: ttl, now: time.Now, m: map[downKey]*downEntry{}}
}

// mark remembers k down from now, making room first when the memory is full.
func (d *downAddrs) mark(k downKey) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.now()
	if e := d.m[k]; e != nil {
		e.since = now
		return
	}
	if len(d.m) >= MaxDownAddrs || !now.Before(d.sweepAt) {
		d.sweep(now)
	}
	if len(d.m) >= MaxDownAddrs {
		d.evictOldest()
	}
	d.m[k] = &downEntry{since: now}
	d.count.Store(int32(len(d.m)))
}

// sweep drops every address expired at now, in a map of its own size (a Go map keeps the
// room of what was deleted from it), and sets the next sweep. d.mu is held.
func (d *downAddrs) sweep(now time.Time) {
	d.sweepAt = now.Add(d.ttl / 2)
	live := 0
	for _, e := range d.m {
		if now.Sub(e.since) < d.ttl {
			live++
		}
	}
	if live == len(d.m) {
		return
	}
	m := make(map[downKey]*downEntry, live)
	for k, e := range d.m {
		if now.Sub(e.since) < d.ttl {
			m[k] = e
		}
	}
	d.m = m
	d.count.Store(int32(len(m)))
}

// evictOldest drops the quarter of the addresses remembered longest (at least one), so that
// a memory kept full by new addresses sorts once per MaxDownAddrs/4 of them. d.mu is held.
func (d *downAddrs) evictOldest() {
	since := make([]time.Time, 0, len(d.m))
	for _, e := range d.m {
		since = append(since, e.since)
	}
	slices.SortFunc(since, time.Time.Compare)
	limit := since[max(len(since)/4, 1)-1]
	for k, e := range d.m {
		if !e.since.After(limit) {
			delete(d.m, k)
		}
	}
	d.count.Store(int32(len(d.m)))
}

// drop forgets k; the memory left empty is a new map (see sweep). d.mu is held.
func (d *downAddrs) drop(k downKey) {
	delete(d.m, k)
	if len(d.m) == 0 {
		d.m = map[downKey]*downEntry{}
	}
	d.count.Store(int32(len(d.m)))
}

// forget drops k, if it is remembered.
func (d *downAddrs) forget(k downKey) {
	if d.count.Load() == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m[k] != nil {
		d.drop(k)
	}
}

// down reports whether k is remembered down, since when, and whether it is time to dial it
// again in the background (half the TTL passed, no dial under way: the caller must then call
// recheck). An expired memory is dropped, and so is every other when a sweep is due.
func (d *downAddrs) down(k downKey) (down bool, since time.Time, recheck bool) {
	if d.count.Load() == 0 {
		return false, time.Time{}, false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.now()
	if !now.Before(d.sweepAt) {
		d.sweep(now)
	}
	e := d.m[k]
	if e == nil {
		return false, time.Time{}, false
	}
	age := now.Sub(e.since)
	if age >= d.ttl {
		d.drop(k)
		return false, time.Time{}, false
	}
	if age >= d.ttl/2 && !e.checking {
		e.checking = true
		recheck = true
	}
	return true, e.since, recheck
}

// checked ends k's background dial: up forgets it, else it stays down from now.
func (d *downAddrs) checked(k downKey, up bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e := d.m[k]
	if e == nil {
		return
	}
	if up {
		d.drop(k)
		return
	}
	e.since, e.checking = d.now(), false
}

// downKeyOf returns the key of a dialed "ip:port"; ok is false for anything else (a Unix
// socket's path).
func downKeyOf(network, address string) (downKey, bool) {
	if network != "tcp" {
		return downKey{}, false
	}
	ip, port, err := net.SplitHostPort(address)
	if err != nil {
		return downKey{}, false
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return downKey{}, false
	}
	return downKey{ip: ip, port: uint16(p)}, true
}

// dialShowsDown reports whether a failed dial proves the address down: refused, no route, or a
// timeout that is not the caller's (caller: its deadline, zero for none).
func dialShowsDown(err error, caller time.Time) bool {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return true
	case errors.Is(err, context.Canceled):
		return false
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
		return caller.IsZero() || time.Now().Before(caller)
	}
	return false
}

// noteDial records what a dial of network and address showed: a socket forgets the address, a
// failure that proves it down remembers it.
func (n *Negotiator) noteDial(network, address string, err error, caller time.Time) {
	if n.down == nil || (err == nil && n.down.count.Load() == 0) {
		return
	}
	k, ok := downKeyOf(network, address)
	switch {
	case !ok:
	case err == nil:
		n.down.forget(k)
	case dialShowsDown(err, caller):
		n.down.mark(k)
	}
}

// isDown reports whether the address ip of h is remembered down, starting its background dial
// when it is time.
func (n *Negotiator) isDown(ctx context.Context, h *Host, ip string) bool {
	if n.down == nil || n.down.count.Load() == 0 || h.UnixSocket() {
		return false
	}
	k := downKey{ip: ip, port: h.Port}
	down, _, recheck := n.down.down(k)
	if recheck {
		n.recheckDown(ctx, h.Host, h.Port, k)
	}
	return down
}

// downNow reports whether the address network and address name is remembered down (host: the
// host name being dialed, as written), starting its background dial when it is time.
func (n *Negotiator) downNow(ctx context.Context, host, network, address string) bool {
	if n.down == nil || n.down.count.Load() == 0 {
		return false
	}
	k, ok := downKeyOf(network, address)
	if !ok {
		return false
	}
	down, _, recheck := n.down.down(k)
	if recheck {
		n.recheckDown(ctx, host, k.port, k)
	}
	return down
}

// upFirst returns addrs with those of h remembered down moved after the others, each group in
// its order; addrs itself when none is (it is never modified: a copy is reordered).
func (n *Negotiator) upFirst(ctx context.Context, h *Host, addrs []string) []string {
	if n.down == nil || n.down.count.Load() == 0 || h.UnixSocket() {
		return addrs
	}
	var down []string
	var up []string
	for _, a := range addrs {
		if n.isDown(ctx, h, a) {
			down = append(down, a)
		} else {
			up = append(up, a)
		}
	}
	if len(down) == 0 {
		return addrs
	}
	return append(up, down...)
}

// hostDown reports whether every known address of h (its literal one, or its name's remembered
// answer) is remembered down; false when none is known.
func (n *Negotiator) hostDown(ctx context.Context, h *Host) bool {
	if n.down == nil || n.down.count.Load() == 0 || h.UnixSocket() {
		return false
	}
	addrs := n.literal[h]
	if addrs == nil && n.dns != nil {
		addrs = n.dns.peek(h.Host)
	}
	if len(addrs) == 0 {
		return false
	}
	for _, a := range addrs {
		if !n.isDown(ctx, h, a) {
			return false
		}
	}
	return true
}

// upHostsFirst reorders order (indexes of the hosts) so that hosts remembered down come after
// the others, each group in its order.
func (n *Negotiator) upHostsFirst(ctx context.Context, order []int) []int {
	if n.down == nil || n.down.count.Load() == 0 {
		return order
	}
	var down []int
	up := order[:0:0]
	for _, i := range order {
		if n.hostDown(ctx, &n.cfg.Hosts[i]) {
			down = append(down, i)
		} else {
			up = append(up, i)
		}
	}
	if len(down) == 0 {
		return order
	}
	return slices.Concat(up, down)
}

// recheckDown dials k in the background, bounded by connect_timeout (else 10 s) and the
// negotiator's life, linked to the trace of the connect of ctx and taking nothing else of it
// (background.go), and records what it showed. host and port name k's host, for the trace.
func (n *Negotiator) recheckDown(ctx context.Context, host string, port uint16, k downKey) {
	address := net.JoinHostPort(k.ip, strconv.Itoa(int(k.port)))
	info := BackgroundStartInfo{Work: BackgroundDownRecheck, Host: host, Port: port, Address: address, Trigger: n.detach(ctx)}
	if !n.runBackground(info, func(ctx context.Context) error {
		conn, err := n.cfg.DialFunc(ctx, "tcp", address)
		if err == nil {
			conn.Close()
		}
		n.down.checked(k, err == nil)
		return err
	}) {
		n.down.checked(k, false)
	}
}
