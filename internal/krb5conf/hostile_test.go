package krb5conf

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// loadGuarded runs LoadContext(ctx, paths) and waits for it at most wait: a load that does
// not return by then fails the test. fifos are opened for writing at that point (O_NONBLOCK:
// this succeeds only if a reader waits on them), so that a load blocked on one returns.
func loadGuarded(t *testing.T, ctx context.Context, wait time.Duration, paths []string, fifos ...string) (*Profile, error) {
	t.Helper()
	type result struct {
		p   *Profile
		err error
	}
	ch := make(chan result, 1)
	go func() {
		p, err := LoadContext(ctx, paths)
		ch <- result{p, err}
	}()
	select {
	case r := <-ch:
		return r.p, r.err
	case <-time.After(wait):
		for _, f := range fifos {
			if w, err := os.OpenFile(f, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				w.Close()
			}
		}
		// A load stuck elsewhere is left running: the test fails anyway.
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
		}
		t.Fatalf("Load of %q had not returned after %v", paths, wait)
		return nil, nil
	}
}

// A FIFO, named in KRB5_CONFIG, by include, or found by includedir, is refused without being
// opened (MIT's fopen would wait for a writer for good), and so are a socket and a device; the
// error names the file. The load is given a context of a minute and must return long before,
// without the context's error.
func TestNotRegularNotOpened(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	dfifo := filepath.Join(dir, "d", "x.conf")
	write(t, dir, map[string]string{
		"krb5.conf": "[libdefaults]\n default_realm = R\n",
		"d/":        "",
		"e/":        "",
		"e/a.conf":  "[s]\n x = 1\n",
	})
	for _, f := range []string{fifo, dfifo, filepath.Join(dir, "e", "fifo")} {
		if err := syscall.Mkfifo(f, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sock := filepath.Join(dir, "sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, c := range []struct {
		name    string
		paths   string // colon-separated, as KRB5_CONFIG
		include string // the krb5.conf line that includes it, if any
		names   string // what the error must name
		wantErr error
	}{
		{name: "KRB5_CONFIG names a FIFO", paths: fifo + ":" + dir + "/krb5.conf", names: fifo, wantErr: ErrNotRegular},
		{name: "include of a FIFO", include: "include " + fifo, names: fifo, wantErr: ErrNotRegular},
		{name: "includedir with a FIFO named x.conf", include: "includedir " + dir + "/d", names: dfifo, wantErr: ErrNotRegular},
		// A FIFO named "fifo" after a.conf, in a directory listed in KRB5_CONFIG.
		{name: "KRB5_CONFIG names a directory with a FIFO", paths: dir + "/e", names: dir + "/e/fifo", wantErr: ErrNotRegular},
		{name: "includedir of a FIFO", include: "includedir " + fifo, names: fifo, wantErr: ErrIncludeDir},
		{name: "include of a socket", include: "include " + sock, names: sock, wantErr: ErrNotRegular},
		{name: "include of a device", include: "include /dev/zero", names: "/dev/zero", wantErr: ErrNotRegular},
	} {
		t.Run(c.name, func(t *testing.T) {
			paths := c.paths
			if c.include != "" {
				main := filepath.Join(t.TempDir(), "krb5.conf")
				if err := os.WriteFile(main, []byte("[libdefaults]\n a = 1\n"+c.include+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				paths = main
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, err := loadGuarded(t, ctx, 10*time.Second, SplitPaths(paths), fifo, dfifo, dir+"/e/fifo")
			if !errors.Is(err, c.wantErr) || ctx.Err() != nil {
				t.Fatalf("Load: %v, want %v", err, c.wantErr)
			}
			if !strings.Contains(err.Error(), c.names) {
				t.Fatalf("error %q does not name %s", err, c.names)
			}
			t.Log(err)
		})
	}
}

// Four files per level, eleven levels, each file including the four of the next level: 4^11
// files to read through distinct include chains, none of them a loop and none deeper than
// MaxIncludeDepth. The load stops at MaxFiles files with an error that names the bound.
func TestIncludeFanOut(t *testing.T) {
	const levels, width = 11, 4
	dir := t.TempDir()
	m := map[string]string{}
	name := func(level, i int) string { return fmt.Sprintf("l%02d-%d", level, i) }
	for level := range levels {
		for i := range width {
			text := fmt.Sprintf("[s]\n x = %d.%d\n", level, i)
			if level+1 < levels {
				for j := range width {
					text += "include $DIR/" + name(level+1, j) + "\n"
				}
			}
			m[name(level, i)] = text
		}
	}
	m["krb5.conf"] = "include $DIR/" + name(0, 0) + "\n"
	write(t, dir, m)
	_, err := loadGuarded(t, context.Background(), 20*time.Second, []string{filepath.Join(dir, "krb5.conf")})
	if !errors.Is(err, ErrTooManyFiles) {
		t.Fatalf("Load: %v, want %v", err, ErrTooManyFiles)
	}
	if !strings.Contains(err.Error(), fmt.Sprint(MaxFiles)) || !strings.Contains(err.Error(), dir+"/l") {
		t.Fatalf("error %q names neither the bound %d nor the file", err, MaxFiles)
	}
	// MaxFiles files are fine: the main file and MaxFiles-1 files it includes (a chain would
	// pass MaxIncludeDepth).
	dir = t.TempDir()
	m = map[string]string{}
	var main strings.Builder
	for i := range MaxFiles - 1 {
		m[fmt.Sprint("f", i)] = fmt.Sprintf("[s]\n x = %d\n", i)
		fmt.Fprintf(&main, "include $DIR/f%d\n", i)
	}
	m["krb5.conf"] = main.String()
	write(t, dir, m)
	p, err := loadGuarded(t, context.Background(), 20*time.Second, []string{filepath.Join(dir, "krb5.conf")})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(p.Values("s", "x")); n != MaxFiles-1 || len(p.Files()) != MaxFiles {
		t.Fatalf("%d values from %d files, want %d from %d", n, len(p.Files()), MaxFiles-1, MaxFiles)
	}
}

// The bytes of all files together are bounded by MaxBytes; a file past it is refused before
// it is read, by its size, and the error names it.
func TestBytesBound(t *testing.T) {
	dir := t.TempDir()
	big := "[s]\n" + strings.Repeat("#"+strings.Repeat("c", 1022)+"\n", MaxBytes/1024/2-1)
	write(t, dir, map[string]string{"a": big, "b": big, "c": "[s]\n x = 1\n"})
	// a and b: each 1 KiB less than half of MaxBytes.
	p, err := loadGuarded(t, context.Background(), 20*time.Second, []string{dir + "/a", dir + "/c", dir + "/b"})
	if err != nil {
		t.Fatalf("a, c and b, %d bytes in all: %v", 2*len(big)+11, err)
	}
	if got := p.Values("s", "x"); len(got) != 1 {
		t.Fatalf("s/x = %q", got)
	}
	write(t, dir, map[string]string{"krb5.conf": "include $DIR/a\ninclude $DIR/c\ninclude $DIR/b\ninclude $DIR/a\n"})
	_, err = loadGuarded(t, context.Background(), 20*time.Second, []string{dir + "/krb5.conf"})
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), dir+"/a") || !strings.Contains(err.Error(), fmt.Sprint(MaxBytes)) {
		t.Fatalf("a included twice with b: %v, want %v naming %s/a", err, ErrTooLarge, dir)
	}
	write(t, dir, map[string]string{"huge": strings.Repeat("x", MaxBytes+1)})
	_, err = loadGuarded(t, context.Background(), 20*time.Second, []string{dir + "/huge"})
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), dir+"/huge") {
		t.Fatalf("a file of MaxBytes+1: %v, want %v", err, ErrTooLarge)
	}
}

// A directory read by includedir, or listed, may hold at most MaxDirEntries names, counting
// those includedir skips.
func TestDirEntriesBound(t *testing.T) {
	dir := t.TempDir()
	for i := range MaxDirEntries + 1 {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprint(i, "~")), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, err := loadGuarded(t, context.Background(), 20*time.Second, []string{dir})
	if !errors.Is(err, ErrTooManyEntries) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("Load: %v, want %v naming %s", err, ErrTooManyEntries, dir)
	}
	if err := os.Remove(filepath.Join(dir, "0~")); err != nil {
		t.Fatal(err)
	}
	if _, err := loadGuarded(t, context.Background(), 20*time.Second, []string{dir}); err != nil {
		t.Fatalf("%d names: %v", MaxDirEntries, err)
	}
}

