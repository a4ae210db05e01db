//go:build linux

package pgconnector_test

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
	"time"

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
// does not wait for a writer that never comes. (psql, like MIT's library, blocks in open(2) on
// it: nothing to compare with.)
func TestFIFOClientKeytab(t *testing.T) {
	lab := newKerberosLab(t)
	srv := lab.server(t, true, lab.gssHBA(), "hostnogssenc all all 127.0.0.1/32 trust")
	fifo := newFIFO(t)
	t.Setenv("KRB5CCNAME", "FILE:"+filepath.Join(t.TempDir(), "no-ccache"))
	t.Setenv("KRB5_CLIENT_KTNAME", fifo)
	t.Setenv("KRB5_CONFIG", lab.kdc.Krb5Conf)
	checkFIFONotWaitedOn(t, srv, fifo, "the client keytab", 20*time.Second)
}
