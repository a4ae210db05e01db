package connstring

import (
	"context"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/pgconnector/pgconnector/internal/harness"
)

// libpqURICase is one case of PostgreSQL's src/interfaces/libpq/t/001_uri.pl (REL_18: 63 URIs),
// numbered in the file's order. parse is what src/interfaces/libpq/test/libpq_uri_regress.c
// prints for it: the keywords of PQconninfoParse's result whose values differ from
// PQconndefaults', as key='value', then (local) or (inet); refusal is libpq's errmsg when it
// refuses the URI. env is the environment the suite sets for the case: it changes the defaults
// the printer leaves out, never the parse (PQconninfoParse reads no environment), so omitted
// lists what the printer leaves out of the parse as equal to its default under env.
type libpqURICase struct {
	n       int
	uri     string
	parse   string
	refusal string
	env     string
	omitted string
}

var libpqURICases = []libpqURICase{
	{n: 1, uri: `postgresql://uri-user:secret@host:12345/db`, parse: `user='uri-user' password='secret' dbname='db' host='host' port='12345' (inet)`},
	{n: 2, uri: `postgresql://uri-user@host:12345/db`, parse: `user='uri-user' dbname='db' host='host' port='12345' (inet)`},
	{n: 3, uri: `postgresql://uri-user@host/db`, parse: `user='uri-user' dbname='db' host='host' (inet)`},
	{n: 4, uri: `postgresql://host:12345/db`, parse: `dbname='db' host='host' port='12345' (inet)`},
	{n: 5, uri: `postgresql://host/db`, parse: `dbname='db' host='host' (inet)`},
	{n: 6, uri: `postgresql://uri-user@host:12345/`, parse: `user='uri-user' host='host' port='12345' (inet)`},
	{n: 7, uri: `postgresql://uri-user@host/`, parse: `user='uri-user' host='host' (inet)`},
	{n: 8, uri: `postgresql://uri-user@`, parse: `user='uri-user' (local)`},
	{n: 9, uri: `postgresql://host:12345/`, parse: `host='host' port='12345' (inet)`},
	{n: 10, uri: `postgresql://host:12345`, parse: `host='host' port='12345' (inet)`},
	{n: 11, uri: `postgresql://host/db`, parse: `dbname='db' host='host' (inet)`},
	{n: 12, uri: `postgresql://host/`, parse: `host='host' (inet)`},
	{n: 13, uri: `postgresql://host`, parse: `host='host' (inet)`},
	{n: 14, uri: `postgresql://`, parse: `(local)`},
	{n: 15, uri: `postgresql://?hostaddr=127.0.0.1`, parse: `hostaddr='127.0.0.1' (inet)`},
	{n: 16, uri: `postgresql://example.com?hostaddr=63.1.2.4`, parse: `host='example.com' hostaddr='63.1.2.4' (inet)`},
	{n: 17, uri: `postgresql://%68ost/`, parse: `host='host' (inet)`},
	{n: 18, uri: `postgresql://host/db?user=uri-user`, parse: `user='uri-user' dbname='db' host='host' (inet)`},
	{n: 19, uri: `postgresql://host/db?user=uri-user&port=12345`, parse: `user='uri-user' dbname='db' host='host' port='12345' (inet)`},
	{n: 20, uri: `postgresql://host/db?u%73er=someotheruser&port=12345`, parse: `user='someotheruser' dbname='db' host='host' port='12345' (inet)`},
	{n: 21, uri: `postgresql://host/db?u%7aer=someotheruser&port=12345`, refusal: `invalid URI query parameter: "uzer"`},
	{n: 22, uri: `postgresql://host:12345?user=uri-user`, parse: `user='uri-user' host='host' port='12345' (inet)`},
	{n: 23, uri: `postgresql://host?user=uri-user`, parse: `user='uri-user' host='host' (inet)`},
	{n: 24, uri: `postgresql://host?  user = uri-user & port  = 12345 `, parse: `user='uri-user' host='host' port='12345' (inet)`},
	{n: 25, uri: `postgresql://host?  user user  =  uri  & port = 12345 12 `, refusal: `unexpected spaces found in "  user user  ", use percent-encoded spaces (%20) instead`},
	{n: 26, uri: `postgresql://host?  user  =  uri-user  & port = 12345 12 `, refusal: `unexpected spaces found in " 12345 12 ", use percent-encoded spaces (%20) instead`},
	{n: 27, uri: `postgresql://host?`, parse: `host='host' (inet)`},
	{n: 28, uri: `postgresql://[::1]:12345/db`, parse: `dbname='db' host='::1' port='12345' (inet)`},
	{n: 29, uri: `postgresql://[::1]/db`, parse: `dbname='db' host='::1' (inet)`},
	{n: 30, uri: `postgresql://[2001:db8::1234]/`, parse: `host='2001:db8::1234' (inet)`},
	{n: 31, uri: `postgresql://[200z:db8::1234]/`, parse: `host='200z:db8::1234' (inet)`},
	{n: 32, uri: `postgresql://[::1]`, parse: `host='::1' (inet)`},
	{n: 33, uri: `postgres://`, parse: `(local)`},
	{n: 34, uri: `postgres:///`, parse: `(local)`},
	{n: 35, uri: `postgres:///db`, parse: `dbname='db' (local)`},
	{n: 36, uri: `postgres://uri-user@/db`, parse: `user='uri-user' dbname='db' (local)`},
	{n: 37, uri: `postgres://?host=/path/to/socket/dir`, parse: `host='/path/to/socket/dir' (local)`},
	{n: 38, uri: `postgresql://host?uzer=`, refusal: `invalid URI query parameter: "uzer"`},
	{n: 39, uri: `postgre://`, refusal: `missing "=" after "postgre://" in connection info string`},
	{n: 40, uri: `postgres://[::1`, refusal: `end of string reached when looking for matching "]" in IPv6 host address in URI: "postgres://[::1"`},
	{n: 41, uri: `postgres://[]`, refusal: `IPv6 host address may not be empty in URI: "postgres://[]"`},
	{n: 42, uri: `postgres://[::1]z`, refusal: `unexpected character "z" at position 17 in URI (expected ":" or "/"): "postgres://[::1]z"`},
	{n: 43, uri: `postgresql://host?zzz`, refusal: `missing key/value separator "=" in URI query parameter: "zzz"`},
	{n: 44, uri: `postgresql://host?value1&value2`, refusal: `missing key/value separator "=" in URI query parameter: "value1"`},
	{n: 45, uri: `postgresql://host?key=key=value`, refusal: `extra key/value separator "=" in URI query parameter: "key"`},
	{n: 46, uri: `postgres://host?dbname=%XXfoo`, refusal: `invalid percent-encoded token: "%XXfoo"`},
	{n: 47, uri: `postgresql://a%00b`, refusal: `forbidden value %00 in percent-encoded value: "a%00b"`},
	{n: 48, uri: `postgresql://%zz`, refusal: `invalid percent-encoded token: "%zz"`},
	{n: 49, uri: `postgresql://%1`, refusal: `invalid percent-encoded token: "%1"`},
	{n: 50, uri: `postgresql://%`, refusal: `invalid percent-encoded token: "%"`},
	{n: 51, uri: `postgres://@host`, parse: `host='host' (inet)`},
	{n: 52, uri: `postgres://host:/`, parse: `host='host' (inet)`},
	{n: 53, uri: `postgres://:12345/`, parse: `port='12345' (local)`},
	{n: 54, uri: `postgres://otheruser@?host=/no/such/directory`, parse: `user='otheruser' host='/no/such/directory' (local)`},
	{n: 55, uri: `postgres://otheruser@/?host=/no/such/directory`, parse: `user='otheruser' host='/no/such/directory' (local)`},
	{n: 56, uri: `postgres://otheruser@:12345?host=/no/such/socket/path`, parse: `user='otheruser' host='/no/such/socket/path' port='12345' (local)`},
	{n: 57, uri: `postgres://otheruser@:12345/db?host=/path/to/socket`, parse: `user='otheruser' dbname='db' host='/path/to/socket' port='12345' (local)`},
	{n: 58, uri: `postgres://:12345/db?host=/path/to/socket`, parse: `dbname='db' host='/path/to/socket' port='12345' (local)`},
	{n: 59, uri: `postgres://:12345?host=/path/to/socket`, parse: `host='/path/to/socket' port='12345' (local)`},
	{n: 60, uri: `postgres://%2Fvar%2Flib%2Fpostgresql/dbname`, parse: `dbname='dbname' host='/var/lib/postgresql' (local)`},
	{n: 61, uri: `postgresql://host?sslmode=disable`, parse: `host='host' sslmode='disable' (inet)`, env: "PGSSLROOTCERT=system"},
	{n: 62, uri: `postgresql://host?sslmode=prefer`, parse: `host='host' sslmode='prefer' (inet)`, env: "PGSSLROOTCERT=system"},
	// With sslrootcert=system libpq's default sslmode is verify-full: the printer leaves it out.
	{n: 63, uri: `postgresql://host?sslmode=verify-full`, parse: `host='host' (inet)`, env: "PGSSLROOTCERT=system", omitted: `sslmode='verify-full'`},
}

