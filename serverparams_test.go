package pgconnector_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgconnector/pgconnector/internal/connstring"
	"github.com/pgconnector/pgconnector/internal/harness"
)

// The server parameters a connection string may carry (internal/connstring, serverParameters)
// are those PostgreSQL 15 to 18 let a StartupMessage set: for each installed major, every
// parameter of context user, superuser, backend or superuser-backend is in the list, and every
// name of the list is such a parameter of one of them.
func TestServerParametersMatchPostgres(t *testing.T) {
	settable := map[string]bool{}
	for _, major := range []int{15, 16, 17, 18} {
		srv, err := harness.Start(context.Background(), harness.Options{Major: major})
		if errors.Is(err, harness.ErrNotInstalled) {
			t.Fatalf("PostgreSQL %d is not installed: run scripts/install-deps.sh", major)
		}
		if err != nil {
			t.Fatal(err)
		}
		// As the superuser, who also sees the parameters only a superuser may read.
		conn, err := pgx.Connect(context.Background(), "host="+srv.SocketDir+" port="+strconv.Itoa(srv.Port)+" user=postgres dbname=postgres")
		if err != nil {
			srv.Stop()
			t.Fatal(err)
		}
		rows, _ := conn.Query(context.Background(),
			"select name from pg_settings where context in ('user', 'superuser', 'backend', 'superuser-backend')")
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		conn.Close(context.Background())
		srv.Stop()
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			settable[strings.ToLower(n)] = true
			if !connstring.IsServerParameter(n) {
				t.Errorf("PostgreSQL %d's %s is not in the list", major, n)
			}
		}
	}
	list := connstring.ServerParameters()
	slices.Sort(list)
	for _, n := range list {
		if !settable[n] {
			t.Errorf("%s is in the list but no server lets a client set it", n)
		}
	}
}
