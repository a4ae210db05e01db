//go:build linux

package ccache

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jcmturner/gokrb5/v8/credentials"
	"golang.org/x/sys/unix"

	"github.com/pgconnector/pgconnector/internal/harness"
)

// hangLimit is how long a Load may take before the test calls it hung: far above what reading
// a local file takes, far below the test's timeout.
const hangLimit = 20 * time.Second

// loadSoon runs Load of the cache named name and returns its error, or fails t if Load does
// not return within hangLimit (the reader blocked, as one that opens a FIFO does).
func loadSoon(t *testing.T, name string) (*credentials.CCache, error) {
	t.Helper()
	c := mustResolve(t, name)
	type result struct {
		cc  *credentials.CCache
		err error
	}
	done := make(chan result, 1)
	go func() {
		cc, err := c.Load(context.Background())
		done <- result{cc, err}
	}()
	select {
	case r := <-done:
		return r.cc, r.err
	case <-time.After(hangLimit):
		t.Fatalf("Load %s did not return in %v", name, hangLimit)
		return nil, nil
	}
}

// mkfifo makes a FIFO at path. At the end of the test it opens and closes the FIFO's write
// end, so that a reader still blocked in open(2) on it goes on (and sees end of file).
func mkfifo(t *testing.T, path string) {
	t.Helper()
	if err := unix.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if fd, err := unix.Open(path, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0); err == nil {
			unix.Close(fd)
		}
	})
}

// A FILE cache that is not a regular file, is over MaxFileSize or is not in MIT's format is an
// *UnusableError at once that names the file and the problem: never a wait (a FIFO), never an
// allocation sized by a count the file claims (2^31-1 addresses), never the file's contents.
func TestFileCacheHostile(t *testing.T) {
	dir := t.TempDir()
	file := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	fifo := filepath.Join(dir, "fifo")
	mkfifo(t, fifo)
	link := filepath.Join(dir, "link-to-fifo")
	if err := os.Symlink(fifo, link); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, []byte{5, 4}, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, MaxFileSize+1); err != nil { // sparse: no disk used
		t.Fatal(err)
	}
	huge := harness.HugeAddressCountCCache()
	if len(huge) != 179 {
		t.Fatalf("HugeAddressCountCCache: %d bytes, want 179", len(huge))
	}
	for _, tc := range []struct {
		what, path, want string
	}{
		{"first credential claims 2^31-1 addresses", file("huge", huge), "malformed credential 0 at byte 48: 2147483647 addresses in 4 bytes"},
		{"FIFO", fifo, "a named pipe (FIFO), not a regular file"},
		{"symbolic link to a FIFO", link, "a named pipe (FIFO), not a regular file"},
		{"character device", "/dev/null", "a character device, not a regular file"},
		{"directory", dir, "a directory, not a regular file"},
		{"over 16 MiB", big, "over the limit of 16 MiB"},
		{"not a cache", file("text", []byte("hello\n")), "first byte 0x68, want 0x05"},
		{"format version 9", file("v9", []byte{5, 9, 0, 0}), "format version 9"},
		{"header longer than the file", file("hdr", []byte{5, 4, 0, 32, 0, 1}), "malformed header: cut short"},
		{"KDC offset of 4 bytes", file("off", []byte{5, 4, 0, 8, 0, 1, 0, 4, 0, 0, 0, 0}), "KDC time offset of 4 bytes"},
		{"principal cut short", file("princ", huge[:40]), "malformed default principal"},
		{"realm of 4 GiB", file("realm", []byte{5, 4, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff}), "malformed default principal: data of 4294967295 bytes"},
		{"2^31 components", file("comps", []byte{5, 4, 0, 0, 0, 0, 0, 1, 0x80, 0, 0, 0, 0, 0, 0, 0}), "2147483648 principal components"},
		{"credential cut short", file("cut", huge[:len(huge)-30]), "malformed credential 0 at byte 48: data of 16 bytes in 15"},
	} {
		t.Run(tc.what, func(t *testing.T) {
			_, err := loadSoon(t, "FILE:"+tc.path)
			var ue *UnusableError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.path) {
				t.Fatalf("Load: %v, want an *UnusableError naming %s with %q", err, tc.path, tc.want)
			}
			if strings.Contains(err.Error(), "alice") || strings.Contains(err.Error(), "EXAMPLE") {
				t.Fatalf("Load: %v shows the file's contents", err)
			}
			t.Log(err)
		})
	}

	// DIR: the primary file and the cache files get the same checks.
	t.Run("DIR primary file is a FIFO", func(t *testing.T) {
		d := filepath.Join(dir, "dir-primary")
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		mkfifo(t, filepath.Join(d, "primary"))
		_, err := loadSoon(t, "DIR:"+d)
		if err == nil || !strings.Contains(err.Error(), "named pipe (FIFO)") {
			t.Fatalf("Load: %v, want an error naming the FIFO", err)
		}
		if _, err := mustResolve(t, "DIR:"+d).Stamp(context.Background()); err == nil || !strings.Contains(err.Error(), "named pipe (FIFO)") {
			t.Fatalf("Stamp: %v, want an error naming the FIFO", err)
		}
	})
	t.Run("DIR cache file is a FIFO", func(t *testing.T) {
		d := filepath.Join(dir, "dir-tkt")
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		mkfifo(t, filepath.Join(d, "tkt"))
		for _, name := range []string{"DIR:" + d, "DIR::" + filepath.Join(d, "tkt")} {
			_, err := loadSoon(t, name)
			var ue *UnusableError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), "named pipe (FIFO)") {
				t.Fatalf("Load %s: %v, want an *UnusableError naming the FIFO", name, err)
			}
		}
	})
	t.Run("DIR cache file claims 2^31-1 addresses", func(t *testing.T) {
		d := filepath.Join(dir, "dir-huge")
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "tkt"), huge, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := loadSoon(t, "DIR:"+d)
		var ue *UnusableError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "2147483647 addresses") {
			t.Fatalf("Load: %v, want an *UnusableError naming the address count", err)
		}
	})
}

