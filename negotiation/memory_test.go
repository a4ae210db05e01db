package negotiation

import (
	"context"
	"net"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// memoryFixture is a negotiator for the host name "db.example" (or the names of its Config)
// whose resolver, while storm is
// set, names perAnswer new loopback addresses (127.x.y.z, none of them 127.0.0.1) at each
// lookup, all on a port where nothing listens on them (refused), and otherwise names
// 127.0.0.1, where a listener accepts on that port; with a clock the test moves for every
// memory of the negotiator.
type memoryFixture struct {
	n       *Negotiator
	port    int
	storm   atomic.Bool
	named   atomic.Uint32 // addresses named so far
	lookups atomic.Int32

	mu  sync.Mutex
	now time.Time
}

func newMemoryFixture(t *testing.T, perAnswer int, cfg Config) *memoryFixture {
	t.Helper()
	_, ln := listen(t, "127.0.0.1")
	f := &memoryFixture{port: ln.Addr().(*net.TCPAddr).Port, now: time.Unix(1_000_000, 0)}
	if len(cfg.Hosts) == 0 {
		cfg.Hosts = []Host{{Host: "db.example"}}
	}
	for i := range cfg.Hosts {
		cfg.Hosts[i].Port, cfg.Hosts[i].SSLMode = uint16(f.port), SSLModeDisable
	}
	cfg.GSSEncMode = GSSEncModeDisable
	cfg.ConnectTimeout = 2 * time.Second
	cfg.LookupFunc = func(ctx context.Context, host string) ([]string, error) {
		f.lookups.Add(1)
		if !f.storm.Load() {
			return []string{"127.0.0.1"}, nil
		}
		addrs := make([]string, perAnswer)
		for i := range addrs {
			// 127.0.1.0 and on: never 127.0.0.1, where the listener is.
			v := f.named.Add(1) + 1<<8
			addrs[i] = net.IPv4(127, byte(v>>16), byte(v>>8), byte(v)).String()
		}
		return addrs, nil
	}
	if cfg.Cache == nil {
		cfg.Cache = NewCache(time.Minute)
	}
	var err error
	f.n, err = NewNegotiator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.n.Close() })
	clock := func() time.Time {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.now
	}
	f.n.cfg.Cache.now = clock
	if f.n.dns != nil {
		f.n.dns.now = clock
	}
	if f.n.down != nil {
		f.n.down.now = clock
	}
	return f
}

func (f *memoryFixture) advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
}

// connect runs one connect whose attempts dial the address they were given.
func (f *memoryFixture) connect(ctx context.Context) error {
	return dialingConnect(ctx, f.n, "host=db.example user=u sslmode=disable", nil)
}

// dialingConnect runs one connect of n, with the pgx configuration of dsn, whose attempts dial
// the address they were given, each first handed to dialed ("ip:port") when it is set.
func dialingConnect(ctx context.Context, n *Negotiator, dsn string, dialed func(address string)) error {
	base, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return err
	}
	return n.Connect(ctx, func(ctx context.Context) error {
		cfg := base.Copy()
		if err := n.Configure(ctx, cfg); err != nil {
			return err
		}
		addrs, err := cfg.LookupFunc(ctx, cfg.Host)
		if err != nil {
			return err
		}
		address := net.JoinHostPort(addrs[0], strconv.Itoa(int(cfg.Port)))
		if dialed != nil {
			dialed(address)
		}
		c, err := cfg.DialFunc(ctx, "tcp", address)
		if err != nil {
			return err
		}
		return c.Close()
	})
}

// heapAlloc is the heap in use after two collections, in bytes.
func heapAlloc() int64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// downLen is the number of addresses remembered down.
func (n *Negotiator) downLen() int {
	n.down.mu.Lock()
	defer n.down.mu.Unlock()
	return len(n.down.m)
}