// LoadContext opens nothing once its context is done.
func TestLoadContextDone(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, map[string]string{"krb5.conf": "[s]\n x = 1\n"})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := LoadContext(ctx, []string{dir + "/krb5.conf"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("LoadContext: %v, want %v", err, context.Canceled)
	}
}

// A krb5.conf of 100,000 relations (largeConf) loads, with every value where MIT puts it, and
// converts for gokrb5. BenchmarkLoadLarge times it; here a load that takes more than a minute
// (it took 24 s when adding a relation scanned the section's list, as MIT's profile_add_node
// does) fails.
func TestLoadLarge(t *testing.T) {
	path := writeLarge(t)
	p, err := loadGuarded(t, context.Background(), time.Minute, []string{path})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(p.Sections("realms")); got != largeRealms {
		t.Errorf("%d realms, want %d", got, largeRealms)
	}
	kdcs := p.Values("realms", "R42", "kdc")
	if len(kdcs) != largeKDCs || kdcs[0] != "k0:130" || kdcs[largeKDCs-1] != fmt.Sprintf("k%d:130", largeKDCs-1) {
		t.Errorf("R42 has %d kdcs, %q first and %q last", len(kdcs), kdcs[0], kdcs[len(kdcs)-1])
	}
	names := p.Relations("domain_realm")
	if len(names) != largeDomains || names[0] != "h0" || names[1] != "h1" || names[2] != "h10" {
		t.Fatalf("%d domain_realm names, first %q, want %d sorted", len(names), names[:3], largeDomains)
	}
	// h7919 is the 2nd relation written (i = 1): realm R1.
	if r, _ := p.Value("domain_realm", "h7919"); r != "R1" {
		t.Errorf("h7919 -> %q, want R1", r)
	}
	done := make(chan error, 1)
	go func() {
		cfg, err := p.Gokrb5Config()
		if err == nil && (len(cfg.Realms) != largeRealms || len(cfg.DomainRealm) != largeDomains || len(cfg.Realms[0].KDC) != largeKDCs) {
			err = fmt.Errorf("gokrb5 config with %d realms, %d domains", len(cfg.Realms), len(cfg.DomainRealm))
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Gokrb5Config had not returned after a minute")
	}
}
