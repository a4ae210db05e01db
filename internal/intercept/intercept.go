// Package intercept runs the database/sql driver calls of a connection through a chain of
// github.com/ngrok/sqlmw interceptors, as nested sqlmw drivers would, with wrappers that have the
// methods of pgx's driver types (stdlib.Conn, stdlib.Stmt, stdlib.Rows, its transaction) and no
// other, unlike sqlmw's own wrappers.
//
// Interceptor i of a [Chain] (0 the outermost) is handed, as its next step, what interceptor
// i+1 wraps (the driver's own connection, statement, rows or transaction after the last one),
// and the context it returns from ConnBeginTx, ConnPrepareContext, ConnQueryContext and
// StmtQueryContext is the one its own later calls get: TxCommit and TxRollback from its
// BeginTx, StmtClose from its prepare, RowsNext and RowsClose from its query. The results of
// an exec pass LastInsertId and RowsAffected through ResultLastInsertId and ResultRowsAffected;
// [DriverResult] reads the driver's result under them.
//
// Not intercepted, as in sqlmw: Close, ResetSession, CheckNamedValue, NumInput, Columns and the
// column-type methods (those of the driver's rows, under the interceptors' wrappers: a rows
// wrapper of an interceptor's own is looked through with sqlmw.RowsUnwrapper).
//
// On Go 1.27, where database/sql reads rows that are a driver.RowsColumnScanner with NextRow and
// ScanColumn instead of Next, the rows are one too when the driver's are: each NextRow runs
// RowsNext of every interceptor once, with a dest of one nil per column, and the driver's rows
// advance with NextRow where the last interceptor calls Next. The row is not decoded to driver
// values (database/sql then scans each column from the driver's row with ScanColumn, with pgx's
// types: arrays into slices, ranges into pgtype values); what an interceptor writes to dest is
// not used. sqlmw has no ScanColumn hook: ScanColumn is the driver's.
package intercept

import (
	"context"
	"database/sql/driver"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/ngrok/sqlmw"
)

// Chain is a list of interceptors, the first outermost. The zero value intercepts nothing.
type Chain []sqlmw.Interceptor

// Connect runs ConnectorConnect of each interceptor, the first outermost, around
// connector.Connect, and returns the connection wrapped so that its calls pass through the
// interceptors. Without interceptors it is connector.Connect(ctx).
func (ch Chain) Connect(ctx context.Context, connector driver.Connector) (driver.Conn, error) {
	if len(ch) == 0 {
		return connector.Connect(ctx)
	}
	return (&layerConnector{ch: ch, last: connector}).Connect(ctx)
}

// layerConnector is the connector interceptor i gets as its next step: i+1's, or the last.
type layerConnector struct {
	ch   Chain
	i    int
	last driver.Connector
}

func (c *layerConnector) Connect(ctx context.Context) (driver.Conn, error) {
	if c.i == len(c.ch) {
		return c.last.Connect(ctx)
	}
	conn, err := c.ch[c.i].ConnectorConnect(ctx, &layerConnector{ch: c.ch, i: c.i + 1, last: c.last})
	if err != nil {
		return nil, err
	}
	return &Conn{intr: c.ch[c.i], parent: conn}, nil
}

func (c *layerConnector) Driver() driver.Driver { return c.last.Driver() }

// Conn is a connection whose calls pass through one interceptor, then parent (the next
// interceptor's Conn, or the driver's connection). Its methods are those of pgx's *stdlib.Conn.
type Conn struct {
	intr   sqlmw.Interceptor
	parent driver.Conn
}

// Conn returns the *pgx.Conn under c, or nil when there is none.
func (c *Conn) Conn() *pgx.Conn {
	if pc, ok := c.parent.(interface{ Conn() *pgx.Conn }); ok {
		return pc.Conn()
	}
	return nil
}

