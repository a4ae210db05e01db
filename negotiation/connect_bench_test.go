package negotiation

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// BenchmarkWarmConnectOverhead is what the negotiator adds to one warm connect, apart from pgx's
// own work and the network: Connect with a remembered answer (SSL refused, so sslmode=prefer
// goes straight to plaintext), connect_timeout, and an open that only runs Configure on a copy
// of a pgx configuration, as the stdlib connector's BeforeConnect does. No trace hooks: the
// tracing package's cost with a provider that does not record is measured beside pgx in the
// root package's BenchmarkClientBound.
func BenchmarkWarmConnectOverhead(b *testing.B) {
	h := Host{Host: "127.0.0.1", Port: 5432, SSLMode: SSLModePrefer}
	cache := NewCache(time.Hour)
	cache.SetSSL(Key{Host: h.Host, Port: h.Port}, AnswerNo)
	n, err := NewNegotiator(Config{
		Hosts: []Host{h}, GSSEncMode: GSSEncModeDisable, Cache: cache, ConnectTimeout: 10 * time.Second,
		Open: func(context.Context) (io.Closer, error) { panic("a warm connect refreshed") },
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { n.Close() })
	base := pgconn.Config{
		Host: "127.0.0.1", Port: 5432,
		BuildFrontend: func(r io.Reader, w io.Writer) *pgproto3.Frontend { return nil },
	}
	open := func(ctx context.Context) error {
		cfg := base
		return n.Configure(ctx, &cfg)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := n.Connect(ctx, open); err != nil {
			b.Fatal(err)
		}
	}
}
