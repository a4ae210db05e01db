package pgconnector_test

import (
	"context"
	"database/sql/driver"
	"testing"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
)

// BenchmarkSCRAMConnect opens and closes one connection per iteration through a real pgbouncer
// (which holds the SCRAM secret, so it only checks proofs), as a role with trust and one with
// scram-sha-256, through pgconnector (warm: keys cached) and pgx's stdlib with sslmode=disable
// side by side. Its CPU profile shows where a warm SCRAM connect spends the client's time:
//
//	go test -run '^$' -bench SCRAMConnect -benchtime 2000x -cpuprofile cpu.out .
func BenchmarkSCRAMConnect(b *testing.B) {
	srv := harness.StartT(b, harness.Options{})
	bouncer := harness.StartPgbouncerT(b, srv, harness.PgbouncerOptions{})
	for _, user := range []struct{ name, dsn string }{
		{"trust", bouncer.TrustDSN()},
		{"scram", bouncer.ScramDSN()},
	} {
		pc, err := pgconnector.New(user.dsn)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { pc.Close() })
		for _, bc := range []struct {
			name string
			c    driver.Connector
		}{
			{"pgconnector", pc},
			{"pgx-sslmode-disable", stdlib.GetConnector(*mustParsePgx(b, user.dsn+" sslmode=disable"))},
		} {
			b.Run(user.name+"/"+bc.name, func(b *testing.B) {
				ctx := context.Background()
				open := func() {
					conn, err := bc.c.Connect(ctx)
					if err != nil {
						b.Fatal(err)
					}
					conn.Close()
				}
				open() // warm the decision cache and the SCRAM keys
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					open()
				}
			})
		}
	}
}