// uriCase is one string of TestURIReadingMatchesLibpq: a 001_uri.pl case or one of the corpus.
type uriCase struct {
	name, dsn string
}

// uriReserved are the characters that mean something in a URI or a keyword/value string.
var uriReserved = []struct{ name, c string }{
	{"qmark", "?"}, {"amp", "&"}, {"eq", "="}, {"plus", "+"}, {"pct", "%"}, {"at", "@"},
	{"slash", "/"}, {"colon", ":"}, {"hash", "#"}, {"space", " "}, {"quote", "'"},
	{"bslash", `\`}, {"comma", ","}, {"lbracket", "["}, {"rbracket", "]"},
}

// uriCorpus returns the generated strings, the same at every run: each reserved character in
// each part of a URL (user, password, host, port, dbname, a query key and value; at the start,
// the middle and the end of the parts that are free text), written as is and percent-encoded;
// in keyword/value values (bare, quoted, escaped with a backslash); then the strings of the known
// problems (an unencoded "?" in the password, "+" in a value, percent-encoded keys, a URL ending
// in "?" or "&", empty values, unknown keys).
func uriCorpus() []uriCase {
	var cases []uriCase
	type urlParts struct{ user, password, host, port, dbname, key, value string }
	base := urlParts{"u", "pw", "h", "5432", "db", "application_name", "app"}
	render := func(p urlParts) string {
		return "postgresql://" + p.user + ":" + p.password + "@" + p.host + ":" + p.port + "/" + p.dbname +
			"?" + p.key + "=" + p.value + "&sslmode=disable"
	}
	positions := []struct {
		name string
		put  func(text, c string) string
	}{
		{"start", func(text, c string) string { return c + text }},
		{"mid", func(text, c string) string { return text[:1] + c + text[1:] }},
		{"end", func(text, c string) string { return text + c }},
	}
	parts := []struct {
		name string
		all  bool // every position, else the middle only
		at   func(p *urlParts) *string
	}{
		{"user", true, func(p *urlParts) *string { return &p.user }},
		{"password", true, func(p *urlParts) *string { return &p.password }},
		{"host", false, func(p *urlParts) *string { return &p.host }},
		{"port", false, func(p *urlParts) *string { return &p.port }},
		{"dbname", true, func(p *urlParts) *string { return &p.dbname }},
		{"key", false, func(p *urlParts) *string { return &p.key }},
		{"value", true, func(p *urlParts) *string { return &p.value }},
	}
	for _, part := range parts {
		for _, pos := range positions {
			if !part.all && pos.name != "mid" {
				continue
			}
			for _, r := range uriReserved {
				for _, enc := range []string{"raw", "enc"} {
					c := r.c
					if enc == "enc" {
						c = fmt.Sprintf("%%%02X", r.c[0])
					}
					p := base
					s := part.at(&p)
					*s = pos.put(*s, c)
					cases = append(cases, uriCase{fmt.Sprintf("url-%s-%s-%s-%s", part.name, r.name, pos.name, enc), render(p)})
				}
			}
		}
	}
	for _, pos := range positions {
		for _, r := range uriReserved {
			value := pos.put("pw", r.c)
			escaped := pos.put("pw", `\`+r.c)
			quoted := strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(value)
			for _, form := range []struct{ name, value string }{
				{"bare", value}, {"quoted", "'" + quoted + "'"}, {"escaped", escaped},
			} {
				cases = append(cases, uriCase{fmt.Sprintf("kv-password-%s-%s-%s", r.name, pos.name, form.name),
					"host=h password=" + form.value + " sslmode=disable"})
			}
		}
	}
	for _, x := range []struct{ name, dsn string }{
		// An unencoded "?" in the password, before a real query, or none.
		{"pw-qmark-verify-full", "postgresql://u:pa?ss@h/db?sslmode=verify-full&application_name=x"},
		{"pw-qmark-gssencmode", "postgresql://u:pa?ss@h/db?gssencmode=require"},
		{"pw-qmark-no-query", "postgresql://u:pa?ss@h/app"},
		{"pw-qmark-amp-no-query", "postgresql://u:pa?ss&x@h/app"},
		{"pw-qmark-end", "postgresql://u:pass?@h/db?sslmode=require"},
		{"pw-two-at", "postgresql://u:p@ss@h/db?sslmode=require"},
		{"pw-slash", "postgresql://u:p/ss@h/db?sslmode=require"},
		{"pw-hash", "postgresql://u:p#ss@h/db?sslmode=require"},
		// "+" in values: a plus, not a space.
		{"plus-sslrootcert", "postgresql://h/db?sslrootcert=/dir/my+ca.pem&sslmode=verify-ca"},
		{"plus-options", "postgresql://h/db?options=-c%20search_path%3Da+b"},
		{"plus-dbname-path", "postgresql://h/a+b"},
		{"plus-user", "postgresql://a+b@h/db"},
		{"plus-kv", "host=h sslrootcert=/dir/my+ca.pem"},
		{"pct20-value", "postgresql://h/db?application_name=a%20b"},
		// Percent-encoded keys.
		{"pctkey-sslmode-lower", "postgresql://h/db?ssl%6dode=verify-full"},
		{"pctkey-sslmode-upper", "postgresql://h/db?ssl%6Dode=verify-full"},
		{"pctkey-all", "postgresql://h/db?%73%73%6C%6D%6F%64%65=require"},
		{"pctkey-bad", "postgresql://h/db?ssl%6=require"},
		{"pctkey-kv", "host=h ssl%6Dode=verify-full"},
		// The end of the query.
		{"end-qmark-db", "postgresql://h/db?"},
		{"end-amp", "postgresql://h/db?sslmode=disable&"},
		{"only-amp", "postgresql://h/db?&"},
		{"amp-amp", "postgresql://h/db?sslmode=disable&&application_name=x"},
		{"qmark-qmark", "postgresql://h/db??sslmode=disable"},
		{"qmark-in-value", "postgresql://h/db?application_name=a?b"},
		{"hash-in-query", "postgresql://h/db?application_name=a#b"},
		{"spaces-query", "postgresql://h/db? sslmode = disable "},
		// Empty values.
		{"empty-password", "postgresql://u:@h/db"},
		{"empty-user", "postgresql://:pw@h/db"},
		{"empty-port", "postgresql://h:/db"},
		{"empty-query-value", "postgresql://h/db?sslmode="},
		{"empty-query-key", "postgresql://h/db?=x"},
		{"empty-kv-last", "host=h sslmode="},
		{"empty-kv-quoted", "host=h password='' sslmode=disable"},
		{"empty-kv-bare-next", "password= host=h"},
		// Several hosts; a host in the query beside one in the netloc; a key written twice.
		{"hosts-ports", "postgresql://h1:1,h2:2/db"},
		{"hosts-one-port", "postgresql://h1,h2:2/db"},
		{"hosts-no-port", "postgresql://h1,h2/db"},
		{"hosts-ipv6", "postgresql://[::1]:1,h2/db"},
		{"hosts-empty-entry", "postgresql://h1,,h3/db"},
		{"host-and-query-host", "postgresql://h/db?host=other"},
		{"twice-last-wins", "postgresql://h/db?sslmode=verify-full&sslmode=disable"},
		{"kv-twice-last-wins", "sslmode=verify-full host=h sslmode=disable"},
		// Unknown keys and the spelling pgx accepts.
		{"unknown-url", "postgresql://h/db?sslmdoe=verify-full"},
		{"unknown-url-requireauth", "postgresql://h/db?requireauth=scram-sha-256"},
		{"unknown-kv", "host=h sslmdoe=verify-full"},
		{"database-url", "postgresql://h/?database=x"},
		{"database-kv", "host=h database=x"},
		{"server-param-url", "postgresql://h/db?search_path=s"},
		{"server-param-kv", "host=h search_path=s"},
		// Keyword/value grammar.
		{"kv-spaces-eq", "host = h  port =5432"},
		{"kv-trailing-bslash", `host=h password=ab\`},
		{"kv-unclosed", "host=h password='ab"},
		{"kv-no-eq", "host=h sslmode"},
		{"kv-quote-mid", "host=h password=a'b'c"},
		{"kv-newline", "host=h\npassword='a\nb'"},
		{"kv-uri-value", "dbname=postgresql://h/db"},
		{"kv-dbname-uri", "dbname='postgresql://h/db?sslmode=disable' host=x"},
	} {
		cases = append(cases, uriCase{"x-" + x.name, x.dsn})
	}
	return cases
}

// connectorReading is the connector's reading of dsn as read gives it: the keys the string sets
// (the last one of a key wins; database is dbname), or an error when read does not read the
// whole string (an unclosed quote, a part it stops at, a value that does not decode).
func connectorReading(dsn string) (map[string]string, error) {
	v, err := read(dsn)
	if err != nil {
		return nil, err
	}
	keys := map[string]string{}
	for _, kv := range v.str {
		key := kv.key
		if key == "database" {
			key = "dbname"
		}
		if key == "requiressl" { // libpq stores it as sslmode (conninfo_storeval)
			mode := "prefer"
			if strings.HasPrefix(kv.src.value, "1") {
				mode = "require"
			}
			key, kv.src.value = "sslmode", mode
		}
		if !kv.src.known {
			return nil, fmt.Errorf("the value of %s does not decode", key)
		}
		keys[key] = kv.src.value
	}
	return keys, nil
}

// showKeys writes a reading as sorted key="value" pairs.
func showKeys(m map[string]string) string {
	var b strings.Builder
	b.WriteString("{")
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s=%q", k, m[k])
	}
	b.WriteString("}")
	return b.String()
}

// readingDifference says how the connector's reading differs from libpq's ("" when it does not).
// libpq's refusal is a *harness.LibpqRefusal; the connector refuses when its reading does or
// Parse does.
func readingDifference(lib map[string]string, refusal *harness.LibpqRefusal, con map[string]string, conErr, parseErr error) string {
	switch {
	case refusal != nil && conErr == nil && parseErr == nil:
		return fmt.Sprintf("libpq refuses it (%s); the connector accepts it, reading %s", refusal.Message, showKeys(con))
	case refusal != nil:
		return ""
	case conErr != nil:
		return fmt.Sprintf("libpq reads %s; the connector's reading fails: %v", showKeys(lib), conErr)
	}
	var diffs []string
	all := maps.Clone(lib)
	maps.Copy(all, con)
	for _, k := range slices.Sorted(maps.Keys(all)) {
		l, lok := lib[k]
		c, cok := con[k]
		switch {
		case lok && !cok:
			diffs = append(diffs, fmt.Sprintf("%s: libpq %q, connector none", k, l))
		case !lok && cok:
			diffs = append(diffs, fmt.Sprintf("%s: libpq none, connector %q", k, c))
		case l != c:
			diffs = append(diffs, fmt.Sprintf("%s: libpq %q, connector %q", k, l, c))
		}
	}
	return strings.Join(diffs, "; ")
}

var printedKey = regexp.MustCompile(`^(\w+)='([^']*)'(?: |$)`)

