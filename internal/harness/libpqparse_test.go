package harness

import (
	"context"
	"errors"
	"maps"
	"os"
	"slices"
	"testing"
)

// LibpqConninfoParse gives libpq 18's reading and its refusals, and builds its program once in
// the process's directory.
func TestLibpqConninfoParse(t *testing.T) {
	ctx := context.Background()
	got, err := LibpqConninfoParse(ctx, `host=a port=5 password='x y\'z' port=6`)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"host": "a", "port": "6", "password": "x y'z"}
	if !maps.Equal(got, want) {
		t.Errorf("keyword/value: got %q, want %q", got, want)
	}
	got, err = LibpqConninfoParse(ctx, "postgresql://u@h/d?sslmode=require&dbname=e")
	if err != nil {
		t.Fatal(err)
	}
	want = map[string]string{"user": "u", "host": "h", "dbname": "e", "sslmode": "require"}
	if !maps.Equal(got, want) {
		t.Errorf("URI: got %q, want %q", got, want)
	}
	prog := libpqParseProg
	for dsn, msg := range map[string]string{
		"sslmdoe=verify-full":  `invalid connection option "sslmdoe"`,
		"postgresql://h?uzer=": `invalid URI query parameter: "uzer"`,
		"host='unclosed":       `unterminated quoted string in connection info string`,
		"postgresql://h?k=a=b": `extra key/value separator "=" in URI query parameter: "k"`,
		"postgresql://h/%zz":   `invalid percent-encoded token: "%zz"`,
		"postgresql://h/a%00b": `forbidden value %00 in percent-encoded value: "a%00b"`,
		"postgresql://[::1":    `end of string reached when looking for matching "]" in IPv6 host address in URI: "postgresql://[::1"`,
		"postgresql://h?host":  `missing key/value separator "=" in URI query parameter: "host"`,
		"host=a sslmode":       `missing "=" after "sslmode" in connection info string`,
	} {
		_, err := LibpqConninfoParse(ctx, dsn)
		var r *LibpqRefusal
		if !errors.As(err, &r) || r.Message != msg {
			t.Errorf("%s: %v; want libpq's %q", dsn, err, msg)
		}
	}
	if libpqParseProg != prog {
		t.Errorf("the program was built again: %s, then %s", prog, libpqParseProg)
	}
	if _, err := os.Stat(prog); err != nil {
		t.Fatal(err)
	}
}

// LibpqConninfoParseAll reads many strings, including values with line breaks and the empty
// string, in one run, each as LibpqConninfoParse reads it alone.
func TestLibpqConninfoParseAll(t *testing.T) {
	ctx := context.Background()
	in := []string{"", "host='a\nb'", "uzer=x", "postgresql://", "application_name='\x01\xff'", "postgresql://h?sslmode=disable&"}
	all, err := LibpqConninfoParseAll(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != len(in) {
		t.Fatalf("%d parses of %d strings", len(all), len(in))
	}
	for i, s := range in {
		keys, err := LibpqConninfoParse(ctx, s)
		var r *LibpqRefusal
		errors.As(err, &r)
		if err != nil && r == nil {
			t.Fatal(err)
		}
		if !maps.Equal(keys, all[i].Keys) || (r == nil) != (all[i].Refusal == nil) || r != nil && r.Message != all[i].Refusal.Message {
			t.Errorf("%q: alone %q, %v; among others %q, %v", s, keys, err, all[i].Keys, all[i].Refusal)
		}
	}
	if got := all[1].Keys["host"]; got != "a\nb" {
		t.Errorf("host='a\\nb': %q", got)
	}
	if all[2].Refusal == nil {
		t.Errorf("uzer=x: accepted")
	}
	if _, err := LibpqConninfoParseAll(ctx, []string{"host=a\x00b"}); err == nil {
		t.Errorf("a NUL byte: no error")
	}
}

// LibpqConnect gives libpq 18's refusal before connecting, and for a connection the keywords
// with their variables and values and the query's row.
func TestLibpqConnect(t *testing.T) {
	ctx := context.Background()
	_, err := LibpqConnect(ctx, nil, "host=127.0.0.1 port=1 sslmode=''", "")
	var r *LibpqRefusal
	if !errors.As(err, &r) || r.Message != `invalid sslmode value: ""` {
		t.Errorf("sslmode='': %v; want libpq's refusal", err)
	}
	srv := StartT(t, Options{Major: 18})
	c, err := LibpqConnect(ctx, []string{"PGAPPNAME=oracle"}, srv.DSN(), "select current_user, current_setting('application_name'), ''")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{srv.User, "oracle", ""}; !slices.Equal(c.Row, want) || c.SSL {
		t.Errorf("row %q, SSL %v; want %q without TLS", c.Row, c.SSL, want)
	}
	if !slices.Contains(c.Keywords, "sslnegotiation") || c.Env["sslmode"] != "PGSSLMODE" || c.Options["application_name"] != "oracle" {
		t.Errorf("keywords %q, variables %q, values %q", c.Keywords, c.Env, c.Options)
	}
	if _, ok := c.Options["sslkeylogfile"]; ok {
		t.Errorf("sslkeylogfile has a value: %q", c.Options["sslkeylogfile"])
	}
}
