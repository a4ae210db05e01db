package files

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/pgconnector/pgconnector/internal/harness"
)

// serviceCases are src/interfaces/libpq/t/006_service.pl's cases, in its order (postgres/postgres
// at commit 2c7bd2ba507e, a PostgreSQL 18 version of the file), then one of our own. Throughout, PGSYSCONFDIR is the
// test's directory and the environment names a server that is not running (upstream's
// dummy_node): a case connects only through the service file.
var serviceCases = []struct {
	name        string
	serviceFile string // PGSERVICEFILE: "valid", "empty", "missing" or "nested" (the test's files)
	sysconf     bool   // $PGSYSCONFDIR/pg_service.conf is a copy of the valid file
	pgservice   string // PGSERVICE, "" for unset
	conninfo    string
	answer      string // SELECT 'answer' gives it; "" for a failure
	err         string // upstream's expected error, for libpq and the connector alike
}{
	{name: "1_1 service string and PGSERVICEFILE", serviceFile: "valid", conninfo: "service=my_srv", answer: "connect1_1"},
	{name: "1_2 service URI and PGSERVICEFILE", serviceFile: "valid", conninfo: "postgres://?service=my_srv", answer: "connect1_2"},
	{name: "unknown service string and PGSERVICEFILE", serviceFile: "valid", conninfo: "service=undefined-service",
		err: `definition of service "undefined-service" not found`},
	{name: "1_3 PGSERVICE and PGSERVICEFILE", serviceFile: "valid", pgservice: "my_srv", answer: "connect1_3"},
	{name: "unknown PGSERVICE and PGSERVICEFILE", serviceFile: "valid", pgservice: "undefined-service",
		err: `definition of service "undefined-service" not found`},
	{name: "service string and a missing PGSERVICEFILE", serviceFile: "missing", conninfo: "service=my_srv",
		err: `service file ".*pg_service_missing.conf" not found`},
	{name: "2_1 service string and PGSYSCONFDIR's pg_service.conf", serviceFile: "empty", sysconf: true, conninfo: "service=my_srv", answer: "connect2_1"},
	{name: "2_2 service URI and PGSYSCONFDIR's pg_service.conf", serviceFile: "empty", sysconf: true, conninfo: "postgres://?service=my_srv", answer: "connect2_2"},
	{name: "unknown service string and PGSYSCONFDIR's pg_service.conf", serviceFile: "empty", sysconf: true, conninfo: "service=undefined-service",
		err: `definition of service "undefined-service" not found`},
	{name: "2_3 PGSERVICE and PGSYSCONFDIR's pg_service.conf", serviceFile: "empty", sysconf: true, pgservice: "my_srv", answer: "connect2_3"},
	{name: "unknown PGSERVICE and PGSYSCONFDIR's pg_service.conf", serviceFile: "empty", sysconf: true, pgservice: "undefined-service",
		err: `definition of service "undefined-service" not found`},
	// Beyond 006_service.pl: a service in a service file (parseServiceFile).
	{name: "nested service", serviceFile: "nested", conninfo: "service=my_srv",
		err: `nested service specifications not supported in service file ".*pg_service_nested.conf", line 2`},
}

// TestServiceFiles runs serviceCases through psql (libpq 18) and the connector. The cases set
// the process's environment, which the connector reads: they run one after the other.
func TestServiceFiles(t *testing.T) {
	srv := harness.StartT(t, harness.Options{Major: 18})
	td := t.TempDir()
	write := func(name, content string) string {
		t.Helper()
		p := filepath.Join(td, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// The server's connection string, one key a line (upstream: $node->connstr split on white
	// space), under [my_srv].
	decomposed := "host=" + srv.Host + "\nport=" + strconv.Itoa(srv.Port) + "\nuser=" + srv.User + "\ndbname=" + srv.Database + "\n"
	files := map[string]string{
		"valid":   write("pg_service_valid.conf", "[my_srv]\n"+decomposed),
		"empty":   write("pg_service_empty.conf", ""),
		"missing": filepath.Join(td, "pg_service_missing.conf"),
		"nested":  write("pg_service_nested.conf", "[my_srv]\nservice=other\n"+decomposed),
	}
	sysconf := filepath.Join(td, "pg_service.conf")
	dummyPort := strconv.Itoa(harness.FreePort(t)) // nothing listens there

	for _, tc := range serviceCases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.sysconf {
				write("pg_service.conf", "[my_srv]\n"+decomposed)
				t.Cleanup(func() { os.Remove(sysconf) })
			}
			env := map[string]string{
				"PGSYSCONFDIR":  td,
				"PGSERVICEFILE": files[tc.serviceFile],
				"PGHOST":        "127.0.0.1",
				"PGPORT":        dummyPort,
			}
			if tc.pgservice != "" {
				env["PGSERVICE"] = tc.pgservice
			}
			var psqlEnv []string
			for _, k := range []string{"PGSYSCONFDIR", "PGSERVICEFILE", "PGSERVICE", "PGHOST", "PGPORT", "PGUSER", "PGDATABASE", "PGPASSFILE"} {
				t.Setenv(k, "")
				if v, ok := env[k]; ok {
					os.Setenv(k, v)
					psqlEnv = append(psqlEnv, k+"="+v)
				} else {
					os.Unsetenv(k)
				}
			}
			query := "SELECT 'nothing'"
			if tc.answer != "" {
				query = "SELECT '" + tc.answer + "'"
			}
			psql := viaPsql(t, psqlEnv, tc.conninfo, query)
			connector := viaConnector(t, tc.conninfo, query)
			var want *regexp.Regexp
			if tc.err != "" {
				want = regexp.MustCompile(tc.err)
			}
			check(t, connector, psql, tc.answer != "", tc.answer, want, want)
		})
	}
}