// printedParse reads what libpq_uri_regress prints: the key='value' pairs and (local) or (inet).
func printedParse(t *testing.T, s string) (keys map[string]string, where string) {
	t.Helper()
	keys = map[string]string{}
	for {
		m := printedKey.FindStringSubmatch(s)
		if m == nil {
			break
		}
		keys[m[1]] = m[2]
		s = s[len(m[0]):]
	}
	if s != "(local)" && s != "(inet)" && s != "" {
		t.Fatalf("the table's printed parse ends in %q", s)
	}
	return keys, s
}

// The connector reads each of 001_uri.pl's 63 URIs and each string of the corpus as libpq 18's
// PQconninfoParse does, accepts what libpq accepts and refuses what it refuses; the cases it does
// not yet read so are listed in uriDifferences. The 001_uri.pl table is checked against libpq 18
// itself first.
func TestURIReadingMatchesLibpq(t *testing.T) {
	clearPGEnv(t)
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "PG") {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
	t.Setenv("HOME", t.TempDir())
	ctx := context.Background()

	var cases []uriCase
	for _, c := range libpqURICases {
		cases = append(cases, uriCase{fmt.Sprintf("uri-%02d", c.n), c.uri})
	}
	cases = append(cases, uriCorpus()...)
	dsns := make([]string, len(cases))
	for i, c := range cases {
		dsns[i] = c.dsn
	}
	parses, err := harness.LibpqConninfoParseAll(ctx, dsns)
	if err != nil {
		t.Fatal(err)
	}

	for i, c := range libpqURICases {
		t.Run("libpq/"+cases[i].name, func(t *testing.T) {
			keys, refusal := parses[i].Keys, parses[i].Refusal
			if c.refusal != "" {
				if refusal == nil || refusal.Message != c.refusal {
					t.Errorf("%s: libpq 18 gives %s, %v; 001_uri.pl expects the refusal %q", c.uri, showKeys(keys), refusal, c.refusal)
				}
				return
			}
			if refusal != nil {
				t.Fatalf("%s: libpq 18 refuses it (%s); 001_uri.pl expects %s", c.uri, refusal.Message, c.parse)
			}
			want, where := printedParse(t, c.parse)
			omitted, _ := printedParse(t, c.omitted)
			maps.Copy(want, omitted)
			local := true
			for k, v := range keys {
				if v != "" && (k == "hostaddr" || k == "host" && v[0] != '/') {
					local = false
				}
			}
			if !maps.Equal(keys, want) || local != (where == "(local)") {
				t.Errorf("%s: libpq 18 reads %s (local %v); 001_uri.pl expects %s", c.uri, showKeys(keys), local, c.parse)
			}
		})
	}
	names := map[string]bool{}
	for _, c := range cases {
		if names[c.name] {
			t.Fatalf("two cases are named %s", c.name)
		}
		names[c.name] = true
	}
	for name := range uriDifferences {
		if !names[name] {
			t.Errorf("uriDifferences lists %s, which is no case", name)
		}
	}

	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			lib, refusal := parses[i].Keys, parses[i].Refusal
			con, conErr := connectorReading(c.dsn)
			_, parseErr := Parse(c.dsn)
			libOutcome := "accepts " + showKeys(lib)
			if refusal != nil {
				libOutcome = "refuses: " + refusal.Message
			}
			conOutcome := "reads " + showKeys(con)
			if conErr != nil {
				conOutcome = "reading fails: " + conErr.Error()
			}
			parseOutcome := "accepts"
			if parseErr != nil {
				parseOutcome = "refuses: " + parseErr.Error()
			}
			t.Logf("%q: libpq %s | connector %s | Parse %s", c.dsn, libOutcome, conOutcome, parseOutcome)
			diff := readingDifference(lib, refusal, con, conErr, parseErr)
			known, listed := uriDifferences[c.name]
			switch {
			case diff != "" && !listed:
				t.Errorf("%q: %s\n\turiDifferences entry: %q: %q,", c.dsn, diff, c.name, diff)
			case diff == "" && listed:
				t.Errorf("%q: the connector now reads it as libpq 18 does; remove it from uriDifferences (%s)", c.dsn, known)
			case diff != "":
				t.Logf("known difference: %s", diff)
			}
		})
	}
}

