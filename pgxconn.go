package pgconnector

import (
	"database/sql"
	"errors"

	"github.com/jackc/pgx/v5"
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
// sql.Conn.Raw gives the driver connection: pgx's *stdlib.Conn with statement spans off, else the
// statement tracer's, whose type is not exported (with WithInterceptor and statement spans off,
// the interceptors' wrapper). Each has pgx's method
// `Conn() *pgx.Conn`, which PgxConn calls.
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
func pgxConnOf(dc any) *pgx.Conn {
	if c, ok := dc.(interface{ Conn() *pgx.Conn }); ok { // *stdlib.Conn, the statement tracer's
		return c.Conn()
	}
	return nil
}
