package ccache

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDIR runs MIT's kinit, kswitch and kdestroy on a DIR collection (checkCollection).
func TestDIR(t *testing.T) {
	k := collectionKDC(t)
	name := "DIR:" + filepath.Join(t.TempDir(), "cc")
	if c := mustResolve(t, name); c.Name() != name {
		t.Fatalf("Name %q, want %q", c.Name(), name)
	}
	checkCollection(t, k, name)
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
