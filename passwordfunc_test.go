package pgconnector_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
)

// TestPasswordFuncPrecedence: with WithPasswordFunc the connection string's password,
// PGPASSWORD and the password file are not sent (before: the connection string's password went
// to the server); a password WithBeforeConnect sets wins over the function, which is then not
// called; without WithPasswordFunc, WithBeforeConnect sees the connection string's password as
// before. The server is the harness's PasswordTrap, which records the cleartext passwords it
// is sent.
func TestPasswordFuncPrecedence(t *testing.T) {
	ln, err := harness.Listen()
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	trap := harness.PasswordTrapT(t, addr)
	host, port := "127.0.0.1", addr[len("127.0.0.1:"):]
	passfile := filepath.Join(t.TempDir(), "pgpass")
	if err := os.WriteFile(passfile, []byte(fmt.Sprintf("%s:%s:*:*:filepw\n", host, port)), 0o600); err != nil {
		t.Fatal(err)
	}
	var funcCalls atomic.Int32
	pwFunc := pgconnector.WithPasswordFunc(func(ctx context.Context, r pgconnector.PasswordRequest) (string, time.Time, error) {
		funcCalls.Add(1)
		return "funcpw", time.Time{}, nil
	})
	var seen string // what WithBeforeConnect found in cfg.Password
	hook := func(set string) pgconnector.Option {
		return pgconnector.WithBeforeConnect(func(ctx context.Context, cfg *pgx.ConnConfig) error {
			seen = cfg.Password
			if set != "" {
				cfg.Password = set
			}
			return nil
		})
	}
	base := fmt.Sprintf("host=%s port=%s user=app dbname=app sslmode=disable gssencmode=disable connect_timeout=5 passfile=%s", host, port, passfile)
	for _, tc := range []struct {
		name      string
		dsn       string
		env       string // PGPASSWORD
		opts      []pgconnector.Option
		seen      string   // by WithBeforeConnect ("-": no hook)
		sent      string   // the password the trap must get ("": not checked)
		notSent   []string // passwords the trap must not get
		funcCalls int32    // at most
	}{
		{"func: string's password and file not used", base + " password=dsnpw", "", []pgconnector.Option{pwFunc}, "-", "", []string{"dsnpw", "filepw"}, 1},
		{"func: PGPASSWORD not used", base, "envpw", []pgconnector.Option{pwFunc}, "-", "", []string{"envpw", "filepw"}, 1},
		{"func: WithBeforeConnect sees none", base + " password=dsnpw", "", []pgconnector.Option{pwFunc, hook("")}, "", "", []string{"dsnpw", "filepw"}, 1},
		{"func: WithBeforeConnect's password wins", base + " password=dsnpw", "", []pgconnector.Option{pwFunc, hook("hookpw")}, "", "hookpw", nil, 0},
		{"no func: the string's password as before", base + " password=dsnpw", "", []pgconnector.Option{hook("")}, "dsnpw", "dsnpw", nil, 0},
		{"no func: the password file as before", base, "", nil, "-", "filepw", nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("PGPASSWORD", tc.env)
			if tc.env == "" {
				os.Unsetenv("PGPASSWORD")
			}
			funcCalls.Store(0)
			seen = "-"
			before := len(trap.Passwords())
			c, err := pgconnector.New(tc.dsn, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			conn, err := c.Connect(context.Background())
			if err == nil {
				conn.Close()
			}
			got := trap.Passwords()[before:]
			if tc.sent != "" && (err != nil || !slices.Equal(got, []string{tc.sent})) {
				t.Fatalf("sent %q (connect error %v), want %q", got, err, tc.sent)
			}
			for _, p := range tc.notSent {
				if slices.Contains(got, p) {
					t.Fatalf("sent %q, which WithPasswordFunc replaces", p)
				}
			}
			if seen != tc.seen {
				t.Fatalf("WithBeforeConnect saw password %q, want %q", seen, tc.seen)
			}
			if n := funcCalls.Load(); n > tc.funcCalls {
				t.Fatalf("%d calls of the password function, want at most %d", n, tc.funcCalls)
			}
		})
	}
}