// The row 5: a resolver naming 2,000 new refused addresses at each lookup, 20 connects.
// The addresses remembered down stay at most MaxDownAddrs, and once they expire the next
// connect (to an honest answer) drops them all: the heap is back within 100 KB of where it was
// before the first connect.
func TestDownMemoryBoundedAgainstANewAnswerEachLookup(t *testing.T) {
	const perAnswer, connects = 2000, 20
	// No DNS memory: each connect looks the name up (a DNS memory only spaces the lookups).
	f := newMemoryFixture(t, perAnswer, Config{DownTTL: 10 * time.Second})
	ctx := context.Background()
	if err := f.connect(ctx); err != nil { // warm: the listener, the pools of the runtime
		t.Fatalf("honest connect: %v", err)
	}
	before := heapAlloc()

	f.storm.Store(true)
	for range connects {
		if err := f.connect(ctx); err == nil {
			t.Fatal("a connect to refused addresses got in")
		}
		f.advance(100 * time.Millisecond)
		if got := f.n.downLen(); got > MaxDownAddrs {
			t.Fatalf("%d addresses remembered down, more than MaxDownAddrs (%d)", got, MaxDownAddrs)
		}
	}
	grown := heapAlloc() - before
	t.Logf("after %d connects, %d addresses named: %d remembered down, heap +%d KB",
		connects, f.named.Load(), f.n.downLen(), grown>>10)

	// Past the TTL, the attacker gone: the next connect's walk of the memory drops what expired.
	f.storm.Store(false)
	f.advance(11 * time.Second)
	if err := f.connect(ctx); err != nil {
		t.Fatalf("honest connect after the storm: %v", err)
	}
	if got := f.n.downLen(); got != 0 {
		t.Errorf("%d addresses still remembered down after their TTL", got)
	}
	after := heapAlloc() - before
	t.Logf("after the TTL and one connect: heap %+d KB", after>>10)
	if after > 100<<10 {
		t.Errorf("heap %+d KB after the memory expired, want within 100 KB", after>>10)
	}
}

// A full memory of addresses remembered down forgets the ones remembered longest first; what
// expired goes at the next sweep, and the map is then one of the size of what is left.
func TestDownMemoryForgetsTheOldestFirst(t *testing.T) {
	d := newDownAddrs(10 * time.Second)
	now := time.Unix(1_000_000, 0)
	d.now = func() time.Time { return now }
	key := func(i int) downKey { return downKey{ip: "127.1.0.1", port: uint16(i)} }
	for i := range MaxDownAddrs + 100 {
		now = now.Add(time.Millisecond)
		d.mark(key(i))
		if len(d.m) > MaxDownAddrs || int(d.count.Load()) != len(d.m) {
			t.Fatalf("after %d addresses: %d remembered, count %d (cap %d)", i+1, len(d.m), d.count.Load(), MaxDownAddrs)
		}
	}
	for i := MaxDownAddrs; i < MaxDownAddrs+100; i++ {
		if down, _, _ := d.down(key(i)); !down {
			t.Fatalf("address %d, among the newest, was forgotten", i)
		}
	}
	if down, _, _ := d.down(key(0)); down {
		t.Error("the oldest address is still remembered in a full memory")
	}

	// Half the memory renewed later: past the TTL of the others, the next look drops them all.
	now = now.Add(6 * time.Second)
	for i := MaxDownAddrs; i < MaxDownAddrs+100; i++ {
		d.mark(key(i))
	}
	now = now.Add(5 * time.Second)
	if down, _, _ := d.down(key(MaxDownAddrs)); !down {
		t.Fatal("an address renewed within the TTL was forgotten")
	}
	if len(d.m) != 100 || d.count.Load() != 100 {
		t.Errorf("%d remembered (count %d) after the sweep, want the 100 renewed", len(d.m), d.count.Load())
	}
	now = now.Add(10 * time.Second)
	d.down(key(MaxDownAddrs))
	if len(d.m) != 0 || d.count.Load() != 0 {
		t.Errorf("%d remembered (count %d) once every address expired", len(d.m), d.count.Load())
	}
}

