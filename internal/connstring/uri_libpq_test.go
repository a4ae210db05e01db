package connstring

import (
	"context"
	"errors"
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
	switch {
	case v.unclosed != "":
		return nil, fmt.Errorf("the quoted value of %s is not closed", v.unclosed)
	case v.malformed:
		return nil, errors.New("the reading stops before the end of the string")
	}
	keys := map[string]string{}
	for _, kv := range v.str {
		key := kv.key
		if key == "database" {
			key = "dbname"
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

// uriDifferences are the strings the connector reads otherwise than libpq 18 today: the case's
// name and what differs. A case listed here that no longer differs fails, as does a case that
// differs and is not listed; a failing case's message gives its entry.
var uriDifferences = map[string]string{
	"uri-01":                          "dbname: libpq \"db\", connector none; password: libpq \"secret\", connector none; user: libpq \"uri-user\", connector none",
	"uri-02":                          "dbname: libpq \"db\", connector none; user: libpq \"uri-user\", connector none",
	"uri-03":                          "dbname: libpq \"db\", connector none; user: libpq \"uri-user\", connector none",
	"uri-04":                          "dbname: libpq \"db\", connector none",
	"uri-05":                          "dbname: libpq \"db\", connector none",
	"uri-06":                          "user: libpq \"uri-user\", connector none",
	"uri-07":                          "user: libpq \"uri-user\", connector none",
	"uri-08":                          "user: libpq \"uri-user\", connector none",
	"uri-11":                          "dbname: libpq \"db\", connector none",
	"uri-17":                          "host: libpq \"host\", connector \"%68ost\"",
	"uri-18":                          "dbname: libpq \"db\", connector none",
	"uri-19":                          "dbname: libpq \"db\", connector none",
	"uri-20":                          "dbname: libpq \"db\", connector none; u%73er: libpq none, connector \"someotheruser\"; user: libpq \"someotheruser\", connector none",
	"uri-21":                          "libpq refuses it (invalid URI query parameter: \"uzer\"); the connector accepts it, reading {host=\"host\" port=\"12345\" u%7aer=\"someotheruser\"}",
	"uri-24":                          "  user : libpq none, connector \" uri-user \";  port  : libpq none, connector \" 12345 \"; port: libpq \"12345\", connector none; user: libpq \"uri-user\", connector none",
	"uri-27":                          ": libpq none, connector \"\"",
	"uri-28":                          "dbname: libpq \"db\", connector none; host: libpq \"::1\", connector \"[::1]\"",
	"uri-29":                          "libpq reads {dbname=\"db\" host=\"::1\"}; the connector's reading fails: the value of port does not decode",
	"uri-30":                          "libpq reads {host=\"2001:db8::1234\"}; the connector's reading fails: the value of port does not decode",
	"uri-31":                          "libpq reads {host=\"200z:db8::1234\"}; the connector's reading fails: the value of port does not decode",
	"uri-32":                          "libpq reads {host=\"::1\"}; the connector's reading fails: the value of port does not decode",
	"uri-35":                          "dbname: libpq \"db\", connector none",
	"uri-36":                          "dbname: libpq \"db\", connector none; user: libpq \"uri-user\", connector none",
	"uri-38":                          "libpq refuses it (invalid URI query parameter: \"uzer\"); the connector accepts it, reading {host=\"host\" uzer=\"\"}",
	"uri-52":                          "port: libpq none, connector \"\"",
	"uri-54":                          "user: libpq \"otheruser\", connector none",
	"uri-55":                          "user: libpq \"otheruser\", connector none",
	"uri-56":                          "user: libpq \"otheruser\", connector none",
	"uri-57":                          "dbname: libpq \"db\", connector none; user: libpq \"otheruser\", connector none",
	"uri-58":                          "dbname: libpq \"db\", connector none",
	"uri-60":                          "dbname: libpq \"dbname\", connector none; host: libpq \"/var/lib/postgresql\", connector \"%2Fvar%2Flib%2Fpostgresql\"",
	"url-user-qmark-start-raw":        "application_name: libpq \"app\", connector none; dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; u:pw@h:5432/db?application_name: libpq none, connector \"app\"; user: libpq \"?u\", connector none",
	"url-user-qmark-start-enc":        "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"?u\", connector none",
	"url-user-amp-start-raw":          "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"&u\", connector none",
	"url-user-amp-start-enc":          "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"&u\", connector none",
	"url-user-eq-start-raw":           "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"=u\", connector none",
	"url-user-eq-start-enc":           "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"=u\", connector none",
	"url-user-plus-start-raw":         "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"+u\", connector none",
	"url-user-plus-start-enc":         "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"+u\", connector none",
	"url-user-pct-start-enc":          "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"%u\", connector none",
	"url-user-at-start-raw":           "dbname: libpq \"db\", connector none",
	"url-user-at-start-enc":           "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"@u\", connector none",
	"url-user-slash-start-raw":        "dbname: libpq \"u:pw@h:5432/db\", connector none",
	"url-user-slash-start-enc":        "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"/u\", connector none",
	"url-user-colon-start-raw":        "dbname: libpq \"db\", connector none; password: libpq \"u:pw\", connector none",
	"url-user-colon-start-enc":        "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \":u\", connector none",
	"url-user-hash-start-raw":         "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"#u\", connector none",
	"url-user-hash-start-enc":         "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"#u\", connector none",
	"url-user-space-start-raw":        "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-user-space-start-enc":        "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \" u\", connector none",
	"url-user-quote-start-raw":        "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"'u\", connector none",
	"url-user-quote-start-enc":        "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"'u\", connector none",
	"url-user-bslash-start-raw":       "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"\\\\u\", connector none",
	"url-user-bslash-start-enc":       "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"\\\\u\", connector none",
	"url-user-comma-start-raw":        "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \",u\", connector none",
	"url-user-comma-start-enc":        "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \",u\", connector none",
	"url-user-lbracket-start-raw":     "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"[u\", connector none",
	"url-user-lbracket-start-enc":     "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"[u\", connector none",
	"url-user-rbracket-start-raw":     "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"]u\", connector none",
	"url-user-rbracket-start-enc":     "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"]u\", connector none",
	"url-user-qmark-mid-raw":          ":pw@h:5432/db?application_name: libpq none, connector \"app\"; application_name: libpq \"app\", connector none; dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u?\", connector none",
	"url-user-qmark-mid-enc":          "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u?\", connector none",
	"url-user-amp-mid-raw":            "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u&\", connector none",
	"url-user-amp-mid-enc":            "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u&\", connector none",
	"url-user-eq-mid-raw":             "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u=\", connector none",
	"url-user-eq-mid-enc":             "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u=\", connector none",
	"url-user-plus-mid-raw":           "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u+\", connector none",
	"url-user-plus-mid-enc":           "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u+\", connector none",
	"url-user-pct-mid-enc":            "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u%\", connector none",
	"url-user-at-mid-raw":             "dbname: libpq \"db\", connector none; user: libpq \"u\", connector none",
	"url-user-at-mid-enc":             "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u@\", connector none",
	"url-user-slash-mid-raw":          "dbname: libpq \":pw@h:5432/db\", connector none",
	"url-user-slash-mid-enc":          "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u/\", connector none",
	"url-user-colon-mid-raw":          "dbname: libpq \"db\", connector none; password: libpq \":pw\", connector none; user: libpq \"u\", connector none",
	"url-user-colon-mid-enc":          "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u:\", connector none",
	"url-user-hash-mid-raw":           "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u#\", connector none",
	"url-user-hash-mid-enc":           "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u#\", connector none",
	"url-user-space-mid-raw":          "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-user-space-mid-enc":          "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u \", connector none",
	"url-user-quote-mid-raw":          "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u'\", connector none",
	"url-user-quote-mid-enc":          "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u'\", connector none",
	"url-user-bslash-mid-raw":         "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\\\\\", connector none",
	"url-user-bslash-mid-enc":         "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\\\\\", connector none",
	"url-user-comma-mid-raw":          "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u,\", connector none",
	"url-user-comma-mid-enc":          "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u,\", connector none",
	"url-user-lbracket-mid-raw":       "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u[\", connector none",
	"url-user-lbracket-mid-enc":       "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u[\", connector none",
	"url-user-rbracket-mid-raw":       "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u]\", connector none",
	"url-user-rbracket-mid-enc":       "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u]\", connector none",
	"url-user-qmark-end-raw":          ":pw@h:5432/db?application_name: libpq none, connector \"app\"; application_name: libpq \"app\", connector none; dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u?\", connector none",
	"url-user-qmark-end-enc":          "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u?\", connector none",
	"url-user-amp-end-raw":            "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u&\", connector none",
	"url-user-amp-end-enc":            "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u&\", connector none",
	"url-user-eq-end-raw":             "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u=\", connector none",
	"url-user-eq-end-enc":             "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u=\", connector none",
	"url-user-plus-end-raw":           "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u+\", connector none",
	"url-user-plus-end-enc":           "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u+\", connector none",
	"url-user-pct-end-enc":            "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u%\", connector none",
	"url-user-at-end-raw":             "dbname: libpq \"db\", connector none; user: libpq \"u\", connector none",
	"url-user-at-end-enc":             "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u@\", connector none",
	"url-user-slash-end-raw":          "dbname: libpq \":pw@h:5432/db\", connector none",
	"url-user-slash-end-enc":          "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u/\", connector none",
	"url-user-colon-end-raw":          "dbname: libpq \"db\", connector none; password: libpq \":pw\", connector none; user: libpq \"u\", connector none",
	"url-user-colon-end-enc":          "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u:\", connector none",
	"url-user-hash-end-raw":           "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u#\", connector none",
	"url-user-hash-end-enc":           "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u#\", connector none",
	"url-user-space-end-raw":          "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-user-space-end-enc":          "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u \", connector none",
	"url-user-quote-end-raw":          "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u'\", connector none",
	"url-user-quote-end-enc":          "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u'\", connector none",
	"url-user-bslash-end-raw":         "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\\\\\", connector none",
	"url-user-bslash-end-enc":         "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\\\\\", connector none",
	"url-user-comma-end-raw":          "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u,\", connector none",
	"url-user-comma-end-enc":          "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u,\", connector none",
	"url-user-lbracket-end-raw":       "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u[\", connector none",
	"url-user-lbracket-end-enc":       "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u[\", connector none",
	"url-user-rbracket-end-raw":       "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u]\", connector none",
	"url-user-rbracket-end-enc":       "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u]\", connector none",
	"url-password-qmark-start-raw":    "application_name: libpq \"app\", connector none; dbname: libpq \"db\", connector none; password: libpq \"?pw\", connector none; pw@h:5432/db?application_name: libpq none, connector \"app\"; user: libpq \"u\", connector none",
	"url-password-qmark-start-enc":    "dbname: libpq \"db\", connector none; password: libpq \"?pw\", connector none; user: libpq \"u\", connector none",
	"url-password-amp-start-raw":      "dbname: libpq \"db\", connector none; password: libpq \"&pw\", connector none; user: libpq \"u\", connector none",
	"url-password-amp-start-enc":      "dbname: libpq \"db\", connector none; password: libpq \"&pw\", connector none; user: libpq \"u\", connector none",
	"url-password-eq-start-raw":       "dbname: libpq \"db\", connector none; password: libpq \"=pw\", connector none; user: libpq \"u\", connector none",
	"url-password-eq-start-enc":       "dbname: libpq \"db\", connector none; password: libpq \"=pw\", connector none; user: libpq \"u\", connector none",
	"url-password-plus-start-raw":     "dbname: libpq \"db\", connector none; password: libpq \"+pw\", connector none; user: libpq \"u\", connector none",
	"url-password-plus-start-enc":     "dbname: libpq \"db\", connector none; password: libpq \"+pw\", connector none; user: libpq \"u\", connector none",
	"url-password-pct-start-enc":      "dbname: libpq \"db\", connector none; password: libpq \"%pw\", connector none; user: libpq \"u\", connector none",
	"url-password-at-start-raw":       "dbname: libpq \"db\", connector none; user: libpq \"u\", connector none",
	"url-password-at-start-enc":       "dbname: libpq \"db\", connector none; password: libpq \"@pw\", connector none; user: libpq \"u\", connector none",
	"url-password-slash-start-raw":    "dbname: libpq \"pw@h:5432/db\", connector none; port: libpq none, connector \"\"",
	"url-password-slash-start-enc":    "dbname: libpq \"db\", connector none; password: libpq \"/pw\", connector none; user: libpq \"u\", connector none",
	"url-password-colon-start-raw":    "dbname: libpq \"db\", connector none; password: libpq \":pw\", connector none; user: libpq \"u\", connector none",
	"url-password-colon-start-enc":    "dbname: libpq \"db\", connector none; password: libpq \":pw\", connector none; user: libpq \"u\", connector none",
	"url-password-hash-start-raw":     "dbname: libpq \"db\", connector none; password: libpq \"#pw\", connector none; user: libpq \"u\", connector none",
	"url-password-hash-start-enc":     "dbname: libpq \"db\", connector none; password: libpq \"#pw\", connector none; user: libpq \"u\", connector none",
	"url-password-space-start-raw":    "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-password-space-start-enc":    "dbname: libpq \"db\", connector none; password: libpq \" pw\", connector none; user: libpq \"u\", connector none",
	"url-password-quote-start-raw":    "dbname: libpq \"db\", connector none; password: libpq \"'pw\", connector none; user: libpq \"u\", connector none",
	"url-password-quote-start-enc":    "dbname: libpq \"db\", connector none; password: libpq \"'pw\", connector none; user: libpq \"u\", connector none",
	"url-password-bslash-start-raw":   "dbname: libpq \"db\", connector none; password: libpq \"\\\\pw\", connector none; user: libpq \"u\", connector none",
	"url-password-bslash-start-enc":   "dbname: libpq \"db\", connector none; password: libpq \"\\\\pw\", connector none; user: libpq \"u\", connector none",
	"url-password-comma-start-raw":    "dbname: libpq \"db\", connector none; password: libpq \",pw\", connector none; user: libpq \"u\", connector none",
	"url-password-comma-start-enc":    "dbname: libpq \"db\", connector none; password: libpq \",pw\", connector none; user: libpq \"u\", connector none",
	"url-password-lbracket-start-raw": "dbname: libpq \"db\", connector none; password: libpq \"[pw\", connector none; user: libpq \"u\", connector none",
	"url-password-lbracket-start-enc": "dbname: libpq \"db\", connector none; password: libpq \"[pw\", connector none; user: libpq \"u\", connector none",
	"url-password-rbracket-start-raw": "dbname: libpq \"db\", connector none; password: libpq \"]pw\", connector none; user: libpq \"u\", connector none",
	"url-password-rbracket-start-enc": "dbname: libpq \"db\", connector none; password: libpq \"]pw\", connector none; user: libpq \"u\", connector none",
	"url-password-qmark-mid-raw":      "application_name: libpq \"app\", connector none; dbname: libpq \"db\", connector none; password: libpq \"p?w\", connector none; user: libpq \"u\", connector none; w@h:5432/db?application_name: libpq none, connector \"app\"",
	"url-password-qmark-mid-enc":      "dbname: libpq \"db\", connector none; password: libpq \"p?w\", connector none; user: libpq \"u\", connector none",
	"url-password-amp-mid-raw":        "dbname: libpq \"db\", connector none; password: libpq \"p&w\", connector none; user: libpq \"u\", connector none",
	"url-password-amp-mid-enc":        "dbname: libpq \"db\", connector none; password: libpq \"p&w\", connector none; user: libpq \"u\", connector none",
	"url-password-eq-mid-raw":         "dbname: libpq \"db\", connector none; password: libpq \"p=w\", connector none; user: libpq \"u\", connector none",
	"url-password-eq-mid-enc":         "dbname: libpq \"db\", connector none; password: libpq \"p=w\", connector none; user: libpq \"u\", connector none",
	"url-password-plus-mid-raw":       "dbname: libpq \"db\", connector none; password: libpq \"p+w\", connector none; user: libpq \"u\", connector none",
	"url-password-plus-mid-enc":       "dbname: libpq \"db\", connector none; password: libpq \"p+w\", connector none; user: libpq \"u\", connector none",
	"url-password-pct-mid-enc":        "dbname: libpq \"db\", connector none; password: libpq \"p%w\", connector none; user: libpq \"u\", connector none",
	"url-password-at-mid-raw":         "dbname: libpq \"db\", connector none; password: libpq \"p\", connector none; user: libpq \"u\", connector none",
	"url-password-at-mid-enc":         "dbname: libpq \"db\", connector none; password: libpq \"p@w\", connector none; user: libpq \"u\", connector none",
	"url-password-slash-mid-raw":      "dbname: libpq \"w@h:5432/db\", connector none",
	"url-password-slash-mid-enc":      "dbname: libpq \"db\", connector none; password: libpq \"p/w\", connector none; user: libpq \"u\", connector none",
	"url-password-colon-mid-raw":      "dbname: libpq \"db\", connector none; password: libpq \"p:w\", connector none; user: libpq \"u\", connector none",
	"url-password-colon-mid-enc":      "dbname: libpq \"db\", connector none; password: libpq \"p:w\", connector none; user: libpq \"u\", connector none",
	"url-password-hash-mid-raw":       "dbname: libpq \"db\", connector none; password: libpq \"p#w\", connector none; user: libpq \"u\", connector none",
	"url-password-hash-mid-enc":       "dbname: libpq \"db\", connector none; password: libpq \"p#w\", connector none; user: libpq \"u\", connector none",
	"url-password-space-mid-enc":      "dbname: libpq \"db\", connector none; password: libpq \"p w\", connector none; user: libpq \"u\", connector none",
	"url-password-quote-mid-raw":      "dbname: libpq \"db\", connector none; password: libpq \"p'w\", connector none; user: libpq \"u\", connector none",
	"url-password-quote-mid-enc":      "dbname: libpq \"db\", connector none; password: libpq \"p'w\", connector none; user: libpq \"u\", connector none",
	"url-password-bslash-mid-raw":     "dbname: libpq \"db\", connector none; password: libpq \"p\\\\w\", connector none; user: libpq \"u\", connector none",
	"url-password-bslash-mid-enc":     "dbname: libpq \"db\", connector none; password: libpq \"p\\\\w\", connector none; user: libpq \"u\", connector none",
	"url-password-comma-mid-raw":      "dbname: libpq \"db\", connector none; password: libpq \"p,w\", connector none; user: libpq \"u\", connector none",
	"url-password-comma-mid-enc":      "dbname: libpq \"db\", connector none; password: libpq \"p,w\", connector none; user: libpq \"u\", connector none",
	"url-password-lbracket-mid-raw":   "dbname: libpq \"db\", connector none; password: libpq \"p[w\", connector none; user: libpq \"u\", connector none",
	"url-password-lbracket-mid-enc":   "dbname: libpq \"db\", connector none; password: libpq \"p[w\", connector none; user: libpq \"u\", connector none",
	"url-password-rbracket-mid-raw":   "dbname: libpq \"db\", connector none; password: libpq \"p]w\", connector none; user: libpq \"u\", connector none",
	"url-password-rbracket-mid-enc":   "dbname: libpq \"db\", connector none; password: libpq \"p]w\", connector none; user: libpq \"u\", connector none",
	"url-password-qmark-end-raw":      "@h:5432/db?application_name: libpq none, connector \"app\"; application_name: libpq \"app\", connector none; dbname: libpq \"db\", connector none; password: libpq \"pw?\", connector none; user: libpq \"u\", connector none",
	"url-password-qmark-end-enc":      "dbname: libpq \"db\", connector none; password: libpq \"pw?\", connector none; user: libpq \"u\", connector none",
	"url-password-amp-end-raw":        "dbname: libpq \"db\", connector none; password: libpq \"pw&\", connector none; user: libpq \"u\", connector none",
	"url-password-amp-end-enc":        "dbname: libpq \"db\", connector none; password: libpq \"pw&\", connector none; user: libpq \"u\", connector none",
	"url-password-eq-end-raw":         "dbname: libpq \"db\", connector none; password: libpq \"pw=\", connector none; user: libpq \"u\", connector none",
	"url-password-eq-end-enc":         "dbname: libpq \"db\", connector none; password: libpq \"pw=\", connector none; user: libpq \"u\", connector none",
	"url-password-plus-end-raw":       "dbname: libpq \"db\", connector none; password: libpq \"pw+\", connector none; user: libpq \"u\", connector none",
	"url-password-plus-end-enc":       "dbname: libpq \"db\", connector none; password: libpq \"pw+\", connector none; user: libpq \"u\", connector none",
	"url-password-pct-end-enc":        "dbname: libpq \"db\", connector none; password: libpq \"pw%\", connector none; user: libpq \"u\", connector none",
	"url-password-at-end-raw":         "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-password-at-end-enc":         "dbname: libpq \"db\", connector none; password: libpq \"pw@\", connector none; user: libpq \"u\", connector none",
	"url-password-slash-end-raw":      "dbname: libpq \"@h:5432/db\", connector none",
	"url-password-slash-end-enc":      "dbname: libpq \"db\", connector none; password: libpq \"pw/\", connector none; user: libpq \"u\", connector none",
	"url-password-colon-end-raw":      "dbname: libpq \"db\", connector none; password: libpq \"pw:\", connector none; user: libpq \"u\", connector none",
	"url-password-colon-end-enc":      "dbname: libpq \"db\", connector none; password: libpq \"pw:\", connector none; user: libpq \"u\", connector none",
	"url-password-hash-end-raw":       "dbname: libpq \"db\", connector none; password: libpq \"pw#\", connector none; user: libpq \"u\", connector none",
	"url-password-hash-end-enc":       "dbname: libpq \"db\", connector none; password: libpq \"pw#\", connector none; user: libpq \"u\", connector none",
	"url-password-space-end-raw":      "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-password-space-end-enc":      "dbname: libpq \"db\", connector none; password: libpq \"pw \", connector none; user: libpq \"u\", connector none",
	"url-password-quote-end-raw":      "dbname: libpq \"db\", connector none; password: libpq \"pw'\", connector none; user: libpq \"u\", connector none",
	"url-password-quote-end-enc":      "dbname: libpq \"db\", connector none; password: libpq \"pw'\", connector none; user: libpq \"u\", connector none",
	"url-password-bslash-end-raw":     "dbname: libpq \"db\", connector none; password: libpq \"pw\\\\\", connector none; user: libpq \"u\", connector none",
	"url-password-bslash-end-enc":     "dbname: libpq \"db\", connector none; password: libpq \"pw\\\\\", connector none; user: libpq \"u\", connector none",
	"url-password-comma-end-raw":      "dbname: libpq \"db\", connector none; password: libpq \"pw,\", connector none; user: libpq \"u\", connector none",
	"url-password-comma-end-enc":      "dbname: libpq \"db\", connector none; password: libpq \"pw,\", connector none; user: libpq \"u\", connector none",
	"url-password-lbracket-end-raw":   "dbname: libpq \"db\", connector none; password: libpq \"pw[\", connector none; user: libpq \"u\", connector none",
	"url-password-lbracket-end-enc":   "dbname: libpq \"db\", connector none; password: libpq \"pw[\", connector none; user: libpq \"u\", connector none",
	"url-password-rbracket-end-raw":   "dbname: libpq \"db\", connector none; password: libpq \"pw]\", connector none; user: libpq \"u\", connector none",
	"url-password-rbracket-end-enc":   "dbname: libpq \"db\", connector none; password: libpq \"pw]\", connector none; user: libpq \"u\", connector none",
	"url-host-qmark-mid-raw":          "libpq refuses it (invalid URI query parameter: \":5432/db?application_name\"); the connector accepts it, reading {:5432/db?application_name=\"app\" host=\"h\" sslmode=\"disable\"}",
	"url-host-qmark-mid-enc":          "dbname: libpq \"db\", connector none; host: libpq \"h?\", connector \"h%3F\"; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-host-amp-mid-raw":            "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-host-amp-mid-enc":            "dbname: libpq \"db\", connector none; host: libpq \"h&\", connector \"h%26\"; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-host-eq-mid-raw":             "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-host-eq-mid-enc":             "dbname: libpq \"db\", connector none; host: libpq \"h=\", connector \"h%3D\"; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-host-plus-mid-raw":           "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-host-plus-mid-enc":           "dbname: libpq \"db\", connector none; host: libpq \"h+\", connector \"h%2B\"; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-host-pct-mid-enc":            "dbname: libpq \"db\", connector none; host: libpq \"h%\", connector \"h%25\"; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-host-at-mid-raw":             "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-host-at-mid-enc":             "dbname: libpq \"db\", connector none; host: libpq \"h@\", connector \"h%40\"; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-host-slash-mid-raw":          "dbname: libpq \":5432/db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-host-slash-mid-enc":          "dbname: libpq \"db\", connector none; host: libpq \"h/\", connector \"h%2F\"; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-host-colon-mid-raw":          "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-host-colon-mid-enc":          "dbname: libpq \"db\", connector none; host: libpq \"h:\", connector \"h%3A\"; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-host-hash-mid-raw":           "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-host-hash-mid-enc":           "dbname: libpq \"db\", connector none; host: libpq \"h#\", connector \"h%23\"; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-host-space-mid-raw":          "dbname: libpq \"db\", connector none; host: libpq \"h\", connector \"h \"; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-host-space-mid-enc":          "dbname: libpq \"db\", connector none; host: libpq \"h \", connector \"h%20\"; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-host-quote-mid-raw":          "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-host-quote-mid-enc":          "dbname: libpq \"db\", connector none; host: libpq \"h'\", connector \"h%27\"; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-host-bslash-mid-raw":         "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-host-bslash-mid-enc":         "dbname: libpq \"db\", connector none; host: libpq \"h\\\\\", connector \"h%5C\"; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-host-comma-mid-raw":          "dbname: libpq \"db\", connector none; host: libpq \"h,\", connector \"h\"; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-host-comma-mid-enc":          "dbname: libpq \"db\", connector none; host: libpq \"h,\", connector \"h%2C\"; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-host-lbracket-mid-raw":       "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-host-lbracket-mid-enc":       "dbname: libpq \"db\", connector none; host: libpq \"h[\", connector \"h%5B\"; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-host-rbracket-mid-raw":       "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-host-rbracket-mid-enc":       "dbname: libpq \"db\", connector none; host: libpq \"h]\", connector \"h%5D\"; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-port-qmark-mid-raw":          "libpq refuses it (invalid URI query parameter: \"432/db?application_name\"); the connector accepts it, reading {432/db?application_name=\"app\" host=\"h\" port=\"5\" sslmode=\"disable\"}",
	"url-port-qmark-mid-enc":          "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-port-amp-mid-raw":            "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-port-amp-mid-enc":            "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-port-eq-mid-raw":             "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-port-eq-mid-enc":             "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-port-plus-mid-raw":           "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-port-plus-mid-enc":           "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-port-pct-mid-raw":            "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-port-pct-mid-enc":            "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-port-at-mid-raw":             "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-port-at-mid-enc":             "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-port-slash-mid-raw":          "dbname: libpq \"432/db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-port-slash-mid-enc":          "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-port-colon-mid-raw":          "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-port-colon-mid-enc":          "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-port-hash-mid-raw":           "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-port-hash-mid-enc":           "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-port-space-mid-enc":          "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-port-quote-mid-raw":          "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-port-quote-mid-enc":          "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-port-bslash-mid-raw":         "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-port-bslash-mid-enc":         "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-port-comma-mid-raw":          "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-port-comma-mid-enc":          "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-port-lbracket-mid-raw":       "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-port-lbracket-mid-enc":       "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-port-rbracket-mid-raw":       "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-port-rbracket-mid-enc":       "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-qmark-start-raw":      "libpq refuses it (invalid URI query parameter: \"db?application_name\"); the connector accepts it, reading {db?application_name=\"app\" host=\"h\" port=\"5432\" sslmode=\"disable\"}",
	"url-dbname-qmark-start-enc":      "dbname: libpq \"?db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-amp-start-raw":        "dbname: libpq \"&db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-amp-start-enc":        "dbname: libpq \"&db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-eq-start-raw":         "dbname: libpq \"=db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-eq-start-enc":         "dbname: libpq \"=db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-plus-start-raw":       "dbname: libpq \"+db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-plus-start-enc":       "dbname: libpq \"+db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-pct-start-raw":        "dbname: libpq \"\\xdb\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-pct-start-enc":        "dbname: libpq \"%db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-at-start-raw":         "dbname: libpq \"@db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-at-start-enc":         "dbname: libpq \"@db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-slash-start-raw":      "dbname: libpq \"/db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-slash-start-enc":      "dbname: libpq \"/db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-colon-start-raw":      "dbname: libpq \":db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-colon-start-enc":      "dbname: libpq \":db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-hash-start-raw":       "dbname: libpq \"#db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-hash-start-enc":       "dbname: libpq \"#db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-space-start-raw":      "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-space-start-enc":      "dbname: libpq \" db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-quote-start-raw":      "dbname: libpq \"'db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-quote-start-enc":      "dbname: libpq \"'db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-bslash-start-raw":     "dbname: libpq \"\\\\db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-bslash-start-enc":     "dbname: libpq \"\\\\db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-comma-start-raw":      "dbname: libpq \",db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-comma-start-enc":      "dbname: libpq \",db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-lbracket-start-raw":   "dbname: libpq \"[db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-lbracket-start-enc":   "dbname: libpq \"[db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-rbracket-start-raw":   "dbname: libpq \"]db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-rbracket-start-enc":   "dbname: libpq \"]db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-qmark-mid-raw":        "libpq refuses it (invalid URI query parameter: \"b?application_name\"); the connector accepts it, reading {b?application_name=\"app\" host=\"h\" port=\"5432\" sslmode=\"disable\"}",
	"url-dbname-qmark-mid-enc":        "dbname: libpq \"d?b\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-amp-mid-raw":          "dbname: libpq \"d&b\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-amp-mid-enc":          "dbname: libpq \"d&b\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-eq-mid-raw":           "dbname: libpq \"d=b\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-eq-mid-enc":           "dbname: libpq \"d=b\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-plus-mid-raw":         "dbname: libpq \"d+b\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-plus-mid-enc":         "dbname: libpq \"d+b\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-pct-mid-enc":          "dbname: libpq \"d%b\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-at-mid-raw":           "dbname: libpq \"d@b\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-at-mid-enc":           "dbname: libpq \"d@b\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-slash-mid-raw":        "dbname: libpq \"d/b\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-slash-mid-enc":        "dbname: libpq \"d/b\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-colon-mid-raw":        "dbname: libpq \"d:b\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-colon-mid-enc":        "dbname: libpq \"d:b\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-hash-mid-raw":         "dbname: libpq \"d#b\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-hash-mid-enc":         "dbname: libpq \"d#b\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-space-mid-enc":        "dbname: libpq \"d b\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-quote-mid-raw":        "dbname: libpq \"d'b\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-quote-mid-enc":        "dbname: libpq \"d'b\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-bslash-mid-raw":       "dbname: libpq \"d\\\\b\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-bslash-mid-enc":       "dbname: libpq \"d\\\\b\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-comma-mid-raw":        "dbname: libpq \"d,b\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-comma-mid-enc":        "dbname: libpq \"d,b\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-lbracket-mid-raw":     "dbname: libpq \"d[b\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-lbracket-mid-enc":     "dbname: libpq \"d[b\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-rbracket-mid-raw":     "dbname: libpq \"d]b\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-rbracket-mid-enc":     "dbname: libpq \"d]b\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-qmark-end-raw":        "libpq refuses it (invalid URI query parameter: \"?application_name\"); the connector accepts it, reading {?application_name=\"app\" host=\"h\" port=\"5432\" sslmode=\"disable\"}",
	"url-dbname-qmark-end-enc":        "dbname: libpq \"db?\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-amp-end-raw":          "dbname: libpq \"db&\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-amp-end-enc":          "dbname: libpq \"db&\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-eq-end-raw":           "dbname: libpq \"db=\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-eq-end-enc":           "dbname: libpq \"db=\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-plus-end-raw":         "dbname: libpq \"db+\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-plus-end-enc":         "dbname: libpq \"db+\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-pct-end-enc":          "dbname: libpq \"db%\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-at-end-raw":           "dbname: libpq \"db@\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-at-end-enc":           "dbname: libpq \"db@\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-slash-end-raw":        "dbname: libpq \"db/\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-slash-end-enc":        "dbname: libpq \"db/\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-colon-end-raw":        "dbname: libpq \"db:\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-colon-end-enc":        "dbname: libpq \"db:\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-hash-end-raw":         "dbname: libpq \"db#\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-hash-end-enc":         "dbname: libpq \"db#\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-space-end-raw":        "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-space-end-enc":        "dbname: libpq \"db \", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-quote-end-raw":        "dbname: libpq \"db'\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-quote-end-enc":        "dbname: libpq \"db'\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-bslash-end-raw":       "dbname: libpq \"db\\\\\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-bslash-end-enc":       "dbname: libpq \"db\\\\\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-comma-end-raw":        "dbname: libpq \"db,\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-comma-end-enc":        "dbname: libpq \"db,\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-lbracket-end-raw":     "dbname: libpq \"db[\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-lbracket-end-enc":     "dbname: libpq \"db[\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-rbracket-end-raw":     "dbname: libpq \"db]\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-dbname-rbracket-end-enc":     "dbname: libpq \"db]\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-key-qmark-mid-raw":           "libpq refuses it (invalid URI query parameter: \"a?pplication_name\"); the connector accepts it, reading {a?pplication_name=\"app\" host=\"h\" port=\"5432\" sslmode=\"disable\"}",
	"url-key-qmark-mid-enc":           "libpq refuses it (invalid URI query parameter: \"a?pplication_name\"); the connector accepts it, reading {a%3Fpplication_name=\"app\" host=\"h\" port=\"5432\" sslmode=\"disable\"}",
	"url-key-amp-mid-enc":             "libpq refuses it (invalid URI query parameter: \"a&pplication_name\"); the connector accepts it, reading {a%26pplication_name=\"app\" host=\"h\" port=\"5432\" sslmode=\"disable\"}",
	"url-key-eq-mid-enc":              "libpq refuses it (invalid URI query parameter: \"a=pplication_name\"); the connector accepts it, reading {a%3Dpplication_name=\"app\" host=\"h\" port=\"5432\" sslmode=\"disable\"}",
	"url-key-plus-mid-raw":            "libpq refuses it (invalid URI query parameter: \"a+pplication_name\"); the connector accepts it, reading {a+pplication_name=\"app\" host=\"h\" port=\"5432\" sslmode=\"disable\"}",
	"url-key-plus-mid-enc":            "libpq refuses it (invalid URI query parameter: \"a+pplication_name\"); the connector accepts it, reading {a%2Bpplication_name=\"app\" host=\"h\" port=\"5432\" sslmode=\"disable\"}",
	"url-key-pct-mid-enc":             "libpq refuses it (invalid URI query parameter: \"a%pplication_name\"); the connector accepts it, reading {a%25pplication_name=\"app\" host=\"h\" port=\"5432\" sslmode=\"disable\"}",
	"url-key-at-mid-raw":              "libpq refuses it (invalid URI query parameter: \"a@pplication_name\"); the connector accepts it, reading {a@pplication_name=\"app\" host=\"h\" port=\"5432\" sslmode=\"disable\"}",
	"url-key-at-mid-enc":              "libpq refuses it (invalid URI query parameter: \"a@pplication_name\"); the connector accepts it, reading {a%40pplication_name=\"app\" host=\"h\" port=\"5432\" sslmode=\"disable\"}",
	"url-key-slash-mid-raw":           "libpq refuses it (invalid URI query parameter: \"a/pplication_name\"); the connector accepts it, reading {a/pplication_name=\"app\" host=\"h\" port=\"5432\" sslmode=\"disable\"}",
	"url-key-slash-mid-enc":           "libpq refuses it (invalid URI query parameter: \"a/pplication_name\"); the connector accepts it, reading {a%2Fpplication_name=\"app\" host=\"h\" port=\"5432\" sslmode=\"disable\"}",
	"url-key-colon-mid-raw":           "libpq refuses it (invalid URI query parameter: \"a:pplication_name\"); the connector accepts it, reading {a:pplication_name=\"app\" host=\"h\" port=\"5432\" sslmode=\"disable\"}",
	"url-key-colon-mid-enc":           "libpq refuses it (invalid URI query parameter: \"a:pplication_name\"); the connector accepts it, reading {a%3Application_name=\"app\" host=\"h\" port=\"5432\" sslmode=\"disable\"}",
	"url-key-hash-mid-raw":            "libpq refuses it (invalid URI query parameter: \"a#pplication_name\"); the connector accepts it, reading {a#pplication_name=\"app\" host=\"h\" port=\"5432\" sslmode=\"disable\"}",
	"url-key-hash-mid-enc":            "libpq refuses it (invalid URI query parameter: \"a#pplication_name\"); the connector accepts it, reading {a%23pplication_name=\"app\" host=\"h\" port=\"5432\" sslmode=\"disable\"}",
	"url-key-space-mid-enc":           "libpq refuses it (invalid URI query parameter: \"a pplication_name\"); the connector accepts it, reading {a%20pplication_name=\"app\" host=\"h\" port=\"5432\" sslmode=\"disable\"}",
	"url-key-quote-mid-raw":           "libpq refuses it (invalid URI query parameter: \"a'pplication_name\"); the connector accepts it, reading {a'pplication_name=\"app\" host=\"h\" port=\"5432\" sslmode=\"disable\"}",
	"url-key-quote-mid-enc":           "libpq refuses it (invalid URI query parameter: \"a'pplication_name\"); the connector accepts it, reading {a%27pplication_name=\"app\" host=\"h\" port=\"5432\" sslmode=\"disable\"}",
	"url-key-bslash-mid-raw":          "libpq refuses it (invalid URI query parameter: \"a\\pplication_name\"); the connector accepts it, reading {a\\pplication_name=\"app\" host=\"h\" port=\"5432\" sslmode=\"disable\"}",
	"url-key-bslash-mid-enc":          "libpq refuses it (invalid URI query parameter: \"a\\pplication_name\"); the connector accepts it, reading {a%5Cpplication_name=\"app\" host=\"h\" port=\"5432\" sslmode=\"disable\"}",
	"url-key-comma-mid-raw":           "libpq refuses it (invalid URI query parameter: \"a,pplication_name\"); the connector accepts it, reading {a,pplication_name=\"app\" host=\"h\" port=\"5432\" sslmode=\"disable\"}",
	"url-key-comma-mid-enc":           "libpq refuses it (invalid URI query parameter: \"a,pplication_name\"); the connector accepts it, reading {a%2Cpplication_name=\"app\" host=\"h\" port=\"5432\" sslmode=\"disable\"}",
	"url-key-lbracket-mid-raw":        "libpq refuses it (invalid URI query parameter: \"a[pplication_name\"); the connector accepts it, reading {a[pplication_name=\"app\" host=\"h\" port=\"5432\" sslmode=\"disable\"}",
	"url-key-lbracket-mid-enc":        "libpq refuses it (invalid URI query parameter: \"a[pplication_name\"); the connector accepts it, reading {a%5Bpplication_name=\"app\" host=\"h\" port=\"5432\" sslmode=\"disable\"}",
	"url-key-rbracket-mid-raw":        "libpq refuses it (invalid URI query parameter: \"a]pplication_name\"); the connector accepts it, reading {a]pplication_name=\"app\" host=\"h\" port=\"5432\" sslmode=\"disable\"}",
	"url-key-rbracket-mid-enc":        "libpq refuses it (invalid URI query parameter: \"a]pplication_name\"); the connector accepts it, reading {a%5Dpplication_name=\"app\" host=\"h\" port=\"5432\" sslmode=\"disable\"}",
	"url-value-qmark-start-raw":       "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-qmark-start-enc":       "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-amp-start-enc":         "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-eq-start-enc":          "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-plus-start-raw":        "application_name: libpq \"+app\", connector \" app\"; dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-plus-start-enc":        "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-pct-start-enc":         "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-at-start-raw":          "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-at-start-enc":          "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-slash-start-raw":       "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-slash-start-enc":       "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-colon-start-raw":       "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-colon-start-enc":       "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-hash-start-raw":        "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-hash-start-enc":        "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-space-start-raw":       "application_name: libpq \"app\", connector \" app\"; dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-space-start-enc":       "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-quote-start-raw":       "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-quote-start-enc":       "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-bslash-start-raw":      "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-bslash-start-enc":      "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-comma-start-raw":       "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-comma-start-enc":       "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-lbracket-start-raw":    "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-lbracket-start-enc":    "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-rbracket-start-raw":    "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-rbracket-start-enc":    "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-qmark-mid-raw":         "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-qmark-mid-enc":         "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-amp-mid-enc":           "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-eq-mid-enc":            "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-plus-mid-raw":          "application_name: libpq \"a+pp\", connector \"a pp\"; dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-plus-mid-enc":          "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-pct-mid-enc":           "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-at-mid-raw":            "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-at-mid-enc":            "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-slash-mid-raw":         "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-slash-mid-enc":         "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-colon-mid-raw":         "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-colon-mid-enc":         "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-hash-mid-raw":          "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-hash-mid-enc":          "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-space-mid-enc":         "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-quote-mid-raw":         "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-quote-mid-enc":         "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-bslash-mid-raw":        "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-bslash-mid-enc":        "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-comma-mid-raw":         "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-comma-mid-enc":         "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-lbracket-mid-raw":      "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-lbracket-mid-enc":      "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-rbracket-mid-raw":      "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-rbracket-mid-enc":      "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-qmark-end-raw":         "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-qmark-end-enc":         "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-amp-end-enc":           "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-eq-end-enc":            "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-plus-end-raw":          "application_name: libpq \"app+\", connector \"app \"; dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-plus-end-enc":          "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-pct-end-enc":           "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-at-end-raw":            "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-at-end-enc":            "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-slash-end-raw":         "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-slash-end-enc":         "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-colon-end-raw":         "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-colon-end-enc":         "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-hash-end-raw":          "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-hash-end-enc":          "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-space-end-raw":         "application_name: libpq \"app\", connector \"app \"; dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-space-end-enc":         "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-quote-end-raw":         "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-quote-end-enc":         "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-bslash-end-raw":        "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-bslash-end-enc":        "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-comma-end-raw":         "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-comma-end-enc":         "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-lbracket-end-raw":      "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-lbracket-end-enc":      "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-rbracket-end-raw":      "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"url-value-rbracket-end-enc":      "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none; user: libpq \"u\", connector none",
	"x-pw-qmark-verify-full":          "dbname: libpq \"db\", connector none; password: libpq \"pa?ss\", connector none; ss@h/db?sslmode: libpq none, connector \"verify-full\"; sslmode: libpq \"verify-full\", connector none; user: libpq \"u\", connector none",
	"x-pw-qmark-gssencmode":           "dbname: libpq \"db\", connector none; gssencmode: libpq \"require\", connector none; password: libpq \"pa?ss\", connector none; ss@h/db?gssencmode: libpq none, connector \"require\"; user: libpq \"u\", connector none",
	"x-pw-qmark-no-query":             "dbname: libpq \"app\", connector none; password: libpq \"pa?ss\", connector none; ss@h/app: libpq none, connector \"\"; user: libpq \"u\", connector none",
	"x-pw-qmark-amp-no-query":         "dbname: libpq \"app\", connector none; password: libpq \"pa?ss&x\", connector none; ss: libpq none, connector \"\"; user: libpq \"u\", connector none; x@h/app: libpq none, connector \"\"",
	"x-pw-qmark-end":                  "@h/db?sslmode: libpq none, connector \"require\"; dbname: libpq \"db\", connector none; password: libpq \"pass?\", connector none; sslmode: libpq \"require\", connector none; user: libpq \"u\", connector none",
	"x-pw-two-at":                     "dbname: libpq \"db\", connector none; password: libpq \"p\", connector none; user: libpq \"u\", connector none",
	"x-pw-slash":                      "dbname: libpq \"ss@h/db\", connector none",
	"x-pw-hash":                       "dbname: libpq \"db\", connector none; password: libpq \"p#ss\", connector none; user: libpq \"u\", connector none",
	"x-plus-sslrootcert":              "dbname: libpq \"db\", connector none; sslrootcert: libpq \"/dir/my+ca.pem\", connector \"/dir/my ca.pem\"",
	"x-plus-options":                  "dbname: libpq \"db\", connector none; options: libpq \"-c search_path=a+b\", connector \"-c search_path=a b\"",
	"x-plus-dbname-path":              "dbname: libpq \"a+b\", connector none",
	"x-plus-user":                     "dbname: libpq \"db\", connector none; user: libpq \"a+b\", connector none",
	"x-pct20-value":                   "dbname: libpq \"db\", connector none",
	"x-pctkey-sslmode-lower":          "dbname: libpq \"db\", connector none; ssl%6dode: libpq none, connector \"verify-full\"; sslmode: libpq \"verify-full\", connector none",
	"x-pctkey-sslmode-upper":          "dbname: libpq \"db\", connector none; ssl%6Dode: libpq none, connector \"verify-full\"; sslmode: libpq \"verify-full\", connector none",
	"x-pctkey-all":                    "%73%73%6C%6D%6F%64%65: libpq none, connector \"require\"; dbname: libpq \"db\", connector none; sslmode: libpq \"require\", connector none",
	"x-pctkey-kv":                     "libpq refuses it (invalid connection option \"ssl%6Dode\"); the connector accepts it, reading {host=\"h\" ssl%6Dode=\"verify-full\"}",
	"x-end-qmark-db":                  ": libpq none, connector \"\"; dbname: libpq \"db\", connector none",
	"x-end-amp":                       ": libpq none, connector \"\"; dbname: libpq \"db\", connector none",
	"x-qmark-qmark":                   "libpq refuses it (invalid URI query parameter: \"?sslmode\"); the connector accepts it, reading {?sslmode=\"disable\" host=\"h\"}",
	"x-qmark-in-value":                "dbname: libpq \"db\", connector none",
	"x-hash-in-query":                 "dbname: libpq \"db\", connector none",
	"x-spaces-query":                  " sslmode : libpq none, connector \" disable \"; dbname: libpq \"db\", connector none; sslmode: libpq \"disable\", connector none",
	"x-empty-password":                "dbname: libpq \"db\", connector none; user: libpq \"u\", connector none",
	"x-empty-user":                    "dbname: libpq \"db\", connector none; password: libpq \"pw\", connector none",
	"x-empty-port":                    "dbname: libpq \"db\", connector none; port: libpq none, connector \"\"",
	"x-empty-query-value":             "dbname: libpq \"db\", connector none",
	"x-empty-query-key":               "libpq refuses it (invalid URI query parameter: \"\"); the connector accepts it, reading {=\"x\" host=\"h\"}",
	"x-hosts-ports":                   "dbname: libpq \"db\", connector none",
	"x-hosts-one-port":                "dbname: libpq \"db\", connector none",
	"x-hosts-no-port":                 "dbname: libpq \"db\", connector none; port: libpq \",\", connector none",
	"x-hosts-ipv6":                    "dbname: libpq \"db\", connector none; host: libpq \"::1,h2\", connector \"[::1],h2\"",
	"x-hosts-empty-entry":             "dbname: libpq \"db\", connector none; host: libpq \"h1,,h3\", connector \"h1,h3\"; port: libpq \",,\", connector none",
	"x-host-and-query-host":           "dbname: libpq \"db\", connector none",
	"x-twice-last-wins":               "dbname: libpq \"db\", connector none",
	"x-unknown-url":                   "libpq refuses it (invalid URI query parameter: \"sslmdoe\"); the connector accepts it, reading {host=\"h\" sslmdoe=\"verify-full\"}",
	"x-unknown-url-requireauth":       "libpq refuses it (invalid URI query parameter: \"requireauth\"); the connector accepts it, reading {host=\"h\" requireauth=\"scram-sha-256\"}",
	"x-unknown-kv":                    "libpq refuses it (invalid connection option \"sslmdoe\"); the connector accepts it, reading {host=\"h\" sslmdoe=\"verify-full\"}",
	"x-database-url":                  "libpq refuses it (invalid URI query parameter: \"database\"); the connector accepts it, reading {dbname=\"x\" host=\"h\"}",
	"x-database-kv":                   "libpq refuses it (invalid connection option \"database\"); the connector accepts it, reading {dbname=\"x\" host=\"h\"}",
	"x-server-param-url":              "libpq refuses it (invalid URI query parameter: \"search_path\"); the connector accepts it, reading {host=\"h\" search_path=\"s\"}",
	"x-server-param-kv":               "libpq refuses it (invalid connection option \"search_path\"); the connector accepts it, reading {host=\"h\" search_path=\"s\"}",
}
