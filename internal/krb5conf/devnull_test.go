package krb5conf

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// /dev/null, listed in KRB5_CONFIG (alone, before or after a file) or named by include, reads
// as an empty file, as MIT reads it (fopen and fgets: end of file at once): the usual way to
// say "no krb5.conf" must not fail the load. A symbolic link to it is the same device. Every
// other device stays refused (TestNotRegularNotOpened: /dev/zero), and so does includedir of
// /dev/null, which is not a directory (MIT: PROF_FAIL_INCLUDE_DIR).
func TestDevNullReadsEmpty(t *testing.T) {
	if _, err := os.Stat(os.DevNull); err != nil {
		t.Fatalf("this test needs %s: %v", os.DevNull, err)
	}
	dir := t.TempDir()
	write(t, dir, map[string]string{
		"krb5.conf":   "[libdefaults]\n default_realm = R\n",
		"inc.conf":    "[libdefaults]\n a = 1\ninclude /dev/null\n b = 2\n",
		"incdir.conf": "[libdefaults]\n a = 1\nincludedir /dev/null\n",
	})
	link := filepath.Join(dir, "null-link")
	if err := os.Symlink(os.DevNull, link); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "krb5.conf")
	for _, c := range []struct {
		name      string
		paths     string
		realm     string // default_realm wanted; "" means unset
		b         string // [libdefaults] b wanted
		wantFiles []string
		wantErr   error
	}{
		{name: "KRB5_CONFIG=/dev/null", paths: os.DevNull, wantFiles: []string{os.DevNull}},
		{name: "/dev/null first", paths: os.DevNull + ":" + conf, realm: "R", wantFiles: []string{os.DevNull, conf}},
		{name: "/dev/null last", paths: conf + ":" + os.DevNull, realm: "R", wantFiles: []string{conf, os.DevNull}},
		{name: "a link to /dev/null", paths: link + ":" + conf, realm: "R", wantFiles: []string{link, conf}},
		{name: "include /dev/null", paths: filepath.Join(dir, "inc.conf"), b: "2",
			wantFiles: []string{filepath.Join(dir, "inc.conf"), os.DevNull}},
		{name: "includedir /dev/null", paths: filepath.Join(dir, "incdir.conf"), wantErr: ErrIncludeDir},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			p, err := loadGuarded(t, ctx, 10*time.Second, SplitPaths(c.paths))
			if c.wantErr != nil {
				if !errors.Is(err, c.wantErr) || !strings.Contains(err.Error(), os.DevNull) {
					t.Fatalf("Load: %v, want %v naming %s", err, c.wantErr, os.DevNull)
				}
				return
			}
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if got := p.Files(); !slices.Equal(got, c.wantFiles) {
				t.Errorf("Files() = %q, want %q", got, c.wantFiles)
			}
			if got, _ := p.Value("libdefaults", "default_realm"); got != c.realm {
				t.Errorf("default_realm = %q, want %q", got, c.realm)
			}
			if got, _ := p.Value("libdefaults", "b"); got != c.b {
				t.Errorf("b = %q, want %q", got, c.b)
			}
		})
	}
}
