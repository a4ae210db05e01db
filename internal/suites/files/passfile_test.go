package files

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgconnector/pgconnector/internal/harness"
)

// longComment is 001_password.pl's comment line, there "to exercise handling of long lines in
// the file" (longer than libpq's first buffer of 256 bytes).
var longComment = "#" + strings.Repeat(" This very long comment is just here to exercise handling of long lines in the file.", 5)

// passfileSteps are the password-file cases of src/test/authentication/t/001_password.pl
// (postgres/postgres at commit 0245f8db36f3; the password-file part is the one PostgreSQL 18's
// file has), in its order: at each step the
// password file and pg_hba.conf's line (its "local" lines written as "host" lines for
// 127.0.0.1), and the connections with whether each gets in. No password is in the
// connection string or PGPASSWORD: a connection that gets in had the password "pass" from the
// file. Then steps of our own, lines whose white space libpq keeps.
var passfileSteps = []struct {
	name  string
	file  string
	hba   [3]string // the database, user and method of the host line
	conns []passfileConn
}{
	{
		name: "a line of more than five fields",
		file: "\n" + longComment + "\n*:*:postgres:scram_role:pass:this is not part of the password.\n",
		hba:  [3]string{"all", "all", "password"},
		conns: []passfileConn{
			{"user=scram_role", true},
			{"user=md5_role", false}, // no entry
		},
	},
	{
		name: `p\ass`,
		file: "\n" + longComment + "\n*:*:postgres:scram_role:pass:this is not part of the password.\n" +
			"\n*:*:*:md5_role:p\\ass\n*:*:*:md5,role:p\\ass\n",
		hba:   [3]string{"all", "all", "password"},
		conns: []passfileConn{{"user=md5_role", true}},
	},
	{name: "matching regexp for username", hba: [3]string{"all", `/^.*nomatch.*$, baduser, /^md.*$`, "password"}, conns: []passfileConn{{"user=md5_role", true}}},
	{name: "non matching regexp for username", hba: [3]string{"all", `/^.*nomatch.*$, baduser, /^m_d.*$`, "password"}, conns: []passfileConn{{"user=md5_role", false}}},
	{name: "regexp with a comma for username", hba: [3]string{"all", `"/^.*5,.*e$"`, "password"}, conns: []passfileConn{{"user=md5,role", true}}},
	{name: "matching regexp for dbname", hba: [3]string{`/^.*nomatch.*$, baddb, /^regex_t.*b$`, "all", "password"},
		conns: []passfileConn{{"user=md5_role dbname=regex_testdb", true}}},
	{name: "non matching regexp for dbname", hba: [3]string{`/^.*nomatch.*$, baddb, /^regex_t.*ba$`, "all", "password"},
		conns: []passfileConn{{"user=md5_role dbname=regex_testdb", false}}},
	// Beyond 001_password.pl: libpq trims nothing.
	{name: "white space before the host is part of it", file: " *:*:*:scram_role:pass\n", hba: [3]string{"all", "all", "password"},
		conns: []passfileConn{{"user=scram_role", false}}},
	{name: "white space after the password is part of it", file: "*:*:*:scram_role:pass \n", hba: [3]string{"all", "all", "password"},
		conns: []passfileConn{{"user=scram_role", false}}},
	{name: "backslashes before ordinary characters, in a field and in the password", file: `*:*:*:scram\_role:pa\ss` + "\n", hba: [3]string{"all", "all", "password"},
		conns: []passfileConn{{"user=scram_role", true}}},
}

type passfileConn struct {
	conninfo string // beside the server's host and port, and dbname=postgres unless given
	ok       bool
}

// TestPasswordFile runs passfileSteps through psql (libpq 18) and the connector, both with
// PGPASSFILE (the process's environment for the connector: the steps run one after the other).
func TestPasswordFile(t *testing.T) {
	srv := harness.StartT(t, harness.Options{Major: 18})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, sql := range []string{
		`SET password_encryption='scram-sha-256'; CREATE ROLE scram_role LOGIN PASSWORD 'pass'`,
		`SET password_encryption='md5'; CREATE ROLE md5_role LOGIN PASSWORD 'pass'`,
		`SET password_encryption='md5'; CREATE ROLE "md5,role" LOGIN PASSWORD 'pass'`,
		`CREATE DATABASE regex_testdb`,
	} {
		if err := srv.ExecAdmin(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	pgpass := filepath.Join(t.TempDir(), "pgpass")
	for _, k := range []string{"PGPASSWORD", "PGCHANNELBINDING", "PGSERVICE", "PGSERVICEFILE", "PGHOST", "PGPORT", "PGUSER", "PGDATABASE"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	t.Setenv("PGPASSFILE", pgpass)
	env := []string{"PGPASSFILE=" + pgpass}
	base := "host=" + srv.Host + " port=" + strconv.Itoa(srv.Port) + " sslmode=disable "

	for _, step := range passfileSteps {
		t.Run(step.name, func(t *testing.T) {
			if step.file != "" {
				if err := os.WriteFile(pgpass, []byte(step.file), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if err := srv.SetHBA("host " + step.hba[0] + " " + step.hba[1] + " 127.0.0.1/32 " + step.hba[2]); err != nil {
				t.Fatal(err)
			}
			for _, c := range step.conns {
				conninfo := base + c.conninfo
				if !strings.Contains(c.conninfo, "dbname=") {
					conninfo += " dbname=postgres"
				}
				psql := viaPsql(t, env, conninfo, "SELECT current_user")
				connector := viaConnector(t, conninfo, "SELECT current_user")
				user := strings.TrimPrefix(strings.Fields(c.conninfo)[0], "user=")
				check(t, connector, psql, c.ok, user, nil, nil)
			}
		})
	}
}
