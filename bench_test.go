package pgconnector_test

import (
	"context"
	"database/sql/driver"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
)

// BenchmarkConnect opens and closes one connection per iteration against a server without TLS,
// with a default DSN (sslmode=prefer), through pgconnector (warm cache) and pgx's stdlib side by
// side, and reports the server backends and TCP connections each connection cost.
//
//	go test -run '^$' -bench Connect -benchtime 200x .
func BenchmarkConnect(b *testing.B) {
	srv := harness.StartT(b, harness.Options{})
	px := harness.ProxyT(b, srv.Addr())
	host, port := px.Addr()
	dsn := srv.DSN("host="+host, "port="+strconv.Itoa(port))

	pc, err := pgconnector.New(dsn)
	if err != nil {
		b.Fatal(err)
	}
	cfg := mustParsePgx(b, dsn)
	for _, bc := range []struct {
		name string
		c    driver.Connector
	}{
		{"pgconnector", pc},
		{"pgx-stdlib", stdlib.GetConnector(*cfg)},
		{"pgx-stdlib-sslmode-disable", stdlib.GetConnector(*mustParsePgx(b, dsn+" sslmode=disable"))},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ctx := context.Background()
			open := func() {
				conn, err := bc.c.Connect(ctx)
				if err != nil {
					b.Fatal(err)
				}
				conn.Close()
			}
			open() // warm the decision cache
			mark, before := srv.LogMark(), px.Stats()
			b.ResetTimer()
			for b.Loop() {
				open()
			}
			b.StopTimer()
			backends, err := srv.ConnectionsSince(mark)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(backends)/float64(b.N), "backends/op")
			b.ReportMetric(float64(px.Stats().Connections-before.Connections)/float64(b.N), "tcp/op")
		})
	}
}
