package harness

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// PsqlScript runs psql as Psql does, with a script on its standard input (psql -f -) in place
// of one query: statements, and after a COPY ... FROM STDIN its data lines ended by "\.", as
// PostgreSQL's test scripts feed psql, and quiet (-q) as they run it: it returns what the
// script's queries printed, without the command tags (CREATE TABLE, COPY 100000).
func PsqlScript(ctx context.Context, env []string, conninfo, script string) (string, error) {
	return runPsql(ctx, env, conninfo, strings.NewReader(script), "-q", "-f", "-")
}

// SetIdent replaces pg_ident.conf with lines ("MAPNAME SYSTEM-USERNAME PG-USERNAME", none for
// an empty file) and reloads the server, returning once new connections use the new maps (the
// server reads pg_ident.conf with pg_hba.conf). The file is written before the server checks
// it: a line it cannot read makes the reload's error, and leaves the server on the old maps.
func (p *Postgres) SetIdent(lines ...string) error {
	for _, l := range lines {
		if strings.ContainsAny(l, "\n\r\x00") {
			return errors.New("harness: a pg_ident.conf line contains a line break or NUL")
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	body := "# Written by the pgconnector test harness.\n"
	for _, l := range lines {
		body += l + "\n"
	}
	if err := p.env.acct.writeFile(filepath.Join(p.DataDir, "pg_ident.conf"), []byte(body), 0o600); err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	return p.reload(ctx)
}
