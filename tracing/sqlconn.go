package tracing

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"time"

	"github.com/jackc/pgx/v5"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/pgconnector/pgconnector/internal/intercept"
)

// The traced database/sql types. Each has the methods of its pgx counterpart in
// github.com/jackc/pgx/v5/stdlib, no more and no fewer, so that database/sql finds on a traced
// connection the optional interfaces of database/sql/driver it finds on pgx's, and nothing pgx's
// lacks (TestDriverTypesMatchPgx in the root package compares them by reflection, per Go
// release):
//
//	sqlConn   *stdlib.Conn   Conn, Prepare, PrepareContext, Close, Begin, BeginTx, ExecContext,
//	                         QueryContext, Ping, CheckNamedValue, ResetSession
//	sqlStmt   *stdlib.Stmt   Close, NumInput, Exec, ExecContext, Query, QueryContext
//	sqlRows   *stdlib.Rows   Columns, Close, Next, ColumnTypeDatabaseTypeName, ColumnTypeLength,
//	                         ColumnTypePrecisionScale, ColumnTypeScanType; from Go 1.27
//	                         NextRow and ScanColumn (driver.RowsColumnScanner, rows_go1.27.go)
//	sqlTx     pgx's Tx       Commit, Rollback
//
// A Go release that adds an optional interface pgx implements, or a pgx release that implements
// one more, makes that test fail until the type here has it too.

// sqlConn is a connection whose statement-level calls are traced (see [Statements.WrapConn]).
type sqlConn struct {
	conn driver.Conn
	ic   *interceptor
}

// Conn returns the *pgx.Conn of the connection (stdlib.Conn's Conn), or nil when it has none.
func (c *sqlConn) Conn() *pgx.Conn {
	if pc, ok := c.conn.(interface{ Conn() *pgx.Conn }); ok {
		return pc.Conn()
	}
	return nil
}

