package pgconnector_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
	"github.com/pgconnector/pgconnector/internal/testpki"
)

// emptySource is where a keyword is given its empty value.
type emptySource string

const (
	emptyInString  emptySource = "keyword/value"   // key=''
	emptyInURL     emptySource = "URL"             // postgresql://...?key=
	emptyInEnv     emptySource = "environment"     // the keyword's variable set to ""
	emptyInService emptySource = "service file"    // a line "key=" in the service's section
	asNotGiven                 = "as if not given" // a meaning: the outcome without the key
)

// emptyValueCase is libpq 18's outcome for a keyword given an empty value, alone, from each
// source (fe-connect.c: conninfo_parse, conninfo_uri_parse_params, parseServiceFile and
// conninfo_add_defaults all keep "" as a value): refused, before any connection, with libpq's
// message, or taken with meaning. except are the sources where libpq 18 does otherwise: the
// message of its refusal there ($FILE stands for the service file's path).
type emptyValueCase struct {
	key     string
	refused string
	meaning string
	except  map[emptySource]string
	// foreignRoot puts a root certificate of another CA at ~/.postgresql/root.crt, libpq's
	// default sslrootcert, which a server verified with it fails.
	foreignRoot bool
}

// emptyValueCases are every keyword libpq 18 knows (PQconninfo's), and requiressl, which it
// reads as sslmode. The meanings are what fe-connect.c and fe-secure-openssl.c make of "".
var emptyValueCases = []emptyValueCase{
	{key: "service", refused: `definition of service "" not found`,
		except: map[emptySource]string{emptyInService: `nested service specifications not supported in service file "$FILE", line 2`}},
	{key: "user", meaning: asNotGiven + ": the operating-system user (pqConnectOptions2)"},
	{key: "password", meaning: asNotGiven + ": the password file is read"},
	{key: "passfile", meaning: asNotGiven + ": ~/.pgpass"},
	{key: "channel_binding", refused: `invalid channel_binding value: ""`},
	{key: "connect_timeout", refused: `invalid integer value "" for connection option "connect_timeout"`},
	{key: "dbname", meaning: asNotGiven + ": the user name"},
	{key: "host", meaning: asNotGiven + ": the default Unix-socket directory"},
	{key: "hostaddr", meaning: asNotGiven},
	{key: "port", meaning: asNotGiven + ": 5432"},
	{key: "client_encoding", meaning: asNotGiven + ": not sent (build_startup_packet)"},
	{key: "options", meaning: asNotGiven + ": not sent"},
	{key: "application_name", meaning: "not sent, nor fallback_application_name (build_startup_packet)"},
	{key: "fallback_application_name", meaning: asNotGiven + ": not sent"},
	{key: "keepalives", refused: `invalid integer value "" for connection option "keepalives"`},
	{key: "keepalives_idle", refused: `invalid integer value "" for connection option "keepalives_idle"`},
	{key: "keepalives_interval", refused: `invalid integer value "" for connection option "keepalives_interval"`},
	{key: "keepalives_count", refused: `invalid integer value "" for connection option "keepalives_count"`},
	{key: "tcp_user_timeout", refused: `invalid integer value "" for connection option "tcp_user_timeout"`},
	{key: "sslmode", refused: `invalid sslmode value: ""`},
	{key: "sslnegotiation", refused: `invalid sslnegotiation value: ""`},
	{key: "sslcompression", meaning: asNotGiven + ": no effect"},
	{key: "sslcert", meaning: asNotGiven + ": ~/.postgresql/postgresql.crt"},
	{key: "sslkey", meaning: asNotGiven + ": ~/.postgresql/postgresql.key"},
	{key: "sslcertmode", refused: `invalid sslcertmode value: ""`},
	{key: "sslpassword", meaning: "an empty passphrase: an encrypted sslkey does not decrypt (no prompt)"},
	{key: "sslrootcert", meaning: asNotGiven + ": ~/.postgresql/root.crt, verified when it exists", foreignRoot: true},
	{key: "sslcrl", meaning: asNotGiven + ": ~/.postgresql/root.crl"},
	{key: "sslcrldir", meaning: asNotGiven},
	{key: "sslsni", meaning: "off: no SNI (sent when the value starts with 1)"},
	{key: "requirepeer", meaning: asNotGiven + ": no check"},
	{key: "require_auth", meaning: asNotGiven + ": any method"},
	{key: "min_protocol_version", refused: `invalid min_protocol_version value: ""`},
	{key: "max_protocol_version", refused: `invalid max_protocol_version value: ""`},
	{key: "ssl_min_protocol_version", meaning: "no minimum (the default is TLSv1.2)"},
	{key: "ssl_max_protocol_version", meaning: asNotGiven + ": no maximum"},
	{key: "gssencmode", refused: `invalid gssencmode value: ""`},
	{key: "krbsrvname", meaning: "an empty Kerberos service name (this libpq 18 has no GSSAPI: the row shows it taken; the connector uses postgres)"},
	{key: "gsslib", meaning: asNotGiven},
	{key: "gssdelegation", meaning: asNotGiven + ": off"},
	{key: "replication", meaning: asNotGiven + ": not sent"},
	{key: "target_session_attrs", refused: `invalid target_session_attrs value: ""`},
	{key: "load_balance_hosts", refused: `invalid load_balance_hosts value: ""`},
	{key: "scram_client_key", refused: `invalid SCRAM client key length: 0`},
	{key: "scram_server_key", refused: `invalid SCRAM server key length: 0`},
	{key: "oauth_issuer", meaning: asNotGiven},
	{key: "oauth_client_id", meaning: asNotGiven},
	{key: "oauth_client_secret", meaning: asNotGiven},
	{key: "oauth_scope", meaning: asNotGiven},
	{key: "sslkeylogfile", meaning: asNotGiven + ": no key log"},
	// Not in PQconninfo: conninfo_storeval stores it as sslmode, prefer unless it starts with
	// 1; PGREQUIRESSL counts only when it starts with 1.
	{key: "requiressl", meaning: asNotGiven + ": sslmode=prefer",
		except: map[emptySource]string{emptyInService: `syntax error in service file "$FILE", line 2`}},
}

