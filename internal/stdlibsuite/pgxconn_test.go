package stdlibsuite

import (
	"bytes"
	"database/sql"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pgconnector/pgconnector"
)

// withPgxConn calls f with the *pgx.Conn under conn: through conn.Raw and *stdlib.Conn's Conn
// for pgx's driver, through pgconnector.PgxConn for the connector.
func withPgxConn(conn *sql.Conn, f func(*pgx.Conn) error) error {
	viaStdlib := false
	err := conn.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return nil
		}
		viaStdlib = true
		return f(sc.Conn())
	})
	if viaStdlib || err != nil {
		return err
	}
	return pgconnector.PgxConn(conn, f)
}

// The *pgx.Conn under a database/sql connection runs queries, and the connection goes on
// serving database/sql after (upstream TestConnRaw, through PgxConn for the connector).
func TestPgxConn(t *testing.T) {
	t.Parallel()
	bothDrivers(t, allModes, func(t *testing.T, db *sql.DB) []int {
		ctx := caseContext(t)
		conn := mustConn(t, ctx, db)
		var n, pgxPID, sqlPID int
		err := withPgxConn(conn, func(pc *pgx.Conn) error {
			pgxPID = int(pc.PgConn().PID())
			return pc.QueryRow(ctx, "select 42").Scan(&n)
		})
		if err != nil || n != 42 {
			t.Errorf("select 42 through pgx: %d, %v", n, err)
		}
		if err := conn.QueryRowContext(ctx, "select pg_backend_pid()").Scan(&sqlPID); err != nil {
			t.Fatal(err)
		}
		if sqlPID != pgxPID {
			t.Errorf("database/sql's session is %d, the pgx.Conn's %d", sqlPID, pgxPID)
		}
		return []int{n}
	})
}

// COPY FROM through the *pgx.Conn (CopyFrom), then COPY TO (the PgConn's CopyTo), with what
// database/sql reads of the table on the same session.
func TestCopy(t *testing.T) {
	t.Parallel()
	type result struct {
		Copied int64
		Read   []string
		Out    string
	}
	bothDrivers(t, allModes, func(t *testing.T, db *sql.DB) result {
		ctx := caseContext(t)
		conn := mustConn(t, ctx, db)
		mustExec(t, ctx, conn, "create temporary table copied(a int, b text, c bytea)")
		input := [][]any{
			{1, "one", []byte{1}},
			{2, nil, []byte{}},
			{3, "three\ttab", nil},
		}
		var r result
		err := withPgxConn(conn, func(pc *pgx.Conn) error {
			var err error
			r.Copied, err = pc.CopyFrom(ctx, pgx.Identifier{"copied"}, []string{"a", "b", "c"}, pgx.CopyFromRows(input))
			return err
		})
		if err != nil || r.Copied != 3 {
			t.Fatalf("CopyFrom: %d rows, %v; want 3", r.Copied, err)
		}
		rows, err := conn.QueryContext(ctx, "select a, coalesce(b, 'NULL'), coalesce(encode(c, 'hex'), 'NULL') from copied order by a")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var a, b, c string
			if err := rows.Scan(&a, &b, &c); err != nil {
				t.Fatal(err)
			}
			r.Read = append(r.Read, a+" "+b+" "+c)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if want := []string{"1 one 01", "2 NULL ", "3 three\ttab NULL"}; !slices.Equal(r.Read, want) {
			t.Errorf("read back %q, want %q", r.Read, want)
		}

		var out bytes.Buffer
		err = withPgxConn(conn, func(pc *pgx.Conn) error {
			_, err := pc.PgConn().CopyTo(ctx, &out, "copy (select a, b from copied order by a) to stdout")
			return err
		})
		if err != nil {
			t.Fatalf("CopyTo: %v", err)
		}
		r.Out = out.String()
		if want := "1\tone\n2\t\\N\n3\tthree\\ttab\n"; r.Out != want {
			t.Errorf("COPY TO: %q, want %q", r.Out, want)
		}
		return r
	})
}

