package harness

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

func fakeDSN(s *FakeServer, extra string) string {
	host, port := s.Addr()
	return fmt.Sprintf("host=%s port=%d user=fake dbname=fake connect_timeout=5 %s", host, port, extra)
}

func TestFakeServerPgx(t *testing.T) {
	s := FakeServerT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	for _, tc := range []struct {
		name, extra string
		want        FakeStats // increments for one connection
	}{
		// sslmode=prefer (pgx's default): SSLRequest, 'N', pgx closes and dials again in the clear.
		{"prefer", "", FakeStats{Connections: 2, SSLRequests: 1, Startups: 1}},
		{"disable", "sslmode=disable", FakeStats{Connections: 1, Startups: 1}},
	} {
		t.Run("sslmode="+tc.name, func(t *testing.T) {
			before := s.Stats()
			conn, err := pgx.Connect(ctx, fakeDSN(s, tc.extra))
			if err != nil {
				t.Fatal(err)
			}
			if v := conn.PgConn().ParameterStatus("server_version"); v != "15.0" {
				t.Errorf("server_version = %q, want 15.0", v)
			}
			// Extended protocol (cached statement), then the simple protocol.
			for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
				var n int32
				if err := conn.QueryRow(ctx, "select 1", mode).Scan(&n); err != nil {
					t.Fatalf("%v: %v", mode, err)
				}
				if n != 1 {
					t.Fatalf("%v: select 1 = %d", mode, n)
				}
			}
			if err := conn.Close(ctx); err != nil {
				t.Fatal(err)
			}
			after := s.Stats()
			got := FakeStats{
				Connections:    after.Connections - before.Connections,
				SSLRequests:    after.SSLRequests - before.SSLRequests,
				GSSENCRequests: after.GSSENCRequests - before.GSSENCRequests,
				Startups:       after.Startups - before.Startups,
			}
			if got != tc.want {
				t.Errorf("stats delta = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// A statement with parameters is prepared with one int4 parameter per $n placeholder, in the
// extended protocol (pgx's statement cache, and the describe-then-exec of QueryExecModeExec),
// and through database/sql; it answers 1 whatever the arguments.
func TestFakeServerParameters(t *testing.T) {
	s := FakeServerT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, fakeDSN(s, "sslmode=disable"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeDescribeExec} {
		for range 2 { // the second time from pgx's cache
			var n int
			if err := conn.QueryRow(ctx, "select $1::int + 1", mode, 41).Scan(&n); err != nil {
				t.Fatalf("%v: %v", mode, err)
			}
			if n != 1 {
				t.Fatalf("%v: got %d, want the fake server's 1", mode, n)
			}
		}
	}
	sd, err := conn.Prepare(ctx, "two", "select $2::int + $1::int, '$x'")
	if err != nil {
		t.Fatal(err)
	}
	if len(sd.ParamOIDs) != 2 || sd.ParamOIDs[0] != 23 || sd.ParamOIDs[1] != 23 {
		t.Errorf("parameters of %q: %v, want two int4", sd.SQL, sd.ParamOIDs)
	}
	for q, want := range map[string]int{"select 1": 0, "select $1": 1, "$3 $1 $12": 12, "$": 0, "a$b": 0} {
		if got := placeholders(q); got != want {
			t.Errorf("placeholders(%q) = %d, want %d", q, got, want)
		}
	}

	cfg, err := pgx.ParseConfig(fakeDSN(s, "sslmode=disable"))
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(stdlib.GetConnector(*cfg))
	defer db.Close()
	var n int
	if err := db.QueryRowContext(ctx, "select $1::int + 1", 1).Scan(&n); err != nil || n != 1 {
		t.Errorf("database/sql: %d, %v; want 1", n, err)
	}
}

func TestFakeServerDatabaseSQLConcurrent(t *testing.T) {
	s := FakeServerT(t)
	cfg, err := pgx.ParseConfig(fakeDSN(s, "sslmode=disable"))
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(stdlib.GetConnector(*cfg))
	defer db.Close()
	db.SetMaxIdleConns(0) // a new connection per query

	const workers, perWorker = 8, 5
	var wg sync.WaitGroup
	errs := make(chan error, workers*perWorker)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range perWorker {
				var n int
				if err := db.QueryRow("select 1").Scan(&n); err != nil {
					errs <- err
					return
				}
				if n != 1 {
					errs <- fmt.Errorf("select 1 = %d", n)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.Startups != workers*perWorker || st.Connections != workers*perWorker || st.SSLRequests != 0 {
		t.Errorf("stats = %+v, want %d connections and startups, no SSLRequest", st, workers*perWorker)
	}
}

func TestFakeServerGSSENCRequestAndClose(t *testing.T) {
	s, err := StartFakeServer()
	if err != nil {
		t.Fatal(err)
	}
	host, port := s.Addr()
	c, err := net.DialTimeout("tcp", fmt.Sprintf("%s:%d", host, port), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// GSSENCRequest: length 8, code 80877104.
	if _, err := c.Write([]byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x30}); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	if _, err := c.Read(b); err != nil || b[0] != 'N' {
		t.Fatalf("answer %q, %v; want 'N'", b, err)
	}
	if st := s.Stats(); st.GSSENCRequests != 1 || st.Connections != 1 {
		t.Errorf("stats = %+v", st)
	}
	// Close with the connection still open must not hang.
	done := make(chan error, 1)
	go func() { done <- s.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close hung with an open connection")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}
