package pgconnector_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
)

// pgxOutcome opens one connection for pgx (ConnectPgx) with a new connector for dsn and returns
// the outcome as connectorOutcome does.
func pgxOutcome(t *testing.T, names map[int]string, dsn string) (outcome, msg string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := pgconnector.New(dsn)
	if err != nil {
		return "error", err.Error()
	}
	defer c.Close()
	conn, err := c.ConnectPgx(ctx, nil)
	if err != nil {
		return "error", err.Error()
	}
	defer conn.Close(ctx)
	var port int
	var ssl bool
	var app string
	if err := conn.QueryRow(ctx, conformanceQuery).Scan(&port, &ssl, &app); err != nil {
		return "error", "query: " + err.Error()
	}
	return conformanceOutcome(names, fmt.Sprintf("%d|%t|%s", port, ssl, app)), ""
}

// TestMultiHostPassfileMatchesPsql: with several hosts and no password in the connection string
// or PGPASSWORD, each host gets the password file's entry for its own host name (else hostaddr)
// and port, or none, as in libpq (fe-connect.c, pqConnectOptions2: passwordFromFile per
// connhost[i]). A host that has no entry gets no password, never the entry of a host before it:
// psql then fails with "no password supplied", and so must the connector, sending nothing.
// Servers a and b share a's password, so a password given to the wrong host would connect; c has
// its own. "down" is a port where nothing listens.
func TestMultiHostPassfileMatchesPsql(t *testing.T) {
	a := harness.StartT(t, harness.Options{Auth: "scram-sha-256"})
	b := harness.StartT(t, harness.Options{Auth: "scram-sha-256"})
	c := harness.StartT(t, harness.Options{Auth: "md5"})
	down := harness.FreePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := b.ExecAdmin(ctx, "ALTER ROLE app PASSWORD '"+a.Password+"'"); err != nil {
		t.Fatal(err)
	}
	pa, pc := a.Password, c.Password
	names := map[int]string{a.Port: "a", b.Port: "b", c.Port: "c", 0: "socket"}
	ports := map[string]int{"a": a.Port, "b": b.Port, "c": c.Port, "down": down}

	dir := t.TempDir()
	n := 0
	// passfile writes a password file with these lines ({a} {b} {c} {down} are the ports) and
	// returns its path.
	passfile := func(mode os.FileMode, lines ...string) string {
		n++
		path := filepath.Join(dir, "pgpass"+strconv.Itoa(n))
		r := strings.NewReplacer("{a}", strconv.Itoa(a.Port), "{b}", strconv.Itoa(b.Port), "{c}", strconv.Itoa(c.Port), "{down}", strconv.Itoa(down))
		if err := os.WriteFile(path, []byte(r.Replace(strings.Join(lines, "\n"))+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		return path
	}
	hosts := func(order ...string) string {
		ps := make([]string, len(order))
		for i, h := range order {
			ps[i] = strconv.Itoa(ports[h])
		}
		return "host=" + strings.TrimSuffix(strings.Repeat("127.0.0.1,", len(order)), ",") + " port=" + strings.Join(ps, ",")
	}
	const common = " user=app dbname=app sslmode=disable connect_timeout=5 "

	forDown := "127.0.0.1:{down}:*:*:" + pa
	perHost := []string{"127.0.0.1:{down}:*:*:" + pa, "127.0.0.1:{a}:*:*:" + pa, "127.0.0.1:{c}:*:*:" + pc}
	for _, tc := range []struct {
		name, conninfo string
		env            []string
		want           string // the server, "error", or "no password" (an error saying so)
	}{
		// The defect: the first host's entry went to every host.
		{"entry for the down host only, next host shares its password", hosts("down", "b") + " passfile=" + passfile(0o600, forDown), nil, "no password"},
		{"entry for the down host only, next host has another", hosts("down", "c") + " passfile=" + passfile(0o600, forDown), nil, "no password"},
		{"one entry per host, first down", hosts("down", "c") + " passfile=" + passfile(0o600, perHost...), nil, "c"},
		{"one entry per host, first down, second a", hosts("down", "a") + " passfile=" + passfile(0o600, "127.0.0.1:{down}:*:*:"+pc, "127.0.0.1:{a}:*:*:"+pa), nil, "a"},
		{"one entry per host, both up", hosts("a", "c") + " passfile=" + passfile(0o600, perHost...), nil, "a"},
		{"one entry per host, both up, other order", hosts("c", "a") + " passfile=" + passfile(0o600, perHost...), nil, "c"},
		{"one entry per host, up then down", hosts("c", "down") + " passfile=" + passfile(0o600, perHost...), nil, "c"},
		{"wildcard host, entry by port", hosts("down", "c") + " passfile=" + passfile(0o600, "*:{c}:*:*:"+pc, "*:*:*:*:"+pa), nil, "c"},
		{"entry for another database", hosts("down", "c") + " passfile=" + passfile(0o600, "127.0.0.1:{c}:otherdb:app:"+pc, forDown), nil, "no password"},
		{"PGPASSFILE, one entry per host", hosts("down", "c"), []string{"PGPASSFILE=" + passfile(0o600, perHost...)}, "c"},
		// hostaddr: the entry is the host name's when one is given, else the address's.
		{"hostaddr with host names", "host=a.invalid,c.invalid hostaddr=127.0.0.1,127.0.0.1 port=" + strconv.Itoa(down) + "," + strconv.Itoa(c.Port) +
			" passfile=" + passfile(0o600, "a.invalid:*:*:*:"+pa, "c.invalid:*:*:*:"+pc), nil, "c"},
		{"hostaddr with host names, entry for the first only", "host=a.invalid,b.invalid hostaddr=127.0.0.1,127.0.0.1 port=" + strconv.Itoa(down) + "," + strconv.Itoa(b.Port) +
			" passfile=" + passfile(0o600, "a.invalid:*:*:*:"+pa, "127.0.0.1:*:*:*:"+pa), nil, "no password"},
		{"hostaddr alone", "hostaddr=127.0.0.1,127.0.0.1 port=" + strconv.Itoa(down) + "," + strconv.Itoa(c.Port) + " passfile=" + passfile(0o600, perHost...), nil, "c"},
		// A password given applies to every host, and the file is not read.
		{"password in the string", hosts("down", "b") + " password=" + pa + " passfile=" + passfile(0o600, perHost...), nil, "b"},
		{"empty password: the file is read", hosts("down", "c") + " password='' passfile=" + passfile(0o600, perHost...), nil, "c"},
		{"PGPASSWORD", hosts("down", "c") + " passfile=" + passfile(0o600, forDown), []string{"PGPASSWORD=" + pc}, "c"},
		// libpq ignores a file that its group or others may read (with a warning).
		{"group-readable file", hosts("c") + " passfile=" + passfile(0o640, perHost...), nil, "no password"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, kv := range tc.env {
				k, v, _ := strings.Cut(kv, "=")
				t.Setenv(k, v)
			}
			conninfo := tc.conninfo + common
			want, psqlMsg := psqlOutcome(t, names, tc.env, conninfo)
			want = strings.Fields(want + " x")[0]
			if want == "error" && strings.Contains(psqlMsg, "no password supplied") {
				want = "no password"
			}
			if want != tc.want {
				t.Fatalf("psql: %s (%s), the test expects %s", want, psqlMsg, tc.want)
			}
			for api, outcome := range map[string]func(*testing.T, map[int]string, string) (string, string){
				"database/sql": connectorOutcome, "pgx": pgxOutcome,
			} {
				got, msg := outcome(t, names, conninfo)
				got = strings.Fields(got + " x")[0]
				if got == "error" && strings.Contains(msg, "no password supplied") {
					got = "no password"
				}
				if got != want {
					t.Errorf("%s: connector %s (%s), psql %s (%s)", api, got, msg, want, psqlMsg)
				}
				// libpq's warning for a file it does not read is in the error.
				if _, warning, ok := strings.Cut(psqlMsg, "WARNING: "); ok {
					warning, _, _ = strings.Cut(warning, "\n")
					if !strings.Contains(msg, warning) {
						t.Errorf("%s: the error %q does not say %q", api, msg, warning)
					}
				}
				for _, secret := range []string{pa, pc} {
					if strings.Contains(msg, secret) {
						t.Errorf("%s: the error holds a password: %s", api, msg)
					}
				}
			}
		})
	}
}

// TestPassfileBeforeConnectWins: WithBeforeConnect runs after the password file's lookup and
// its password is the one sent, for the host the attempt goes to.
func TestPassfileBeforeConnectWins(t *testing.T) {
	srv := harness.StartT(t, harness.Options{Auth: "scram-sha-256"})
	passfile := filepath.Join(t.TempDir(), "pgpass")
	if err := os.WriteFile(passfile, []byte("*:*:*:*:not-the-password\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dsn := fmt.Sprintf("host=127.0.0.1 port=%d user=app dbname=app passfile=%s", srv.Port, passfile)
	var seen []string
	c := newConnector(t, dsn, pgconnector.WithBeforeConnect(func(ctx context.Context, cfg *pgx.ConnConfig) error {
		seen = append(seen, cfg.Password)
		cfg.Password = srv.Password
		return nil
	}))
	defer c.Close()
	connectN(t, c, 1)
	if len(seen) == 0 || seen[0] != "not-the-password" {
		t.Errorf("WithBeforeConnect saw %d attempts; the first had the file's password: %t", len(seen), len(seen) > 0 && seen[0] == "not-the-password")
	}
}

// TestPassfileNotAPlainFile: a FIFO as password file is not opened (libpq: "password file ... is
// not a plain file", ignored): the connect does not wait for a writer and fails as psql does,
// with no password, its error saying libpq's warning.
func TestPassfileNotAPlainFile(t *testing.T) {
	srv := harness.StartT(t, harness.Options{Auth: "scram-sha-256"})
	fifo := filepath.Join(t.TempDir(), "pgpass")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	conninfo := fmt.Sprintf("host=127.0.0.1 port=%d user=app dbname=app sslmode=disable passfile=%s", srv.Port, fifo)
	_, psqlMsg := psqlOutcome(t, nil, nil, conninfo)
	if !strings.Contains(psqlMsg, "no password supplied") {
		t.Fatalf("psql: %s", psqlMsg)
	}
	done := make(chan string, 1)
	go func() {
		_, msg := connectorOutcome(t, nil, conninfo)
		done <- msg
	}()
	select {
	case msg := <-done:
		_, warning, _ := strings.Cut(psqlMsg, "WARNING: ")
		warning, _, _ = strings.Cut(warning, "\n")
		t.Logf("connector: %s", msg)
		if !strings.Contains(msg, "no password supplied") || !strings.Contains(warning, "is not a plain file") || !strings.Contains(msg, warning) {
			t.Errorf("connector: %s; psql: %s", msg, psqlMsg)
		}
	case <-time.After(30 * time.Second):
		// Not a measure of speed: a connect blocked in open(2) on the FIFO never returns.
		t.Fatal("the connector is still waiting after 30 s: it opened the FIFO")
	}
}

// TestPassfileReadWhenAsked: the password file is looked up when the server asks for a password,
// not before. A file the connector refuses to read (over 1 MiB) fails the connect to a server
// that asks for a password, for database/sql and pgx alike, saying why; a server that trusts the client connects without the file being read.
func TestPassfileReadWhenAsked(t *testing.T) {
	trust := harness.StartT(t, harness.Options{})
	scram := harness.StartT(t, harness.Options{Auth: "scram-sha-256"})
	passfile := filepath.Join(t.TempDir(), "pgpass")
	line := "# " + strings.Repeat("x", 1021) + "\n"
	if err := os.WriteFile(passfile, []byte(strings.Repeat(line, 1025)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		port    int
		wantErr bool
	}{{"trust", trust.Port, false}, {"scram-sha-256", scram.Port, true}} {
		t.Run(tc.name, func(t *testing.T) {
			dsn := fmt.Sprintf("host=127.0.0.1 port=%d user=app dbname=app passfile=%s", tc.port, passfile)
			for _, via := range []string{"database/sql", "pgx"} {
				var outcome, msg string
				if via == "pgx" {
					outcome, msg = pgxOutcome(t, nil, dsn)
				} else {
					outcome, msg = connectorOutcome(t, nil, dsn)
				}
				gotErr := outcome == "error"
				if gotErr != tc.wantErr || gotErr && !strings.Contains(msg, "larger than 1048576 bytes") {
					t.Errorf("%s: outcome %s (%s), want an error naming the password file: %t", via, outcome, msg, tc.wantErr)
				}
				t.Logf("%s: %s %s", via, outcome, msg)
			}
		})
	}
}