func (c *sqlConn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

// PrepareContext prepares query in a PREPARE span; the statement's executions are traced with
// query as their text.
func (c *sqlConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	ctx, call := c.ic.begin(ctx, c.ic.s.prepare(c.ic.srv, query))
	var stmt driver.Stmt
	var err error
	if pc, ok := c.conn.(driver.ConnPrepareContext); ok {
		stmt, err = pc.PrepareContext(ctx, query)
	} else {
		stmt, err = c.conn.Prepare(query)
	}
	c.ic.end(ctx, &call, err)
	if err != nil {
		return nil, err
	}
	return &sqlStmt{stmt: stmt, ic: c.ic, query: query}, nil
}

func (c *sqlConn) Close() error { return c.conn.Close() }

func (c *sqlConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

// BeginTx begins a transaction in a BEGIN span. Its COMMIT or ROLLBACK span is a sibling of it,
// a child of the span in ctx: database/sql gives Commit and Rollback no context of their own.
func (c *sqlConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	bctx, call := c.ic.begin(ctx, c.ic.srv.calls[OperationBegin])
	var tx driver.Tx
	var err error
	if bt, ok := c.conn.(driver.ConnBeginTx); ok {
		tx, err = bt.BeginTx(bctx, opts)
	} else if opts.Isolation != driver.IsolationLevel(0) || opts.ReadOnly {
		err = errors.New("pgconnector/tracing: the connection does not support transaction options")
	} else {
		tx, err = c.conn.Begin() //nolint:staticcheck // the connection has no BeginTx
	}
	c.ic.end(bctx, &call, err)
	if err != nil {
		return nil, err
	}
	return &sqlTx{tx: tx, ic: c.ic, ctx: ctx}, nil
}

// ExecContext runs query in a span, with the sqlcommenter comment of StatementConfig.SQLComment.
func (c *sqlConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	ec, ok := c.conn.(driver.ExecerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	ctx, call := c.ic.begin(ctx, c.ic.s.runSQL(c.ic.srv, query, args, execOptions))
	query, args = c.ic.sqlComment(&call, query, args, true)
	res, err := ec.ExecContext(ctx, query, args)
	rowsAffected(&call, res, err)
	c.ic.end(ctx, &call, err)
	return res, err
}

// QueryContext runs query in a span that ends when its rows are closed, with the sqlcommenter
// comment of StatementConfig.SQLComment.
func (c *sqlConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	qc, ok := c.conn.(driver.QueryerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	ctx, call := c.ic.begin(ctx, c.ic.s.runSQL(c.ic.srv, query, args, queryOptions))
	query, args = c.ic.sqlComment(&call, query, args, false)
	rows, err := qc.QueryContext(ctx, query, args)
	return c.ic.rows(ctx, &call, rows, err)
}

// Ping pings in a PING span (with StatementConfig.PingSpans) and measures it.
func (c *sqlConn) Ping(ctx context.Context) error {
	ctx, call := c.ic.begin(ctx, c.ic.srv.calls[OperationPing])
	var err error
	if p, ok := c.conn.(driver.Pinger); ok {
		err = p.Ping(ctx)
	}
	c.ic.end(ctx, &call, err)
	return err
}

// CheckNamedValue is the connection's: pgx takes every value as it is, its options among them.
func (c *sqlConn) CheckNamedValue(nv *driver.NamedValue) error {
	if nvc, ok := c.conn.(driver.NamedValueChecker); ok {
		return nvc.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

// ResetSession is the connection's, in a RESET_SESSION span with StatementConfig.PingSpans (not
// measured).
func (c *sqlConn) ResetSession(ctx context.Context) error {
	rs, ok := c.conn.(driver.SessionResetter)
	if !c.ic.s.cfg.PingSpans {
		if ok {
			return rs.ResetSession(ctx)
		}
		return nil
	}
	ctx, call := c.ic.begin(ctx, c.ic.srv.calls[OperationResetSession])
	call.start = time.Time{}
	var err error
	if ok {
		err = rs.ResetSession(ctx)
	}
	c.ic.end(ctx, &call, err)
	return err
}

// sqlStmt is a prepared statement whose executions are traced with the text it was prepared
// from.
type sqlStmt struct {
	stmt  driver.Stmt
	ic    *interceptor
	query string
}

func (s *sqlStmt) Close() error  { return s.stmt.Close() }
func (s *sqlStmt) NumInput() int { return s.stmt.NumInput() }

func (s *sqlStmt) Exec(args []driver.Value) (driver.Result, error) {
	return s.ExecContext(context.Background(), numbered(args))
}

func (s *sqlStmt) Query(args []driver.Value) (driver.Rows, error) {
	return s.QueryContext(context.Background(), numbered(args))
}

func (s *sqlStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	ctx, call := s.ic.begin(ctx, s.ic.s.runSQL(s.ic.srv, s.query, args, execOptions))
	var res driver.Result
	var err error
	if ec, ok := s.stmt.(driver.StmtExecContext); ok {
		res, err = ec.ExecContext(ctx, args)
	} else {
		var vals []driver.Value
		if vals, err = plainValues(args); err == nil {
			res, err = s.stmt.Exec(vals) //nolint:staticcheck // the statement has no ExecContext
		}
	}
	rowsAffected(&call, res, err)
	s.ic.end(ctx, &call, err)
	return res, err
}

func (s *sqlStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	ctx, call := s.ic.begin(ctx, s.ic.s.runSQL(s.ic.srv, s.query, args, queryOptions))
	var rows driver.Rows
	var err error
	if qc, ok := s.stmt.(driver.StmtQueryContext); ok {
		rows, err = qc.QueryContext(ctx, args)
	} else {
		var vals []driver.Value
		if vals, err = plainValues(args); err == nil {
			rows, err = s.stmt.Query(vals) //nolint:staticcheck // the statement has no QueryContext
		}
	}
	return s.ic.rows(ctx, &call, rows, err)
}

// rowsAffected records the row count of a successful exec, as its result says, on c's span:
// db.response.returned_rows for a SELECT (whose count is of the rows it returned, as pgx's tracer
// records it from the command tag), else pgconnector.rows_affected.
func rowsAffected(c *call, res driver.Result, err error) {
	if err != nil || res == nil || !c.span.IsRecording() {
		return
	}
	// The driver's result: the count is the connector's read, not the application's
	// interceptors' (internal/intercept).
	if n, err := intercept.DriverResult(res).RowsAffected(); err == nil {
		key := RowsAffectedKey
		if c.op == "SELECT" {
			key = semconv.DBResponseReturnedRowsKey
		}
		c.setRows(key, n)
	}
}

// numbered numbers args as database/sql does (ordinals from 1, no names).
func numbered(args []driver.Value) []driver.NamedValue {
	nv := make([]driver.NamedValue, len(args))
	for i, v := range args {
		nv[i] = driver.NamedValue{Ordinal: i + 1, Value: v}
	}
	return nv
}

// plainValues returns the values of args, for a statement without the context methods; it
// refuses named arguments, as database/sql does for such a driver.
func plainValues(args []driver.NamedValue) ([]driver.Value, error) {
	vals := make([]driver.Value, len(args))
	for i, a := range args {
		if a.Name != "" {
			return nil, errors.New("pgconnector/tracing: the statement does not support named arguments")
		}
		vals[i] = a.Value
	}
	return vals, nil
}

// sqlTx is a transaction whose COMMIT and ROLLBACK are traced under the context of its BEGIN.
type sqlTx struct {
	tx  driver.Tx
	ic  *interceptor
	ctx context.Context // BeginTx's
}

func (t *sqlTx) Commit() error {
	ctx, call := t.ic.begin(t.ctx, t.ic.srv.calls[OperationCommit])
	err := t.tx.Commit()
	t.ic.end(ctx, &call, err)
	return err
}

func (t *sqlTx) Rollback() error {
	ctx, call := t.ic.begin(t.ctx, t.ic.srv.calls[OperationRollback])
	err := t.tx.Rollback()
	t.ic.end(ctx, &call, err)
	return err
}

// rows ends c now if the query failed, and when there is nothing to record at its end returns
// the rows as they are; otherwise it returns them traced, so that their Close ends c. ctx is the
// query's, with its span.
func (ic *interceptor) rows(ctx context.Context, c *call, rows driver.Rows, err error) (driver.Rows, error) {
	if err != nil {
		ic.end(ctx, c, err)
		return nil, err
	}
	if !c.span.IsRecording() && c.start.IsZero() {
		c.span.End()
		return rows, nil
	}
	return newSQLRows(sqlRows{ColumnTypes: intercept.ColumnTypes{Under: rows}, ic: ic, ctx: ctx, call: *c}), nil
}

// sqlRows are the rows of a traced query: their Close ends the query's span and measurement,
// with the first error reading them, if any, as the query's outcome.
type sqlRows struct {
	intercept.ColumnTypes // Under: the rows wrapped
	ic                    *interceptor
	ctx                   context.Context
	call                  call
	n                     int64 // rows read
}

func (r *sqlRows) Columns() []string { return r.Under.Columns() }

func (r *sqlRows) Next(dest []driver.Value) error {
	err := r.Under.Next(dest)
	r.read(err)
	return err
}

// read counts a row read, or keeps err, the first error reading the rows (io.EOF is the end of
// them, not one).
func (r *sqlRows) read(err error) {
	switch {
	case err == nil:
		r.n++
	case err != io.EOF && r.call.rowsErr == nil:
		r.call.rowsErr = err
	}
}

func (r *sqlRows) Close() error {
	err := r.Under.Close()
	outcome := err
	if r.call.rowsErr != nil {
		outcome = r.call.rowsErr
	}
	if outcome == nil {
		r.call.setRows(semconv.DBResponseReturnedRowsKey, r.n)
	}
	r.ic.end(r.ctx, &r.call, outcome)
	return err
}

var (
	_ driver.Conn               = (*sqlConn)(nil)
	_ driver.ConnPrepareContext = (*sqlConn)(nil)
	_ driver.ConnBeginTx        = (*sqlConn)(nil)
	_ driver.ExecerContext      = (*sqlConn)(nil)
	_ driver.QueryerContext     = (*sqlConn)(nil)
	_ driver.Pinger             = (*sqlConn)(nil)
	_ driver.NamedValueChecker  = (*sqlConn)(nil)
	_ driver.SessionResetter    = (*sqlConn)(nil)
	_ driver.StmtExecContext    = (*sqlStmt)(nil)
	_ driver.StmtQueryContext   = (*sqlStmt)(nil)
	_ driver.Tx                 = (*sqlTx)(nil)

	_ driver.RowsColumnTypeDatabaseTypeName = (*sqlRows)(nil)
	_ driver.RowsColumnTypeLength           = (*sqlRows)(nil)
	_ driver.RowsColumnTypePrecisionScale   = (*sqlRows)(nil)
	_ driver.RowsColumnTypeScanType         = (*sqlRows)(nil)
)
