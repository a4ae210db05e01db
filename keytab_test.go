//go:build linux

package pgconnector_test

import (
	"context"
	"database/sql"
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pgconnector/pgconnector/internal/harness"
)

// A sparse file of 1 TiB, all zeros (a few blocks on disk), as the client keytab, with no
// credential cache: with the default DSN the connector connects without GSS, as psql does
// (MIT's library finds no keytab version in it); gssencmode=require fails saying the file is
// over the 16 MiB limit. The connector runs in a child process: gokrb5's keytab.Load sizes its
// buffer by the file's size and dies of a fatal out-of-memory error.
func TestHostileClientKeytabSparse(t *testing.T) {
	if harness.IsChildProcess(t) {
		hostileCacheChild(t)
		return
	}
	lab, srv, _ := hostileLab(t)
	dir := t.TempDir()
	kt := filepath.Join(dir, "sparse.keytab")
	if err := os.WriteFile(kt, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(kt, 1<<40); err != nil {
		t.Fatal(err)
	}
	checkHostile(t, srv, "FILE:"+filepath.Join(dir, "no-ccache"), kt, lab.kdc.Krb5Conf, "over the limit of 16 MiB for a keytab")
}

// A 1 MiB client keytab of entries of one principal with 32767 components each (the count is
// 16-bit), with no credential cache: gokrb5 would allocate about 60 bytes per byte of it. The
// connector refuses it (over 64 KiB of entries for one principal) and, with the default DSN,
// connects without GSS, as psql does (MIT's library gets no ticket for that principal);
// gssencmode=require fails saying why.
func TestHostileClientKeytabComponentCount(t *testing.T) {
	if harness.IsChildProcess(t) {
		hostileCacheChild(t)
		return
	}
	lab, srv, _ := hostileLab(t)
	dir := t.TempDir()
	kt := filepath.Join(dir, "components.keytab")
	if err := os.WriteFile(kt, manyComponentsKeytab(1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	checkHostile(t, srv, "FILE:"+filepath.Join(dir, "no-ccache"), kt, lab.kdc.Krb5Conf, "over 64 KiB")
}

// manyComponentsKeytab is a version 2 keytab of n bytes or more: entries of one principal in
// realm R with 32767 components "a" and a one-byte key.
func manyComponentsKeytab(n int) []byte {
	e := []byte{0x7f, 0xff, 0, 1, 'R'}
	for range 32767 {
		e = append(e, 0, 1, 'a')
	}
	e = append(e, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 18, 0, 1, 'k')
	img := []byte{5, 2}
	for len(img) < n {
		img = binary.BigEndian.AppendUint32(img, uint32(len(e)))
		img = append(img, e...)
	}
	return img
}

// A FIFO as the client keytab (KRB5_CLIENT_KTNAME), with no credential cache: the connect
// does not wait for a writer that never comes. With the default DSN two concurrent connects
// both succeed without GSS long before their deadline; gssencmode=require fails at once naming
// the FIFO. (psql, like MIT's library, blocks in open(2) on it: nothing to compare with.)
func TestFIFOClientKeytab(t *testing.T) {
	lab := newKerberosLab(t)
	srv := lab.server(t, true, lab.gssHBA(), "hostnogssenc all all 127.0.0.1/32 trust")
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// Opening and closing the write end lets a reader blocked in open(2) go on.
	release := func() {
		if fd, err := unix.Open(fifo, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0); err == nil {
			unix.Close(fd)
		}
	}
	t.Cleanup(release)
	t.Setenv("KRB5CCNAME", "FILE:"+filepath.Join(dir, "no-ccache"))
	t.Setenv("KRB5_CLIENT_KTNAME", fifo)
	t.Setenv("KRB5_CONFIG", lab.kdc.Krb5Conf)
	const deadline = 20 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	db := sql.OpenDB(newConnector(t, aliceDSN(srv, "localhost", "connect_timeout=15")))
	defer db.Close()
	req := sql.OpenDB(newConnector(t, aliceDSN(srv, "localhost", "gssencmode=require", "connect_timeout=15")))
	defer req.Close()

	type result struct {
		what, transport string
		err             error
	}
	results := make(chan result, 3)
	for i := range 2 { // two connects of one connector at once: neither waits on the other
		go func() {
			var tr string
			err := db.QueryRowContext(ctx, transportQuery).Scan(&tr)
			results <- result{"connect " + strconv.Itoa(i+1), tr, err}
		}()
	}
	go func() { results <- result{what: "gssencmode=require", err: req.PingContext(ctx)} }()
	var got []result
	timeout := time.After(deadline + 5*time.Second)
	for len(got) < 3 {
		select {
		case r := <-results:
			got = append(got, r)
		case <-timeout:
			release() // let the blocked reads end before the connectors close
			t.Fatalf("after %v, %d of 3 connects returned: the client keytab FIFO blocked them", deadline+5*time.Second, len(got))
		}
	}
	if ctx.Err() != nil {
		t.Fatalf("the connects returned only at their deadline (%v)", deadline)
	}
	for _, r := range got {
		switch {
		case r.what == "gssencmode=require":
			if r.err == nil || !strings.Contains(r.err.Error(), "named pipe (FIFO)") || !strings.Contains(r.err.Error(), fifo) {
				t.Errorf("%s: %v, want an error naming the FIFO", r.what, r.err)
			} else {
				t.Logf("%s: %v", r.what, r.err)
			}
		case r.err != nil:
			t.Errorf("%s: %v", r.what, r.err)
		case r.transport == "gss":
			t.Errorf("%s: GSS-encrypted with a FIFO as the client keytab", r.what)
		}
	}
}
