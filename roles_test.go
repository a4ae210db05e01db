package pgconnector_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
)

// host=STANDBY,PRIMARY target_session_attrs=read-write: libpq and pgx open a backend on the
// standby at every connect. The connector remembers the roles: after the first connect, each
// one opens the primary's backend alone. Then a failover (the primary stopped, the standby
// promoted): the first connect after it reaches the new primary (the old one refuses: no
// timeout), and no connect ever gets a read-only session.
func TestRolesRemembered(t *testing.T) {
	primary := harness.StartT(t, harness.Options{})
	standby := harness.StartStandbyT(t, primary)
	dsn := primary.DSN(fmt.Sprintf("host=%s,%s port=%d,%d target_session_attrs=read-write connect_timeout=5",
		standby.Host, primary.Host, standby.Port, primary.Port))
	for _, tt := range []struct {
		name     string
		opts     []pgconnector.Option
		standbys int // backends on the standby over the 6 connects
	}{
		{"default", nil, 1},
		// With nothing remembered of the hosts' answers, the roles are still remembered:
		// they are another memory.
		{"WithCacheTTL(0)", []pgconnector.Option{pgconnector.WithCacheTTL(0)}, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newConnector(t, dsn, tt.opts...)
			defer c.Close()
			db := sql.OpenDB(c)
			defer db.Close()
			db.SetMaxIdleConns(0)
			sm, pm := standby.LogMark(), primary.LogMark()
			for i := range 6 {
				mustReadWrite(t, db, i)
			}
			onStandby, err := standby.ConnectionsSince(sm)
			if err != nil {
				t.Fatal(err)
			}
			onPrimary, err := primary.ConnectionsSince(pm)
			if err != nil {
				t.Fatal(err)
			}
			if onStandby != tt.standbys || onPrimary != 6 {
				t.Errorf("6 connects: %d backends on the standby, %d on the primary; want %d and 6", onStandby, onPrimary, tt.standbys)
			}
		})
	}

	// The failover.
	c := newConnector(t, dsn)
	defer c.Close()
	db := sql.OpenDB(c)
	defer db.Close()
	db.SetMaxIdleConns(0)
	mustReadWrite(t, db, 0) // the roles learned
	if err := primary.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := standby.Promote(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		mustReadWrite(t, db, i+1)
	}
}

// mustReadWrite runs a query on a new connection of db and fails unless its session may write.
func mustReadWrite(t *testing.T, db *sql.DB, i int) {
	t.Helper()
	var ro string
	if err := db.QueryRow("show transaction_read_only").Scan(&ro); err != nil {
		t.Fatalf("connect %d: %v", i, err)
	}
	if ro != "off" {
		t.Fatalf("connect %d: a read-only session (transaction_read_only=%s) under target_session_attrs=read-write", i, ro)
	}
}