// The DNS memory is keyed by the connection string's names: a resolver that names new
// addresses at every lookup replaces one answer per name, and an answer that expired goes
// even when its name is never looked up again.
func TestDNSMemoryHoldsOneAnswerPerName(t *testing.T) {
	f := newMemoryFixture(t, 500, Config{
		Hosts:  []Host{{Host: "db.example"}, {Host: "other.example"}},
		DNSTTL: 15 * time.Second,
	})
	ctx := context.Background()
	f.storm.Store(true)
	for range 10 {
		if err := f.connect(ctx); err == nil {
			t.Fatal("a connect to refused addresses got in")
		}
		f.advance(16 * time.Second)
		f.n.dns.mu.Lock()
		got := len(f.n.dns.m)
		f.n.dns.mu.Unlock()
		if got > 2 {
			t.Fatalf("%d names remembered for a string of 2", got)
		}
	}
	if f.lookups.Load() < 20 {
		t.Fatalf("%d lookups: the storm did not reach the second host", f.lookups.Load())
	}
	// The first host answers from now on: the second is never looked up again, and its
	// answer, expired, goes at the first host's lookup.
	f.storm.Store(false)
	if err := f.connect(ctx); err != nil {
		t.Fatalf("honest connect: %v", err)
	}
	f.n.dns.mu.Lock()
	defer f.n.dns.mu.Unlock()
	if e := f.n.dns.m["other.example"]; e != nil {
		t.Errorf("the expired answer of other.example is still held (%d addresses)", len(e.addrs))
	}
}

// cacheLen is the number of keys in c.
func (c *Cache) cacheLen() int { return len(*c.entries.Load()) }

// The decision cache is keyed by the string's hosts (and the client principal): a resolver
// that names new addresses at every lookup adds no key, and neither do the roles.
func TestHostMemoriesDoNotGrowWithTheResolversAnswers(t *testing.T) {
	f := newMemoryFixture(t, 500, Config{
		Hosts:              []Host{{Host: "db.example"}, {Host: "other.example"}},
		TargetSessionAttrs: TargetReadWrite,
	})
	ctx := context.Background()
	f.storm.Store(true)
	for range 10 {
		if err := f.connect(ctx); err == nil {
			t.Fatal("a connect to refused addresses got in")
		}
		f.advance(time.Second)
	}
	if got := f.n.cfg.Cache.cacheLen(); got > 2 {
		t.Errorf("the decision cache holds %d keys for a string of 2 hosts", got)
	}
	if got := len(f.n.roles); got != 2 {
		t.Errorf("the role memory holds %d hosts for a string of 2", got)
	}
}

// A cache shared by strings of many hosts, or used with a new client principal each time,
// holds at most MaxCacheKeys keys, the newest kept; keys whose answers expired go when a key
// is added.
func TestCacheKeysCappedAndSwept(t *testing.T) {
	c := NewCache(time.Minute)
	now := time.Unix(1_000_000, 0)
	c.now = func() time.Time { return now }
	key := func(i int) Key {
		return Key{Host: "db.example", Port: 5432, Principal: "u" + strconv.Itoa(i) + "@EXAMPLE"}
	}
	const n = 2*MaxCacheKeys + 10
	for i := range n {
		now = now.Add(time.Millisecond)
		c.SetSSL(key(i), AnswerNo)
		if got := c.cacheLen(); got > MaxCacheKeys {
			t.Fatalf("after %d keys: %d held, more than MaxCacheKeys (%d)", i+1, got, MaxCacheKeys)
		}
	}
	for i := n - 100; i < n; i++ {
		if c.Known(key(i)).SSL != AnswerNo {
			t.Fatalf("key %d, among the newest, was forgotten", i)
		}
	}
	if c.Known(key(0)).SSL != AnswerUnknown {
		t.Error("the oldest key is still known in a full cache")
	}

	// A key with a probe running is kept past its answers' expiry; the others go.
	_, p := c.BeginProbe(key(n-1), c.Known(key(n-1)))
	if p == nil {
		t.Fatal("no probe claimed")
	}
	now = now.Add(2 * time.Minute)
	c.SetSSL(Key{Host: "new.example", Port: 5432}, AnswerYes)
	if got := c.cacheLen(); got != 2 {
		t.Errorf("%d keys held after every answer expired, want the new one and the one probed", got)
	}
	p.End()
	c.SetSSL(Key{Host: "newer.example", Port: 5432}, AnswerYes)
	if got := c.cacheLen(); got != 2 {
		t.Errorf("%d keys held, want the 2 new ones (the probed one went with its probe)", got)
	}
	if c.Known(Key{Host: "new.example", Port: 5432}).SSL != AnswerYes {
		t.Error("an answer within its TTL was forgotten")
	}
}