// emptyValueQuery tells who connected where, with which application_name, over TLS or not.
const emptyValueQuery = "select current_user::text, current_database()::text, current_setting('application_name'), " +
	"coalesce((select ssl from pg_stat_ssl where pid = pg_backend_pid()), false)::text"

// libpqConnFailed is the prefix libpq 18 puts before a refusal made as the connect starts.
var libpqConnFailed = regexp.MustCompile(`^connection to server at "[^"]*", port [0-9]+ failed: `)

// TestEmptyValuesMatchLibpq18 gives each keyword of emptyValueCases an empty value from each
// source, alone beside a base connection string (host, port, user, dbname and
// fallback_application_name, without the keyword), and connects with libpq 18
// (harness.LibpqConnect: PQconnectdb) and with the connector to a PostgreSQL 18 server with TLS.
// It asserts libpq's outcome is the table's, and the connector's is libpq's: a refusal in New
// whose message holds libpq's, or, where libpq takes the value, the same user, database,
// application_name and transport (or a failed connect, not a refusal, for both); where the
// table's meaning is "as if not given", each gives the same outcome as without the keyword. The
// table covers every keyword of libpq 18 and the environment rows every variable libpq names.
// Then a few empty values beside the keys that decide how libpq reads them (requiressl,
// PGREQUIRESSL, several hosts, a service file's sslmode), each beside libpq 18 alike. On the
// connector before empty.go, 84 of the rows failed: an empty sslmode and the other modes connected
// with pgx's defaults where libpq refuses them.
func TestEmptyValuesMatchLibpq18(t *testing.T) {
	libpq18, err := harness.Libpq18Env()
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "PG") {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
	srv := harness.StartT(t, harness.Options{Major: 18, TLS: true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	home, foreignHome := t.TempDir(), t.TempDir()
	if err := os.Mkdir(filepath.Join(foreignHome, ".postgresql"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(foreignHome, ".postgresql", "root.crt"), testpki.PEMCert(testpki.NewCA(t).Cert), 0o600); err != nil {
		t.Fatal(err)
	}
	serviceFile := filepath.Join(t.TempDir(), "pg_service.conf")
	base := [][2]string{{"host", "127.0.0.1"}, {"port", strconv.Itoa(srv.Port)}, {"user", srv.User},
		{"dbname", srv.Database}, {"fallback_application_name", "fallback"}}

	// outcome connects with the connection string s and the environment env (also for the
	// connector: t.Setenv), with libpq 18 and with the connector. libpq's failure is "error: "
	// and its message without the prefix of a failure at a server (refusals made as the connect
	// starts have it too); the connector's "refused: " and the message of New, or "failed: " and
	// that of the connect; a connection is the query's row.
	type outcomes struct{ libpq, connector string }
	outcome := func(t *testing.T, s string, env []string) outcomes {
		t.Helper()
		var o outcomes
		c, err := harness.LibpqConnect(ctx, append(append([]string(nil), libpq18...), env...), s, emptyValueQuery)
		var refusal *harness.LibpqRefusal
		switch {
		case errors.As(err, &refusal):
			o.libpq = "error: " + libpqConnFailed.ReplaceAllString(refusal.Message, "")
		case err != nil:
			t.Fatal(err)
		default:
			o.libpq = strings.Join(c.Row, "|")
		}
		for _, kv := range env {
			k, v, _ := strings.Cut(kv, "=")
			t.Setenv(k, v)
		}
		conn, err := pgconnector.New(s)
		var pe *pgconnector.ParseError
		switch {
		case errors.As(err, &pe):
			o.connector = "refused: " + err.Error()
		case err != nil:
			t.Fatalf("New: %v is not a *ParseError", err)
		default:
			defer conn.Close()
			dc, err := conn.Connect(ctx)
			if err != nil {
				o.connector = "failed: " + err.Error()
				break
			}
			defer dc.Close()
			row := make([]string, 4)
			if err := pgconnector.PgxConnOf(dc).QueryRow(ctx, emptyValueQuery).Scan(&row[0], &row[1], &row[2], &row[3]); err != nil {
				t.Fatalf("query: %v", err)
			}
			o.connector = strings.Join(row, "|")
		}
		for _, kv := range env {
			k, _, _ := strings.Cut(kv, "=")
			os.Unsetenv(k)
		}
		return o
	}
	// conninfo is the base without key, in keyword/value form or as a URL, with extra at the end.
	conninfo := func(key string, url bool, extra string) string {
		var parts []string
		for _, kv := range base {
			if kv[0] != key {
				parts = append(parts, kv[0]+"="+kv[1])
			}
		}
		if extra != "" {
			parts = append(parts, extra)
		}
		if url {
			return "postgresql://?" + strings.Join(parts, "&")
		}
		return strings.Join(parts, " ")
	}

	first, err := harness.LibpqConnect(ctx, append(libpq18, "HOME="+home), conninfo("", false, ""), "")
	if err != nil {
		t.Fatal(err)
	}
	var inTable []string
	for _, c := range emptyValueCases {
		inTable = append(inTable, c.key)
	}
	for _, k := range first.Keywords {
		if !slices.Contains(inTable, k) {
			t.Errorf("libpq 18 keyword %s has no row", k)
		}
	}
	for _, k := range pgconnector.Keywords() {
		if !slices.Contains(inTable, k.Name) {
			t.Errorf("the connector's keyword %s has no row", k.Name)
		}
	}
	env := first.Env
	env["requiressl"] = "PGREQUIRESSL"

	// agree checks the outcomes got against the table's: refused, libpq's message ("" when libpq
	// takes the value, with meaning); it reports whether they were as the table says.
	agree := func(t *testing.T, got outcomes, refused, meaning string) bool {
		t.Helper()
		t.Logf("libpq 18: %s; connector: %s", got.libpq, got.connector)
		failed := t.Failed()
		if refused != "" {
			if got.libpq != "error: "+refused {
				t.Errorf("libpq 18: %s; the table: refused: %s", got.libpq, refused)
			}
			if !strings.HasPrefix(got.connector, "refused: ") || !strings.Contains(got.connector, refused) {
				t.Errorf("connector: %s; libpq 18 refuses it: %s", got.connector, refused)
			}
			return !t.Failed() || failed
		}
		switch {
		case strings.HasPrefix(got.connector, "refused: "):
			t.Errorf("connector: %s; libpq 18 takes it (%s): %s", got.connector, meaning, got.libpq)
		case strings.HasPrefix(got.libpq, "error: ") != strings.HasPrefix(got.connector, "failed: "),
			!strings.HasPrefix(got.libpq, "error: ") && got.libpq != got.connector:
			t.Errorf("connector: %s; libpq 18: %s", got.connector, got.libpq)
		}
		return !t.Failed() || failed
	}

	for _, c := range emptyValueCases {
		for _, src := range []emptySource{emptyInString, emptyInURL, emptyInEnv, emptyInService} {
			if src == emptyInEnv && env[c.key] == "" {
				continue // no variable: libpq reads none
			}
			t.Run(c.key+"/"+string(src), func(t *testing.T) {
				h := home
				if c.foreignRoot {
					h = foreignHome
				}
				vars := []string{"HOME=" + h, "PGSYSCONFDIR=" + t.TempDir()}
				var s string
				switch src {
				case emptyInString:
					s = conninfo(c.key, false, c.key+"=''")
				case emptyInURL:
					s = conninfo(c.key, true, c.key+"=")
				case emptyInEnv:
					s, vars = conninfo(c.key, false, ""), append(vars, env[c.key]+"=")
				case emptyInService:
					if err := os.WriteFile(serviceFile, []byte("[s]\n"+c.key+"=\n"), 0o600); err != nil {
						t.Fatal(err)
					}
					s, vars = conninfo(c.key, false, "service=s"), append(vars, "PGSERVICEFILE="+serviceFile)
				}
				got := outcome(t, s, vars)
				refused, ok := c.except[src]
				if !ok {
					refused = c.refused
				}
				refused = strings.ReplaceAll(refused, "$FILE", serviceFile)
				if !agree(t, got, refused, c.meaning) || refused != "" {
					return
				}
				if strings.HasPrefix(c.meaning, asNotGiven) {
					without := outcome(t, conninfo(c.key, false, ""), vars[:2])
					if without.libpq != got.libpq {
						t.Errorf("libpq 18 without %s: %s; with it empty: %s (the table: %s)", c.key, without.libpq, got.libpq, c.meaning)
					}
					if without.connector != got.connector {
						t.Errorf("connector without %s: %s; with it empty: %s (libpq 18: %s)", c.key, without.connector, got.connector, c.meaning)
					}
				}
			})
		}
	}

	// Empty values beside the keys that decide how libpq reads them.
	for _, c := range []struct {
		name, conninfo string
		env            []string
		refused        string // libpq 18's message, or "" when it takes the string
	}{
		// conninfo_storeval: requiressl is stored as sslmode, the later of the two wins.
		{name: "sslmode then requiressl", conninfo: "sslmode='' requiressl=1 sslrootcert=" + srv.CAFile},
		{name: "requiressl then sslmode", conninfo: "requiressl=1 sslmode=''", refused: `invalid sslmode value: ""`},
		// conninfo_add_defaults: PGREQUIRESSL only when PGSSLMODE is not set.
		{name: "PGREQUIRESSL and PGSSLMODE", env: []string{"PGREQUIRESSL=1", "PGSSLMODE="}, refused: `invalid sslmode value: ""`},
		{name: "PGREQUIRESSL and an empty requiressl", conninfo: "requiressl=''", env: []string{"PGREQUIRESSL=1"}},
		// pqConnectOptions2: an empty hostaddr gives no count to match the hosts'.
		{name: "two hosts, hostaddr empty", conninfo: "host=127.0.0.1,127.0.0.1 hostaddr=''"},
		{name: "sslmode empty, verify-full in the service file", conninfo: "service=s sslmode=''", refused: `invalid sslmode value: ""`},
	} {
		t.Run("combination/"+c.name, func(t *testing.T) {
			if err := os.WriteFile(serviceFile, []byte("[s]\nsslmode=verify-full\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			vars := append([]string{"HOME=" + home, "PGSYSCONFDIR=" + t.TempDir(), "PGSERVICEFILE=" + serviceFile}, c.env...)
			got := outcome(t, conninfo("", false, c.conninfo), vars)
			if agree(t, got, c.refused, "") && c.refused == "" && !strings.HasSuffix(got.libpq, "|true") {
				t.Errorf("libpq 18: %s; want a connection over TLS", got.libpq)
			}
		})
	}
}
