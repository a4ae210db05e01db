package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The proxy records, per connection, the requests and the server's answers, and the port the
// server logs for it.
func TestNegotiationProxySteps(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	plain := StartT(t, Options{})
	tls := StartT(t, Options{TLS: true, Major: 18}) // direct TLS is PostgreSQL 17's
	for _, c := range []struct {
		name  string
		srv   *Postgres
		keys  string
		steps [][]string
	}{
		// pgx's sslmode=prefer against a server without TLS: 'N', then a new connection.
		{"prefer, no TLS", plain, "sslmode=prefer", [][]string{{NegSSLReject}, {NegStartup}}},
		{"disable", plain, "sslmode=disable", [][]string{{NegStartup}}},
		{"require, TLS", tls, "sslmode=require", [][]string{{NegSSLAccept}}},
		{"direct TLS", tls, "sslmode=require sslnegotiation=direct", [][]string{{NegDirectSSL}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			px := NegotiationProxyT(t, c.srv.Addr())
			mark := c.srv.LogMark()
			conn := connect(t, ctx, c.srv.DSN("host=127.0.0.1", "port="+strconv.Itoa(px.Port()), c.keys))
			if err := conn.Close(ctx); err != nil {
				t.Fatal(err)
			}
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			if err := px.WaitDone(wctx); err != nil {
				t.Fatal(err)
			}
			conns := px.Conns()
			var steps [][]string
			log := c.srv.LogSince(mark)
			for _, pc := range conns {
				steps = append(steps, pc.Steps)
				if !pc.Done {
					t.Errorf("connection from port %d not done after WaitDone", pc.ServerPort)
				}
				if want := fmt.Sprintf("connection received: host=127.0.0.1 port=%d\n", pc.ServerPort); !strings.Contains(log, want) {
					t.Errorf("the server logged no %q:\n%s", want, log)
				}
			}
			if !reflect.DeepEqual(steps, c.steps) {
				t.Errorf("steps %q, want %q", steps, c.steps)
			}
		})
	}
}

// SetIdent writes pg_ident.conf and the server reads it; PsqlScript feeds psql a script with
// COPY data and prints only what the queries print.
func TestSetIdentAndPsqlScript(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	p := StartT(t, Options{})
	if err := p.SetIdent("mymap  /^(.*)@EXAMPLE\\.COM$  \\1", "mymap  root  app"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(p.DataDir, "pg_ident.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "mymap  root  app\n") {
		t.Errorf("pg_ident.conf:\n%s", b)
	}
	conninfo := fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres", p.SocketDir, p.Port)
	if err := p.ExecAdminIn(ctx, "postgres", "CREATE TABLE seen AS SELECT map_name, sys_name FROM pg_ident_file_mappings"); err != nil {
		t.Fatal(err)
	}
	out, err := PsqlScript(ctx, nil, conninfo, "SELECT count(*) FROM seen WHERE map_name = 'mymap';\n"+
		"CREATE TEMP TABLE t (n int);\nCOPY t FROM STDIN;\n1\n2\n3\n\\.\nSELECT sum(n) FROM t;\n")
	if err != nil {
		t.Fatal(err)
	}
	if out != "2\n6" {
		t.Errorf("psql printed %q, want %q", out, "2\n6")
	}
	if err := p.SetIdent("mymap"); err == nil {
		t.Error("SetIdent took a line the server cannot read")
	}
}
