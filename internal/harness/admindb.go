package harness

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// ExecAdminIn is ExecAdmin in the database dbname (for example "postgres", where PostgreSQL's
// own test scripts make their objects): sql runs as the superuser over the unix socket,
// whatever pg_hba.conf says about TCP, and the connection is left out of ConnectionsSince.
func (p *Postgres) ExecAdminIn(ctx context.Context, dbname, sql string) error {
	return p.adminIn(ctx, dbname, func(conn *pgx.Conn) error {
		if _, err := conn.Exec(ctx, sql); err != nil {
			return fmt.Errorf("harness: ExecAdminIn %s: %w", dbname, err)
		}
		return nil
	})
}

// LogSince returns what the server wrote to its log after mark (see LogMark): the lines of a
// test's own connections, which PostgreSQL's test scripts read as the outcome of a step.
func (p *Postgres) LogSince(mark int64) string { return p.logSince(mark) }