func (c *Conn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

func (c *Conn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	ctx, stmt, err := c.intr.ConnPrepareContext(ctx, parentConn{c.parent}, query)
	if err != nil {
		return nil, err
	}
	return &Stmt{intr: c.intr, ctx: ctx, query: query, parent: stmt}, nil
}

func (c *Conn) Close() error { return c.parent.Close() }

func (c *Conn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *Conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	ctx, tx, err := c.intr.ConnBeginTx(ctx, parentConn{c.parent}, opts)
	if err != nil {
		return nil, err
	}
	return &Tx{intr: c.intr, ctx: ctx, parent: tx}, nil
}

func (c *Conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	ec, ok := c.parent.(driver.ExecerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	res, err := c.intr.ConnExecContext(ctx, ec, query, args)
	if err != nil {
		return nil, err
	}
	return &Result{intr: c.intr, parent: res}, nil
}

func (c *Conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	qc, ok := c.parent.(driver.QueryerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	ctx, rows, err := c.intr.ConnQueryContext(ctx, qc, query, args)
	if err != nil {
		return nil, err
	}
	return wrapRows(c.intr, ctx, rows), nil
}

// Ping passes through ConnPing when the connection under c pings, as in sqlmw.
func (c *Conn) Ping(ctx context.Context) error {
	if p, ok := c.parent.(driver.Pinger); ok {
		return c.intr.ConnPing(ctx, p)
	}
	return nil
}

func (c *Conn) CheckNamedValue(nv *driver.NamedValue) error {
	if nvc, ok := c.parent.(driver.NamedValueChecker); ok {
		return nvc.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

func (c *Conn) ResetSession(ctx context.Context) error {
	if rs, ok := c.parent.(driver.SessionResetter); ok {
		return rs.ResetSession(ctx)
	}
	return nil
}

// parentConn is the next step of a connection's interceptor: BeginTx and PrepareContext fall
// back on Begin and Prepare, as database/sql would.
type parentConn struct{ driver.Conn }

func (c parentConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if bt, ok := c.Conn.(driver.ConnBeginTx); ok {
		return bt.BeginTx(ctx, opts)
	}
	if opts.Isolation != driver.IsolationLevel(0) || opts.ReadOnly {
		return nil, errors.New("pgconnector: the connection does not support transaction options")
	}
	return c.Conn.Begin() //nolint:staticcheck // the connection has no BeginTx
}

func (c parentConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if pc, ok := c.Conn.(driver.ConnPrepareContext); ok {
		return pc.PrepareContext(ctx, query)
	}
	return c.Conn.Prepare(query)
}

// Stmt is a prepared statement whose executions and Close pass through one interceptor. Its
// methods are those of pgx's *stdlib.Stmt.
type Stmt struct {
	intr   sqlmw.Interceptor
	ctx    context.Context // the interceptor's ConnPrepareContext's, for StmtClose
	query  string          // as the interceptor was given it
	parent driver.Stmt
}

func (s *Stmt) Close() error  { return s.intr.StmtClose(s.ctx, s.parent) }
func (s *Stmt) NumInput() int { return s.parent.NumInput() }

// Exec and Query are the statement's, not intercepted (as in sqlmw): database/sql calls
// ExecContext and QueryContext.
func (s *Stmt) Exec(args []driver.Value) (driver.Result, error) {
	return s.parent.Exec(args) //nolint:staticcheck // pgx's Stmt has it
}

func (s *Stmt) Query(args []driver.Value) (driver.Rows, error) {
	return s.parent.Query(args) //nolint:staticcheck // pgx's Stmt has it
}

func (s *Stmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	res, err := s.intr.StmtExecContext(ctx, parentStmt{s.parent}, s.query, args)
	if err != nil {
		return nil, err
	}
	return &Result{intr: s.intr, parent: res}, nil
}

func (s *Stmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	ctx, rows, err := s.intr.StmtQueryContext(ctx, parentStmt{s.parent}, s.query, args)
	if err != nil {
		return nil, err
	}
	return wrapRows(s.intr, ctx, rows), nil
}

// parentStmt is the next step of a statement's interceptor. pgx's statements have ExecContext
// and QueryContext; a statement without them fails the call.
type parentStmt struct{ driver.Stmt }

var errNoContext = errors.New("pgconnector: the driver's statement has no ExecContext or QueryContext")

func (s parentStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	if ec, ok := s.Stmt.(driver.StmtExecContext); ok {
		return ec.ExecContext(ctx, args)
	}
	return nil, errNoContext
}

func (s parentStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	if qc, ok := s.Stmt.(driver.StmtQueryContext); ok {
		return qc.QueryContext(ctx, args)
	}
	return nil, errNoContext
}

// Tx is a transaction whose Commit and Rollback pass through one interceptor, with the context
// its ConnBeginTx returned.
type Tx struct {
	intr   sqlmw.Interceptor
	ctx    context.Context
	parent driver.Tx
}

func (t *Tx) Commit() error   { return t.intr.TxCommit(t.ctx, t.parent) }
func (t *Tx) Rollback() error { return t.intr.TxRollback(t.ctx, t.parent) }

// Result is the result of an exec whose LastInsertId and RowsAffected pass through one
// interceptor.
type Result struct {
	intr   sqlmw.Interceptor
	parent driver.Result
}

func (r *Result) LastInsertId() (int64, error) { return r.intr.ResultLastInsertId(r.parent) }
func (r *Result) RowsAffected() (int64, error) { return r.intr.ResultRowsAffected(r.parent) }

// DriverResult returns the result under the interceptors' Results, for a read of the
// connector's own that no interceptor is to see (the row count of a span).
func DriverResult(res driver.Result) driver.Result {
	for {
		r, ok := res.(*Result)
		if !ok {
			return res
		}
		res = r.parent
	}
}

var (
	_ driver.Conn               = (*Conn)(nil)
	_ driver.ConnPrepareContext = (*Conn)(nil)
	_ driver.ConnBeginTx        = (*Conn)(nil)
	_ driver.ExecerContext      = (*Conn)(nil)
	_ driver.QueryerContext     = (*Conn)(nil)
	_ driver.Pinger             = (*Conn)(nil)
	_ driver.NamedValueChecker  = (*Conn)(nil)
	_ driver.SessionResetter    = (*Conn)(nil)
	_ driver.StmtExecContext    = (*Stmt)(nil)
	_ driver.StmtQueryContext   = (*Stmt)(nil)
	_ driver.Tx                 = (*Tx)(nil)
	_ driver.Result             = (*Result)(nil)
	_ driver.Connector          = (*layerConnector)(nil)
)
