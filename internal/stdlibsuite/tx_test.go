package stdlibsuite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A rolled back transaction leaves nothing, a committed one its row (upstream
// TestTransactionLifeCycle).
func TestTransactionLifeCycle(t *testing.T) {
	t.Parallel()
	bothDrivers(t, allModes, func(t *testing.T, db *sql.DB) []int {
		ctx := caseContext(t)
		conn := mustConn(t, ctx, db)
		mustExec(t, ctx, conn, "create temporary table t(a varchar not null)")
		var counts []int
		for _, commit := range []bool{false, true} {
			tx, err := conn.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			mustExec(t, ctx, tx, "insert into t values('hi')")
			if commit {
				err = tx.Commit()
			} else {
				err = tx.Rollback()
			}
			if err != nil {
				t.Fatalf("commit %v: %v", commit, err)
			}
			var n int
			if err := conn.QueryRowContext(ctx, "select count(*) from t").Scan(&n); err != nil {
				t.Fatal(err)
			}
			counts = append(counts, n)
		}
		if counts[0] != 0 || counts[1] != 1 {
			t.Errorf("rows after a rollback, then a commit: %v; want [0 1]", counts)
		}
		return counts
	})
}

// database/sql's isolation levels map to PostgreSQL's, with read only on top; Write Committed
// and Linearizable are refused (upstream TestConnBeginTxIsolation, TestConnBeginTxReadOnly).
func TestBeginTxOptions(t *testing.T) {
	t.Parallel()
	type outcome struct {
		Isolation, ReadOnly, Err string
	}
	cases := []struct {
		opts sql.TxOptions
		want outcome // Isolation "" is the server's default
	}{
		{sql.TxOptions{}, outcome{"", "off", ""}},
		{sql.TxOptions{Isolation: sql.LevelReadUncommitted}, outcome{"read uncommitted", "off", ""}},
		{sql.TxOptions{Isolation: sql.LevelReadCommitted}, outcome{"read committed", "off", ""}},
		{sql.TxOptions{Isolation: sql.LevelRepeatableRead}, outcome{"repeatable read", "off", ""}},
		{sql.TxOptions{Isolation: sql.LevelSnapshot}, outcome{"repeatable read", "off", ""}},
		{sql.TxOptions{Isolation: sql.LevelSerializable}, outcome{"serializable", "off", ""}},
		{sql.TxOptions{ReadOnly: true}, outcome{"", "on", ""}},
		{sql.TxOptions{Isolation: sql.LevelSerializable, ReadOnly: true}, outcome{"serializable", "on", ""}},
		{sql.TxOptions{Isolation: sql.LevelWriteCommitted}, outcome{Err: "unsupported isolation: 3"}},
		{sql.TxOptions{Isolation: sql.LevelLinearizable}, outcome{Err: "unsupported isolation: 7"}},
	}
	bothDrivers(t, allModes, func(t *testing.T, db *sql.DB) []outcome {
		ctx := caseContext(t)
		var defaultLevel string
		if err := db.QueryRowContext(ctx, "show transaction_isolation").Scan(&defaultLevel); err != nil {
			t.Fatal(err)
		}
		var got []outcome
		for _, c := range cases {
			name := fmt.Sprintf("%v read only %v", c.opts.Isolation, c.opts.ReadOnly)
			want := c.want
			if want.Isolation == "" && want.Err == "" {
				want.Isolation = defaultLevel
			}
			var o outcome
			tx, err := db.BeginTx(ctx, &c.opts)
			if err == nil {
				if err := tx.QueryRowContext(ctx, "show transaction_isolation").Scan(&o.Isolation); err != nil {
					t.Errorf("%s: %v", name, err)
				}
				if err := tx.QueryRowContext(ctx, "show transaction_read_only").Scan(&o.ReadOnly); err != nil {
					t.Errorf("%s: %v", name, err)
				}
				if err := tx.Rollback(); err != nil {
					t.Errorf("%s: Rollback: %v", name, err)
				}
			}
			o.Err = errText(err)
			if o != want {
				t.Errorf("%s: %+v, want %+v", name, o, want)
			}
			got = append(got, o)
		}

		tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		_, err = tx.ExecContext(ctx, "create temporary table t(n int)")
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "25006" {
			t.Errorf("a write in a read-only transaction: %v; want SQLSTATE 25006", err)
		}
		return append(got, outcome{Err: errText(err)})
	})
}

// A transaction whose context is canceled is rolled back: its Commit fails and its table is
// gone (upstream TestBeginTxContextCancel).
func TestBeginTxContextCancel(t *testing.T) {
	t.Parallel()
	bothDrivers(t, allModes, func(t *testing.T, db *sql.DB) []string {
		ctx := caseContext(t)
		table := uniqueName("tx_cancel")
		txCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		tx, err := db.BeginTx(txCtx, nil)
		if err != nil {
			t.Fatal(err)
		}
		mustExec(t, ctx, tx, "create table "+table+"(id serial)")
		cancel()
		err = tx.Commit()
		// Which of the two depends on whether database/sql's rollback on the cancel ran first.
		if !errors.Is(err, context.Canceled) && !errors.Is(err, sql.ErrTxDone) {
			t.Errorf("Commit after the cancel: %v; want context.Canceled or sql.ErrTxDone", err)
		}
		var n int
		err = db.QueryRowContext(ctx, "select count(*) from "+table).Scan(&n)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42P01" {
			t.Errorf("the table after the cancel: %d rows, %v; want SQLSTATE 42P01", n, err)
			db.ExecContext(ctx, "drop table if exists "+table)
		}
		code := ""
		if pgErr != nil {
			code = pgErr.Code
		}
		return []string{code}
	})
}

// A transaction begun with a statement and left open makes database/sql discard the
// connection (pgx's ResetSession), in database/sql or through the pgx.Conn under it (upstream
// TestOpenTransactionsDiscarded; pgconnector.PgxConn's documentation): each round gets a new
// session, in which the temporary table does not exist yet.
func TestOpenTransactionDiscarded(t *testing.T) {
	t.Parallel()
	bothDrivers(t, allModes, func(t *testing.T, db *sql.DB) []string {
		ctx := caseContext(t)
		db.SetMaxOpenConns(1)
		var got []string
		pids := map[int]bool{}
		for round := range 4 {
			func() {
				conn := mustConn(t, ctx, db)
				defer conn.Close()
				var pid int
				if err := conn.QueryRowContext(ctx, "select pg_backend_pid()").Scan(&pid); err != nil {
					t.Fatal(err)
				}
				pids[pid] = true
				var err error
				if round%2 == 0 {
					_, err = conn.ExecContext(ctx, "begin")
				} else {
					err = withPgxConn(conn, func(pc *pgx.Conn) error {
						_, err := pc.Exec(ctx, "begin")
						return err
					})
				}
				if err != nil {
					t.Fatalf("begin: %v", err)
				}
				_, err = conn.ExecContext(ctx, "create temporary table in_tx_discard_test(id int)")
				if err != nil {
					t.Errorf("round %d: %v", round, err)
				}
				got = append(got, errText(err))
			}()
		}
		if len(pids) != 4 {
			t.Errorf("4 rounds had %d backends; want a new one each", len(pids))
		}
		return append(got, fmt.Sprint(len(pids)))
	})
}