// Large objects through the *pgx.Conn, in a transaction of pgx: created, written, read back,
// truncated and unlinked; database/sql then finds none left.
func TestLargeObjects(t *testing.T) {
	t.Parallel()
	type result struct {
		Read, Truncated string
		Size            int64
		Left            int
	}
	bothDrivers(t, onlyDefault, func(t *testing.T, db *sql.DB) result {
		ctx := caseContext(t)
		conn := mustConn(t, ctx, db)
		var r result
		var oid uint32
		err := withPgxConn(conn, func(pc *pgx.Conn) error {
			tx, err := pc.Begin(ctx)
			if err != nil {
				return err
			}
			defer tx.Rollback(ctx)
			los := tx.LargeObjects()
			if oid, err = los.Create(ctx, 0); err != nil {
				return err
			}
			lo, err := los.Open(ctx, oid, pgx.LargeObjectModeRead|pgx.LargeObjectModeWrite)
			if err != nil {
				return err
			}
			if _, err := lo.Write([]byte("a large object of pgx")); err != nil {
				return err
			}
			if r.Size, err = lo.Seek(0, io.SeekEnd); err != nil {
				return err
			}
			if _, err := lo.Seek(0, io.SeekStart); err != nil {
				return err
			}
			b, err := io.ReadAll(lo)
			if err != nil {
				return err
			}
			r.Read = string(b)
			if err := lo.Truncate(7); err != nil {
				return err
			}
			if _, err := lo.Seek(0, io.SeekStart); err != nil {
				return err
			}
			if b, err = io.ReadAll(lo); err != nil {
				return err
			}
			r.Truncated = string(b)
			if err := lo.Close(); err != nil {
				return err
			}
			if err := los.Unlink(ctx, oid); err != nil {
				return err
			}
			return tx.Commit(ctx)
		})
		if err != nil {
			t.Fatalf("large object: %v", err)
		}
		if r.Read != "a large object of pgx" || r.Size != 21 || r.Truncated != "a large" {
			t.Errorf("large object: %+v", r)
		}
		if err := conn.QueryRowContext(ctx, "select count(*) from pg_largeobject_metadata where oid = $1", oid).Scan(&r.Left); err != nil {
			t.Fatal(err)
		}
		if r.Left != 0 {
			t.Errorf("the unlinked large object is still there")
		}
		return r
	})
}

// Idle connections whose backends were terminated are found out when database/sql reuses them
// (pgx's ResetSession pings a connection idle for more than a second) and replaced (upstream
// TestCheckIdleConn). A fourth connection of the pool terminates the other three and stays
// out of the pool until the end.
func TestTerminatedIdleConnections(t *testing.T) {
	t.Parallel()
	type result struct {
		PingErr        string
		Open           int
		ReusedOriginal bool
	}
	bothDrivers(t, onlyDefault, func(t *testing.T, db *sql.DB) result {
		ctx := caseContext(t)
		var conns []*sql.Conn
		for range 4 {
			conns = append(conns, mustConn(t, ctx, db))
		}
		controller, conns := conns[3], conns[:3]
		var pids []int32
		var originals []*pgx.Conn
		for _, c := range conns {
			err := withPgxConn(c, func(pc *pgx.Conn) error {
				pids = append(pids, int32(pc.PgConn().PID()))
				originals = append(originals, pc)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		var terminated int
		err := controller.QueryRowContext(ctx, "select count(*) from unnest($1::int4[]) pid where pg_terminate_backend(pid)", pids).Scan(&terminated)
		if err != nil || terminated != 3 {
			t.Fatalf("terminating the backends: %d, %v", terminated, err)
		}
		// database/sql keeps two of them idle (its default) and closes the third.
		for _, c := range conns {
			c.Close()
		}
		time.Sleep(1100 * time.Millisecond) // past pgx's ping interval

		var r result
		r.PingErr = errText(db.PingContext(ctx))
		if r.PingErr != "" {
			t.Errorf("Ping: %s", r.PingErr)
		}
		r.Open = db.Stats().OpenConnections
		if r.Open != 2 {
			t.Errorf("%d open connections after the ping, want the controller and a new one", r.Open)
		}
		c := mustConn(t, ctx, db)
		err = withPgxConn(c, func(pc *pgx.Conn) error {
			r.ReusedOriginal = slices.Contains(originals, pc)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if r.ReusedOriginal {
			t.Errorf("database/sql handed out a terminated connection")
		}
		return r
	})
}
