package ccache

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pgconnector/pgconnector/internal/harness"
)

func TestDIR(t *testing.T) {
	k := harness.StartKDCT(t, harness.KDCOptions{})
	for _, p := range []string{"alice", "bob"} {
		if _, err := k.AddPrincipal(p); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(t.TempDir(), "cc")
	name := "DIR:" + dir
	c := mustResolve(t, name)
	if c.Name() != name {
		t.Fatalf("Name %q, want %q", c.Name(), name)
	}
	checkGone(t, c) // no directory yet

	if err := k.KinitName(name, "alice", 0); err != nil {
		t.Fatal(err)
	}
	checkMatchesKlist(t, k, c, name, "alice")
	s1 := stampChanged(t, c, Stamp{}, "the first kinit")

	if err := k.KinitName(name, "alice", 0); err != nil {
		t.Fatal(err)
	}
	s2 := stampChanged(t, c, s1, "kinit of the same principal")

	// A second principal: kinit makes a new tkt file and the primary names it.
	if err := k.KinitName(name, "bob", 0); err != nil {
		t.Fatal(err)
	}
	checkMatchesKlist(t, k, c, name, "bob")
	s3 := stampChanged(t, c, s2, "kinit of another principal")

	if err := k.Kswitch(name, "alice"); err != nil {
		t.Fatal(err)
	}
	checkMatchesKlist(t, k, c, name, "alice")
	s4 := stampChanged(t, c, s3, "kswitch")
	if s4 == s2 {
		t.Fatal("Stamp after kswitch back equals the one before the switch away")
	}

	// The subsidiary form names one file of the collection.
	primary, err := os.ReadFile(filepath.Join(dir, "primary"))
	if err != nil {
		t.Fatal(err)
	}
	sub := "DIR::" + filepath.Join(dir, strings.TrimSuffix(string(primary), "\n"))
	cs := mustResolve(t, sub)
	checkMatchesKlist(t, k, cs, sub, "alice")
	ss := mustStamp(t, cs)
	if err := k.Kswitch(name, "bob"); err != nil {
		t.Fatal(err)
	}
	if s := mustStamp(t, cs); s != ss {
		t.Fatalf("Stamp of %s changed after kswitch to another cache", sub)
	}
	checkMatchesKlist(t, k, cs, sub, "alice")
	s5 := stampChanged(t, c, s4, "kswitch to bob")

	if err := k.Kdestroy(name, false); err != nil { // bob's cache, the primary
		t.Fatal(err)
	}
	if s := mustStamp(t, c); s == s5 {
		t.Fatal("Stamp unchanged after kdestroy")
	}
	checkGone(t, c)
	checkMatchesKlist(t, k, cs, sub, "alice") // the other cache stays
	if err := k.Kdestroy(name, true); err != nil {
		t.Fatal(err)
	}
	checkGone(t, cs)
}

func TestDIRNames(t *testing.T) {
	for _, bad := range []string{"DIR:", "DIR::tkt", "DIR::/x/notkt", "DIR::/x/"} {
		if _, err := Resolve(bad, Options{}); err == nil {
			t.Errorf("Resolve(%q) = nil error", bad)
		}
	}
	if c := mustResolve(t, "dir::/x/tktA"); c.Name() != "DIR::/x/tktA" {
		t.Errorf("Name %q", c.Name())
	}
}

func TestDIRPrimaryFile(t *testing.T) {
	for _, tc := range []struct {
		content string
		want    string // empty: an error
	}{
		{"tkt\n", "tkt"},
		{"tktABC\nextra", "tktABC"},
		{"tkt" + strings.Repeat("x", 59) + "\n", "tkt" + strings.Repeat("x", 59)},
		{"tkt" + strings.Repeat("x", 60) + "\n", ""}, // 64 bytes with the newline
		{"tkt", ""},
		{"", ""},
		{"krb5cc\n", ""},
		{"tkt/../x\n", ""},
		{`tkt\x` + "\n", ""},
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "primary"), []byte(tc.content), 0o600); err != nil {
			t.Fatal(err)
		}
		c := mustResolve(t, "DIR:"+dir)
		_, err := c.Stamp(context.Background())
		_, lerr := c.Load(context.Background())
		switch {
		case tc.want == "" && (err == nil || lerr == nil):
			t.Errorf("primary %q: Stamp error %v, Load error %v, want errors", tc.content, err, lerr)
		case tc.want != "" && err != nil:
			t.Errorf("primary %q: Stamp: %v", tc.content, err)
		case tc.want != "":
			if p := c.(*dirCache).primary.Load(); p == nil || p.file != tc.want {
				t.Errorf("primary %q: resolved %+v, want %q", tc.content, p, tc.want)
			}
		}
	}
}
