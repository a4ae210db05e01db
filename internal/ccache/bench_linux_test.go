//go:build linux

package ccache

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/pgconnector/pgconnector/internal/harness"
	"golang.org/x/sys/unix"
)

// BenchmarkStamp measures Stamp of an unchanged cache of each type: what a connect pays to
// learn that the credentials are the ones it has.
func BenchmarkStamp(b *testing.B) {
	k := harness.StartKDCT(b, harness.KDCOptions{})
	if _, err := k.AddPrincipal("alice"); err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	file := filepath.Join(dir, "krb5cc")
	if err := k.Kinit(file, "alice", 0); err != nil {
		b.Fatal(err)
	}
	dirName := "DIR:" + filepath.Join(dir, "cc")
	if err := k.KinitName(dirName, "alice", 0); err != nil {
		b.Fatal(err)
	}
	bench := func(b *testing.B, c Cache) {
		want := mustStamp(b, c)
		if !want.Present {
			b.Fatalf("%s: not present", c.Name())
		}
		b.ReportAllocs()
		for b.Loop() {
			if s, err := c.Stamp(context.Background()); err != nil || s != want {
				b.Fatalf("Stamp: %+v, %v; want %+v", s, err, want)
			}
		}
	}
	b.Run("FILE", func(b *testing.B) { bench(b, mustResolve(b, "FILE:"+file)) })
	b.Run("DIR", func(b *testing.B) { bench(b, mustResolve(b, dirName)) })
	b.Run("KEYRING", func(b *testing.B) {
		// The FILE cache's records, written in cc_keyring.c's layout into this thread's
		// process keyring (see lockThread): no shared keyring is touched.
		lockThread()
		writeCache(b, unix.KEY_SPEC_PROCESS_KEYRING, "pgcbench", fileRecords(b, file))
		bench(b, mustResolve(b, "KEYRING:process:pgcbench"))
	})
}

// fileRecords splits a version 4 FILE cache into its principal and credential records.
func fileRecords(tb testing.TB, path string) cacheKeys {
	tb.Helper()
	img, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	if len(img) < 4 || img[0] != 5 || img[1] != 4 {
		tb.Fatalf("%s: not a version 4 cache", path)
	}
	p := 4 + int(binary.BigEndian.Uint16(img[2:]))
	n, err := principalLen(img[p:])
	if err != nil {
		tb.Fatal(err)
	}
	ck := cacheKeys{principal: img[p : p+n]}
	for p += n; p < len(img); {
		n, err := credentialLen(img[p:])
		if err != nil {
			tb.Fatal(err)
		}
		ck.creds = append(ck.creds, img[p:p+n])
		ck.types = append(ck.types, "user")
		p += n
	}
	return ck
}
