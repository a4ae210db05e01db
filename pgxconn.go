package pgconnector

import (
	"database/sql"
	"database/sql/driver"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// PgxConn calls f with the *pgx.Conn under c, a connection of a sql.DB opened on a Connector,
// for what database/sql cannot do: CopyFrom, LISTEN and WaitForNotification, batches, the
// PgConn. f must not keep the *pgx.Conn after it returns, nor close it; database/sql does not use
// c while f runs. What f does on the *pgx.Conn is not traced as statements (it does not go
// through database/sql), and a transaction f leaves open makes database/sql discard the
// connection when it is returned to the pool.
//
//	conn, err := db.Conn(ctx)
//	...
//	defer conn.Close()
//	err = pgconnector.PgxConn(conn, func(pc *pgx.Conn) error {
//		_, err := pc.CopyFrom(ctx, pgx.Identifier{"t"}, []string{"a", "b"}, pgx.CopyFromRows(rows))
//		return err
//	})
//
// sql.Conn.Raw alone does not give the *pgx.Conn back when statement spans are on: the
// connection is wrapped by the statement tracer, whose type is not exported.
func PgxConn(c *sql.Conn, f func(*pgx.Conn) error) error {
	return c.Raw(func(dc any) error {
		pc := pgxConnOf(dc)
		if pc == nil {
			return errNotPgx
		}
		return f(pc)
	})
}

var errNotPgx = errors.New("pgconnector: the connection is not one of a pgconnector Connector")

// pgxConnOf returns the *pgx.Conn of a driver connection a Connector returned, or nil.
//
// Under the statement tracer's wrapper (sqlmw's, whose type is private) the only way in is a
// method the wrapper forwards as it is: CheckNamedValue, which every middleware must forward for
// pgx to receive its argument types. A request value no caller of database/sql can make (its type
// is not exported) asks pgxConn for its connection; any other value goes on to pgx.
func pgxConnOf(dc any) *pgx.Conn {
	if c, ok := dc.(interface{ Conn() *pgx.Conn }); ok { // *stdlib.Conn, *pgxConn
		return c.Conn()
	}
	if nvc, ok := dc.(driver.NamedValueChecker); ok {
		var req pgxConnRequest
		if err := nvc.CheckNamedValue(&driver.NamedValue{Ordinal: 1, Value: &req}); err == nil {
			return req.conn
		}
	}
	return nil
}

// pgxConn is the connection the statement tracer wraps: pgx's, answering pgxConnRequest.
type pgxConn struct {
	*stdlib.Conn
}

// pgxConnRequest asks, through CheckNamedValue, for the *pgx.Conn of a pgxConn.
type pgxConnRequest struct{ conn *pgx.Conn }

// CheckNamedValue answers a pgxConnRequest and passes every other value to pgx.
func (c *pgxConn) CheckNamedValue(nv *driver.NamedValue) error {
	if req, ok := nv.Value.(*pgxConnRequest); ok {
		req.conn = c.Conn.Conn()
		return nil
	}
	return c.Conn.CheckNamedValue(nv)
}
