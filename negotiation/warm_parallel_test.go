package negotiation

import (
	"context"
	"io"
	"strconv"
	"sync/atomic"
	"testing"
)

// warmHosts is a few hosts whose answers the cache knows: SSL refused, so that a plan with
// sslmode=prefer skips SSL and the decision also asks whether a refresh is due (too young: no).
func warmHosts(tb testing.TB, cache *Cache) (*Negotiator, []Key) {
	tb.Helper()
	var hosts []Host
	var keys []Key
	for i := range 4 {
		h := Host{Host: "db" + strconv.Itoa(i) + ".example", Port: 5432, SSLMode: SSLModePrefer}
		hosts = append(hosts, h)
		k := Key{Host: h.Host, Port: h.Port}
		keys = append(keys, k)
		cache.SetSSL(k, AnswerNo)
	}
	n, err := NewNegotiator(Config{
		Hosts: hosts, GSSEncMode: GSSEncModeDisable, Cache: cache,
		Open: func(context.Context) (io.Closer, error) { panic("a warm decision opened a connection") },
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { n.Close() })
	return n, keys
}

// BenchmarkWarmDecisionParallel is the warm decision run by many goroutines at once, over four
// hosts: "cache" is Cache.Known and Decide, "negotiator" the negotiator's whole decision step
// (Known, Decide, the refresh check). With -cpu 1,2,4,8,16, ns/op that stays flat or falls
// as the CPUs grow means the goroutines share nothing they wait for.
func BenchmarkWarmDecisionParallel(b *testing.B) {
	b.Run("cache", func(b *testing.B) {
		c := NewCache(DefaultTestTTL)
		_, keys := warmHosts(b, c)
		var seq atomic.Uint32
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := int(seq.Add(1))
			for pb.Next() {
				k := keys[i%len(keys)]
				i++
				p, err := Decide(Input{SSLMode: SSLModePrefer, GSSEncMode: GSSEncModeDisable, Known: c.Known(k)})
				if err != nil || p.Methods()[0] != MethodPlain {
					b.Fatal("unexpected plan")
				}
			}
		})
	})
	b.Run("negotiator", func(b *testing.B) {
		n, keys := warmHosts(b, NewCache(DefaultTestTTL))
		var seq atomic.Uint32
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := int(seq.Add(1))
			ctx := context.Background()
			bud := n.newBudget()
			for pb.Next() {
				j := i % len(keys)
				i++
				plan, _, _, err := n.decide(ctx, &bud, &n.cfg.Hosts[j], keys[j], GSSCredentials{}, false)
				if err != nil || plan.Methods()[0] != MethodPlain {
					b.Fatal("unexpected plan")
				}
			}
		})
	})
}
