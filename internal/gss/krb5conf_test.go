package gss

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pgconnector/pgconnector/internal/harness"
	"github.com/pgconnector/pgconnector/internal/krb5conf"
)

// mitKinit runs MIT's kinit with the krb5.conf list krb5Config, getting alice's ticket-granting
// ticket into ccache with her keytab. It returns kinit's output on failure.
func mitKinit(t *testing.T, r *realm, krb5Config, ccache string) (string, error) {
	t.Helper()
	kinit, err := exec.LookPath("kinit")
	if err != nil {
		t.Fatalf("MIT kinit: %v (scripts/install-deps.sh installs krb5-user)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, kinit, "-k", "-t", "FILE:"+r.keytab, r.kdc.Principal("alice"))
	cmd.Env = append(harness.CleanEnv(), "KRB5_CONFIG="+krb5Config, "KRB5CCNAME=FILE:"+ccache, "KRB5_CLIENT_KTNAME=")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// The realm's [realms] entry reached only through include or includedir, as MIT's kinit reads
// it: kinit must get a ticket-granting ticket with it, and the client must find the KDC through
// it for a service ticket, and read [libdefaults] values from included files, earlier ones first.
func TestKrb5ConfIncludesWithMIT(t *testing.T) {
	r := newRealm(t, harness.KDCOptions{})
	text, err := os.ReadFile(r.kdc.Krb5Conf)
	if err != nil {
		t.Fatal(err)
	}
	libdefaults, rest, ok := strings.Cut(string(text), "[realms]\n")
	if !ok {
		t.Fatalf("the harness's krb5.conf has no [realms]:\n%s", text)
	}
	domainRealm := rest[strings.Index(rest, "[domain_realm]"):]
	// The realm's block, left unclosed at the end of its file: each included file is parsed
	// on its own, and MIT does not require braces to be closed at the end.
	realmBlock := "[realms]\n    " + r.kdc.Realm + " = {\n        kdc = " + r.kdc.Addr() + "\n"

	cases := []struct {
		name  string
		files func(dir string) (krb5Config string)
	}{
		{"includedir", func(dir string) string {
			d := filepath.Join(dir, "krb5.conf.d")
			writeFile(t, filepath.Join(d, "realm.conf"), "text before the first section is ignored\n"+
				"[libdefaults]\n    kcm_socket = /run/second\n    default_ccache_name = FILE:/tmp/from-%{uid}\n"+realmBlock)
			writeFile(t, filepath.Join(d, "domains"), domainRealm)
			// Names includedir skips: an editor backup and a package leftover, both broken.
			writeFile(t, filepath.Join(d, "realm.conf~"), "[realms]\n}}}\n")
			writeFile(t, filepath.Join(d, "realm.conf.rpmsave"), "[realms]\n}}}\n")
			main := filepath.Join(dir, "krb5.conf")
			writeFile(t, main, libdefaults+"    kcm_socket = /run/first\nincludedir "+d+"\n")
			return main
		}},
		{"include, in a KRB5_CONFIG list", func(dir string) string {
			inc := filepath.Join(dir, "realm")
			writeFile(t, inc, "[libdefaults]\n    default_ccache_name = FILE:/tmp/from-%{uid}\n"+realmBlock)
			main := filepath.Join(dir, "krb5.conf")
			writeFile(t, main, libdefaults+"    kcm_socket = /run/first\ninclude "+inc+"\n"+domainRealm)
			second := filepath.Join(dir, "second.conf")
			writeFile(t, second, "[libdefaults]\n    kcm_socket = /run/second\n    default_realm = NOT.THIS\n")
			return filepath.Join(dir, "missing.conf") + ":" + main + ":" + second
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			krb5Config := c.files(dir)
			ccache := filepath.Join(dir, "cc")
			if out, err := mitKinit(t, r, krb5Config, ccache); err != nil {
				t.Fatalf("MIT kinit with %s: %v\n%s", krb5Config, err, out)
			}
			cl := validClient(t, ClientConfig{Krb5Conf: krb5Config, CCache: ccache})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			s, _, err := cl.ServiceTicket(ctx, "localhost")
			if err != nil {
				t.Fatalf("ServiceTicket: %v", err)
			}
			if !strings.Contains(s.(*session).String(), "postgres/localhost") {
				t.Errorf("session %v", s)
			}
			p, err := cl.Profile()
			if err != nil {
				t.Fatal(err)
			}
			if v, _ := p.KCMSocket(); v != "/run/first" {
				t.Errorf("kcm_socket = %q, want the first value, /run/first", v)
			}
			if v, _ := p.DefaultCCacheName(); v != "FILE:/tmp/from-%{uid}" {
				t.Errorf("default_ccache_name = %q, want it unexpanded from the included file", v)
			}
			if v, _ := p.LibDefault("default_realm"); v != r.kdc.Realm {
				t.Errorf("default_realm = %q", v)
			}
		})
	}
}

// A missing include file makes MIT's kinit fail, and the client too, with the file and line.
func TestKrb5ConfMissingIncludeWithMIT(t *testing.T) {
	r := newRealm(t, harness.KDCOptions{})
	text, err := os.ReadFile(r.kdc.Krb5Conf)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	missing := filepath.Join(dir, "gone.conf")
	conf := filepath.Join(dir, "krb5.conf")
	writeFile(t, conf, "include "+missing+"\n"+string(text))
	out, err := mitKinit(t, r, conf, filepath.Join(dir, "cc"))
	if err == nil {
		t.Fatalf("MIT kinit succeeded with a missing include:\n%s", out)
	}
	if !strings.Contains(out, "Included profile file could not be read") {
		t.Errorf("MIT kinit: %v\n%s", err, out)
	}
	cl := NewClient(ClientConfig{Krb5Conf: conf, CCache: r.ccache})
	creds, err := cl.Credentials(context.Background())
	if err == nil || creds.Valid {
		t.Fatalf("Credentials: %+v, %v", creds, err)
	}
	if !errors.Is(err, krb5conf.ErrIncludeFile) || !strings.Contains(err.Error(), conf+":1:") ||
		!strings.Contains(err.Error(), missing) {
		t.Errorf("Credentials: %v; want the include error naming %s:1 and %s", err, conf, missing)
	}
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A krb5.conf list that names a FIFO: the credentials check returns at once with an error
// naming it (MIT's fopen would wait for a writer for good), and so does the next call, which
// reads the list again; nothing is left holding the client's lock.
func TestKrb5ConfFIFO(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	// Opening the FIFO for writing (O_NONBLOCK: only if a reader waits) lets a reader stuck
	// on it go on.
	unblock := func() {
		if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			w.Close()
		}
	}
	t.Cleanup(unblock)
	conf := filepath.Join(dir, "krb5.conf")
	writeFile(t, conf, "[libdefaults]\n default_realm = EXAMPLE.COM\ninclude "+fifo+"\n")
	for _, krb5Conf := range []string{fifo, conf} {
		cl := NewClient(ClientConfig{Krb5Conf: krb5Conf, CCache: "FILE:" + filepath.Join(dir, "none")})
		for i := range 2 {
			done := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				_, err := cl.Credentials(ctx)
				if err == nil {
					_, err = cl.Profile()
				}
				done <- err
			}()
			select {
			case err := <-done:
				if !errors.Is(err, krb5conf.ErrNotRegular) || !strings.Contains(err.Error(), fifo) {
					t.Fatalf("Krb5Conf %s, check %d: %v, want %v naming %s", krb5Conf, i+1, err, krb5conf.ErrNotRegular, fifo)
				}
			case <-time.After(10 * time.Second):
				unblock()
				t.Fatalf("Krb5Conf %s, check %d had not returned after 10 s", krb5Conf, i+1)
			}
		}
		if _, err := cl.Profile(); !errors.Is(err, krb5conf.ErrNotRegular) {
			t.Fatalf("Profile: %v, want %v", err, krb5conf.ErrNotRegular)
		}
	}
}
