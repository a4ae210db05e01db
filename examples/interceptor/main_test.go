package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/pgconnector/pgconnector/internal/harness"
)

// The harness removes what it made (clusters, the initdb template) once the tests ran.
func TestMain(m *testing.M) { os.Exit(harness.Run(m)) }

// The server runs the text with the route's comment (its pg_stat_activity.query shows it); the
// logger, outermost, logs the text as the application wrote it, once.
func TestRouteAndLog(t *testing.T) {
	pg := harness.StartT(t, harness.Options{})
	var out bytes.Buffer
	db, err := open(pg.DSN(), slog.New(slog.NewTextHandler(&out, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	seen, err := run(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	const want = "/* route='GET /orders' */ select query from pg_stat_activity"
	if !strings.HasPrefix(seen, want) {
		t.Errorf("the server ran %q, want %q...", seen, want)
	}
	logged := out.String()
	if n := strings.Count(logged, "msg=query"); n != 1 || !strings.Contains(logged, `text="select query from pg_stat_activity`) ||
		strings.Contains(logged, "route=") {
		t.Errorf("logged %q: want one query with the application's text", logged)
	}
}
