package pgconnector_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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

// TestPasswordFuncLive: WithPasswordFunc on PostgreSQL 16, 17 and 18 over verify-full TLS, for a
// cleartext password request (hba "password" on hostssl, what IAM servers ask for) and for
// SCRAM: one call for the connects of a connector and for a cold herd of 8 (a password fetched
// in WithBeforeConnect: 8); a password in the last fifth of its life is refreshed in the
// background, the later connects get the new one; a failing function's error wraps it and holds
// no password.
func TestPasswordFuncLive(t *testing.T) {
	majors := []int{16, 17, 18}
	for _, major := range majors {
		t.Run("PostgreSQL "+strconv.Itoa(major), func(t *testing.T) {
			p := harness.StartT(t, harness.Options{Major: major, TLS: true, HBA: []string{
				"hostssl all iam 127.0.0.1/32 password",
				"hostssl all all 127.0.0.1/32 scram-sha-256",
			}})
			const iamPassword, scramPassword = "Iam-Secret-1", "Scram-Secret-2"
			execAdmin(t, p, "CREATE ROLE iam LOGIN PASSWORD '"+iamPassword+"'")
			execAdmin(t, p, "CREATE ROLE scrammed LOGIN PASSWORD '"+scramPassword+"'")
			dsn := func(user string) string {
				return "host=127.0.0.1 port=" + strconv.Itoa(p.Port) + " user=" + user + " dbname=" + p.Database +
					" sslmode=verify-full sslrootcert=" + p.CAFile
			}
			var calls atomic.Int32
			passwordFunc := func(password string) pgconnector.Option {
				return pgconnector.WithPasswordFunc(func(ctx context.Context, r pgconnector.PasswordRequest) (string, time.Time, error) {
					calls.Add(1)
					time.Sleep(20 * time.Millisecond) // a network call: the herd comes in meanwhile
					return password, time.Now().Add(15 * time.Minute), nil
				})
			}
			for _, tc := range []struct{ method, user, password string }{
				{"cleartext over TLS", "iam", iamPassword},
				{"SCRAM", "scrammed", scramPassword},
			} {
				t.Run(tc.method, func(t *testing.T) {
					calls.Store(0)
					db := openNoIdle(t, dsn(tc.user), passwordFunc(tc.password))
					if n := backendsOf(t, p, func() {
						for range 3 {
							if err := db.Ping(); err != nil {
								t.Fatal(err)
							}
						}
					}); n != 3 || calls.Load() != 1 {
						t.Errorf("%d backends, %d calls for 3 connects; want 3, 1", n, calls.Load())
					}
					calls.Store(0)
					if errs := herd(t, 8, closedConnector(t, dsn(tc.user), passwordFunc(tc.password)).Connect); len(errs) > 0 {
						t.Fatal(errs)
					}
					if calls.Load() != 1 {
						t.Errorf("%d calls for a cold herd of 8; want 1", calls.Load())
					}
					var hook atomic.Int32
					beforeConnect := pgconnector.WithBeforeConnect(func(ctx context.Context, cfg *pgx.ConnConfig) error {
						hook.Add(1)
						cfg.Password = tc.password
						return nil
					})
					if errs := herd(t, 8, closedConnector(t, dsn(tc.user), beforeConnect).Connect); len(errs) > 0 {
						t.Fatal(errs)
					}
					if hook.Load() != 8 {
						t.Errorf("WithBeforeConnect: %d fetches for a herd of 8; want 8 (one per connection)", hook.Load())
					}
				})
			}

			t.Run("a failing function: wrapped, no password", func(t *testing.T) {
				errIAM := errors.New("iam: throttled")
				var fail atomic.Bool
				rec, tp := newRecorder()
				logger, logs := newLogger(slog.LevelDebug)
				db := openNoIdle(t, dsn("scrammed"), pgconnector.WithTracerProvider(tp), pgconnector.WithLogger(logger), pgconnector.WithPasswordFunc(func(ctx context.Context, r pgconnector.PasswordRequest) (string, time.Time, error) {
					if fail.Load() {
						return "", time.Time{}, errIAM
					}
					return "Wrong-Secret-3", time.Now().Add(time.Hour), nil
				}))
				wrong := db.Ping() // refused twice (28P01): the cached password is dropped
				if wrong == nil {
					t.Fatal("a wrong password accepted")
				}
				fail.Store(true)
				err := db.Ping()
				if err == nil || !errors.Is(err, errIAM) {
					t.Errorf("error %v; want one that wraps the function's (errors.Is)", err)
				}
				ok := openNoIdle(t, dsn("scrammed"), pgconnector.WithTracerProvider(tp), pgconnector.WithLogger(logger), passwordFunc(scramPassword))
				if err := ok.Ping(); err != nil {
					t.Fatal(err)
				}
				noSecretSeen(t, rec, logs, []string{wrong.Error(), err.Error()}, []string{"Wrong-Secret-3", iamPassword, scramPassword})
			})

			if major != majors[len(majors)-1] {
				return // the refresh is the connector's, the same on every server
			}
			t.Run("a password near its expiry refreshed in the background", func(t *testing.T) {
				// 15 s from now: usable until 5 s from now (tokencache.Margin is 10 s), in the last
				// fifth of its life after 4 s.
				var calls atomic.Int32
				db := openNoIdle(t, dsn("scrammed"), pgconnector.WithPasswordFunc(func(ctx context.Context, r pgconnector.PasswordRequest) (string, time.Time, error) {
					calls.Add(1)
					return scramPassword, time.Now().Add(15 * time.Second), nil
				}))
				t0 := time.Now()
				if err := db.Ping(); err != nil {
					t.Fatal(err)
				}
				if err := db.Ping(); err != nil || calls.Load() != 1 {
					t.Fatalf("before the last fifth: %d calls, %v; want 1", calls.Load(), err)
				}
				time.Sleep(4200 * time.Millisecond)
				if err := db.Ping(); err != nil {
					t.Fatal(err)
				}
				deadline := time.Now().Add(5 * time.Second)
				for calls.Load() < 2 && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond)
				}
				// Past the first password's usable life: only the refreshed one serves now.
				time.Sleep(time.Until(t0.Add(5500 * time.Millisecond)))
				for range 3 {
					if err := db.Ping(); err != nil {
						t.Fatal(err)
					}
				}
				if calls.Load() != 2 {
					t.Errorf("%d calls; want 2 (the first, one refresh in the background; the connects after the first one's expiry on the new one)", calls.Load())
				}
			})
		})
	}
}