// kinitVersion runs MIT's kinit for principal into a FILE cache of format version v
// ([libdefaults] ccache_type), then kvno for postgres/localhost, so that the cache holds a
// ticket-granting ticket, a service ticket and kinit's configuration entries.
func kinitVersion(t *testing.T, k *harness.KDC, path string, v int, principal string) {
	t.Helper()
	conf := filepath.Join(t.TempDir(), "ccache_type.conf")
	if err := os.WriteFile(conf, []byte("[libdefaults]\n\tccache_type = "+strconv.Itoa(v)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	kt := filepath.Join(t.TempDir(), "client.keytab")
	if err := k.Keytab(kt, k.Principal(principal)); err != nil {
		t.Fatal(err)
	}
	env := append(append(harness.CleanEnv(), k.Env(path)...), "KRB5_CONFIG="+conf+":"+k.Krb5Conf)
	for _, args := range [][]string{{"kinit", "-k", "-t", kt, k.Principal(principal)}, {"kvno", "postgres/localhost@" + k.Realm}} {
		prog, err := exec.LookPath(args[0])
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, prog, args[1:]...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("%s: %v: %s", args[0], err, out)
		}
	}
}

// sameCCache reports whether a and b hold the same version, principal and credentials (the
// v4 header, unexported in gokrb5, is not compared).
func sameCCache(a, b *credentials.CCache) bool {
	return a.Version == b.Version && reflect.DeepEqual(a.DefaultPrincipal, b.DefaultPrincipal) &&
		reflect.DeepEqual(a.Credentials, b.Credentials)
}

// gokrb5Unmarshal is gokrb5's own parse of b, for comparison; ok is false when it fails or
// panics. Only for input that parseFile accepted: gokrb5 sizes slices by the counts it reads.
func gokrb5Unmarshal(b []byte) (cc *credentials.CCache, ok bool) {
	defer func() {
		if recover() != nil {
			cc, ok = nil, false
		}
	}()
	cc = new(credentials.CCache)
	return cc, cc.Unmarshal(b) == nil
}

// Caches that MIT's kinit and kvno write in each FILE format version (1 and 2 in host byte
// order, 3 with the enctype twice, 4 with a header) decode to what gokrb5's own parser makes
// of them, with the tickets klist shows.
func TestFileCacheVersions(t *testing.T) {
	k := harness.StartKDCT(t, harness.KDCOptions{})
	if _, err := k.AddPrincipal("alice"); err != nil {
		t.Fatal(err)
	}
	if err := k.AddServicePrincipals("postgres", "localhost"); err != nil {
		t.Fatal(err)
	}
	for v := 1; v <= 4; v++ {
		t.Run("version "+strconv.Itoa(v), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "cc")
			kinitVersion(t, k, path, v, "alice")
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if len(b) < 2 || b[1] != byte(v) {
				t.Fatalf("kinit wrote format version %d, want %d", b[1], v)
			}
			cc, err := loadSoon(t, "FILE:"+path)
			if err != nil {
				t.Fatal(err)
			}
			ref, ok := gokrb5Unmarshal(b)
			if !ok {
				t.Fatal("gokrb5 cannot parse the cache")
			}
			if !sameCCache(cc, ref) {
				t.Fatalf("decoded %+v, gokrb5 %+v", cc, ref)
			}
			if len(cc.Credentials) < 2 {
				t.Fatalf("%d credentials, want the TGT and the service ticket at least", len(cc.Credentials))
			}
			checkCCacheMatchesKlist(t, k, cc, "FILE:"+path, "FILE:"+path, "alice")
			if os.Getenv("PGCONNECTOR_WRITE_FUZZ_SEEDS") != "" {
				writeSeeds(t, v, path, b)
			}
		})
	}
}

// writeSeeds writes the seeds of the fuzz targets from img, a version 4 cache that kinit
// wrote (named for its version v), and the inputs that once crashed a reader.
func writeSeeds(t *testing.T, v int, path string, img []byte) {
	t.Helper()
	name := "kinit-v" + strconv.Itoa(v)
	writeSeed(t, "FuzzFileCache", name, img)
	if v != 4 {
		return
	}
	ck := fileRecords(t, path)
	list := credListResult(ck.creds)
	writeSeed(t, "FuzzRecords", name, ck.principal, list)
	writeSeed(t, "FuzzKCMReply", name, ck.principal, list)
	huge := harness.HugeAddressCountCCache()
	writeSeed(t, "FuzzFileCache", "huge-address-count", huge)
	writeSeed(t, "FuzzRecords", "huge-address-count", huge[16:48], credListResult([][]byte{huge[48:]}))
	writeSeed(t, "FuzzKCMReply", "huge-address-count", huge[16:48], credListResult([][]byte{huge[48:]}))
}
