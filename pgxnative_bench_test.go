package pgconnector_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
)

// BenchmarkPgxPoolConnect is the rate at which a pgxpool opens connections, through the
// connector (OpenPool, warm decision cache) and by itself, side by side in one run: each
// iteration acquires a connection the pool must open (the previous one was taken out of the pool
// with Hijack and closed), so it measures the connect and the close, no statement. Against a
// server without TLS (trust) and one with TLS (scram-sha-256), both with the default
// sslmode=prefer; with sslmode=disable too on the server without TLS (pgxpool's floor there).
// Metrics: conns/s; backends/op, the server backends forked per connection (from the server
// log); cpu-us/op, this process's CPU time (user+system) per connection, which the load of a
// shared machine disturbs less than the rate.
//
//	go test -run '^$' -bench PgxPoolConnect -benchtime 300x .
func BenchmarkPgxPoolConnect(b *testing.B) {
	plain := harness.StartT(b, harness.Options{})
	tlsSrv := harness.StartT(b, harness.Options{TLS: true, Auth: "scram-sha-256"})
	type target struct {
		name string
		srv  *harness.Postgres
		dsn  string
	}
	targets := []target{{"plain", plain, plain.DSN()}, {"tls", tlsSrv, tlsSrv.DSN()}}
	for _, tg := range targets {
		for _, bc := range []struct {
			name  string
			extra string
			via   bool // through the connector
		}{
			{"pgconnector", "", true},
			{"pgxpool", "", false},
			{"pgconnector-sslmode-disable", " sslmode=disable", true},
			{"pgxpool-sslmode-disable", " sslmode=disable", false},
		} {
			if tg.name == "tls" && bc.extra != "" {
				continue
			}
			b.Run(tg.name+"/"+bc.name, func(b *testing.B) {
				ctx := context.Background()
				var p *pgxpool.Pool
				if bc.via {
					c, err := pgconnector.New(tg.dsn + bc.extra)
					if err != nil {
						b.Fatal(err)
					}
					defer c.Close()
					if p, err = c.OpenPool(ctx); err != nil {
						b.Fatal(err)
					}
				} else {
					cfg, err := pgxpool.ParseConfig(tg.dsn + bc.extra)
					if err != nil {
						b.Fatal(err)
					}
					if p, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
						b.Fatal(err)
					}
				}
				defer p.Close()
				open := func() {
					conn, err := p.Acquire(ctx)
					if err != nil {
						b.Fatal(err)
					}
					conn.Hijack().Close(ctx)
				}
				open() // warm the decision cache
				mark, cpu := tg.srv.LogMark(), cpuTime()
				b.ResetTimer()
				for b.Loop() {
					open()
				}
				b.StopTimer()
				b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/float64(b.N), "cpu-us/op")
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "conns/s")
				backends, err := tg.srv.ConnectionsSince(mark)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(backends)/float64(b.N), "backends/op")
			})
		}
	}
}
