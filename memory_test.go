package pgconnector_test

import (
	"context"
	"net"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgconnector/pgconnector"
)

// The row 5 through the connector: a resolver (WithLookupFunc) naming 2,000 new
// loopback addresses at each lookup, all refused, for 20 connects. Once the addresses expire
// (WithDownHostTTL), the next connect's look at the memory drops them: the heap is back within
// 100 KB of where it was before the storm. Before the memory was swept, the 40,000 addresses
// stayed for good (+4.8 MB).
func TestRememberedDownAddressesExpireThroughTheConnector(t *testing.T) {
	const perAnswer, connects, ttl = 2000, 20, 2 * time.Second
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close() // refused on every 127.x.y.z from now on
	var storm atomic.Bool
	var named atomic.Uint32
	lookup := func(_ context.Context, host string) ([]string, error) {
		if !storm.Load() {
			return []string{"127.0.0.1"}, nil
		}
		addrs := make([]string, perAnswer)
		for i := range addrs {
			v := named.Add(1) + 1<<8 // 127.0.1.0 and on
			addrs[i] = net.IPv4(127, byte(v>>16), byte(v>>8), byte(v)).String()
		}
		return addrs, nil
	}
	c := newConnector(t, "host=db.pgconnector.test port="+strconv.Itoa(port)+
		" user=u sslmode=disable gssencmode=disable connect_timeout=2",
		pgconnector.WithLookupFunc(lookup), pgconnector.WithDNSCacheTTL(0), pgconnector.WithDownHostTTL(ttl))
	defer c.Close()
	ctx := context.Background()
	connect := func() {
		if conn, err := c.Connect(ctx); err == nil {
			conn.Close()
			t.Fatal("a connect to a refused address got in")
		}
	}
	connect() // warm: what every connect allocates once
	before := heapInUse()

	storm.Store(true)
	start := time.Now()
	for range connects {
		connect()
	}
	grown := heapInUse() - before
	t.Logf("%d connects, %d addresses named, in %v: heap %+d KB", connects, named.Load(), time.Since(start).Round(time.Millisecond), grown>>10)

	storm.Store(false)
	time.Sleep(ttl + 100*time.Millisecond) // past the TTL of the last address remembered
	connect()
	after := heapInUse() - before
	t.Logf("past the TTL, one more connect: heap %+d KB", after>>10)
	if after > 100<<10 {
		t.Errorf("heap %+d KB once the remembered addresses expired, want within 100 KB", after>>10)
	}
}

// heapInUse is the heap in use after two collections, in bytes.
func heapInUse() int64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}