// uriDifferences are the strings the connector reads otherwise than libpq 18: the case's name and
// why. A case listed here that no longer differs fails, as does a case that differs and is not
// listed; a failing case's message gives its entry. Each is a key that libpq refuses and the
// connector takes on purpose, for strings written for pgx (docs/connection-strings.md, "Keys libpq
// does not know"): pgx's alias database, and server parameters; or a URL it refuses sooner.
var uriDifferences = map[string]string{
	"x-database-url":     pgxAlias,
	"x-database-kv":      pgxAlias,
	"x-server-param-url": serverParameter,
	"x-server-param-kv":  serverParameter,
	// Refused sooner, on purpose: libpq would look the host up with the rest of a password in it.
	"url-password-at-start-raw": atInHost,
	"url-password-at-mid-raw":   atInHost,
	"url-password-at-end-raw":   atInHost,
	"url-host-at-mid-raw":       atInHost,
	"x-pw-two-at":               atInHost,
}

const (
	atInHost        = "a host with \"@\" (a password's \"@\" not percent-encoded) is refused before any lookup; libpq reads the host with it"
	pgxAlias        = "pgx's database (for dbname) is taken; libpq 18 refuses it"
	serverParameter = "a server parameter a client may set (search_path) is taken and sent to the server, as pgx sends it; libpq 18 refuses it"
)
