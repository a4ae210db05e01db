package keytabfile

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jcmturner/gokrb5/v8/keytab"
	"golang.org/x/sys/unix"

	"github.com/pgconnector/pgconnector/internal/harness"
)

// kdcKeytab has the harness KDC write a keytab of alice (two enctypes) and then bob with
// kadmin's ktadd, and returns its path and bytes.
func kdcKeytab(t *testing.T) (string, []byte) {
	t.Helper()
	k := harness.StartKDCT(t, harness.KDCOptions{})
	if _, err := k.AddPrincipalEnctypes("alice", "aes256-cts-hmac-sha1-96", "aes128-cts-hmac-sha1-96"); err != nil {
		t.Fatal(err)
	}
	if _, err := k.AddPrincipal("bob"); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "client.keytab")
	if err := k.Keytab(path, "alice", "bob"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, b
}

// gokrb5Entries returns the entries of principal comps@realm that gokrb5 reads from b.
func gokrb5Entries(t *testing.T, b []byte, comps []string, realm string) []string {
	t.Helper()
	var kt keytab.Keytab
	if err := kt.Unmarshal(b); err != nil {
		t.Fatal("gokrb5 does not read the keytab")
	}
	var out []string
	for _, e := range kt.Entries {
		if e.Principal.Realm == realm && slices.Equal(e.Principal.Components, comps) {
			out = append(out, fmt.Sprintf("%+v", e))
		}
	}
	return out
}

func entries(kt *keytab.Keytab) []string {
	var out []string
	for _, e := range kt.Entries {
		out = append(out, fmt.Sprintf("%+v", e))
	}
	return out
}

// A keytab that MIT's kadmin writes: Load keeps the entries of the principal asked for, or of
// the first entry's, exactly as gokrb5 reads them.
func TestLoadKDCKeytab(t *testing.T) {
	path, b := kdcKeytab(t)
	var realm string
	{
		kt, err := Load(path, "", "")
		if err != nil {
			t.Fatal(err)
		}
		if len(kt.Entries) != 2 {
			t.Fatalf("first principal: %d entries, want alice's 2", len(kt.Entries))
		}
		p := kt.Entries[0].Principal
		if !slices.Equal(p.Components, []string{"alice"}) {
			t.Fatalf("first principal: %v", p)
		}
		realm = p.Realm
		if os.Getenv("PGCONNECTOR_WRITE_FUZZ_SEEDS") != "" {
			writeSeed(t, "FuzzKeytab", "kadmin-ktadd", b, nil, nil)
			writeSeed(t, "FuzzKeytab", "kadmin-ktadd-bob", b, []byte("bob"), []byte(realm))
		}
		if want := gokrb5Entries(t, b, []string{"alice"}, realm); !slices.Equal(entries(kt), want) {
			t.Fatalf("alice's entries:\n%v\ngokrb5:\n%v", entries(kt), want)
		}
	}
	for _, user := range []string{"alice", "bob", "carol", "alice/x"} {
		kt, err := Load(path, user, realm)
		if err != nil {
			t.Fatalf("%s: %v", user, err)
		}
		want := gokrb5Entries(t, b, strings.Split(user, "/"), realm)
		if !slices.Equal(entries(kt), want) {
			t.Fatalf("%s: %v, gokrb5 %v", user, entries(kt), want)
		}
		if (user == "alice" || user == "bob") && len(want) == 0 {
			t.Fatalf("%s: no entries", user)
		}
	}
	if kt, err := Load(path, "alice", "OTHER.REALM"); err != nil || len(kt.Entries) != 0 {
		t.Fatalf("another realm: %v, %v", kt, err)
	}
}

// Files that are not keytabs or not regular files: refused at once with an *UnusableError
// that names the file and the problem and quotes none of its bytes.
func TestLoadRefuses(t *testing.T) {
	path, good := kdcKeytab(t)
	var kt keytab.Keytab
	if err := kt.Unmarshal(good); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // a reader blocked in open(2) goes on
		if fd, err := unix.Open(fifo, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0); err == nil {
			unix.Close(fd)
		}
	})
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	sparse := filepath.Join(dir, "sparse")
	if err := os.WriteFile(sparse, good, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(sparse, 1<<40); err != nil {
		t.Fatal(err)
	}
	claim := binary.BigEndian.AppendUint32(slices.Clone(good), 1000)
	short := slices.Clone(good)
	// The first entry (alice, version 2) ends just after its key's length.
	binary.BigEndian.PutUint32(short[2:], uint32(2+2+len(kt.Entries[0].Principal.Realm)+2+len("alice")+4+4+1+2+2))
	cases := []struct {
		name, path, want string
	}{
		{"FIFO", fifo, "a named pipe (FIFO), not a regular file"},
		{"character device", "/dev/zero", "a character device, not a regular file"},
		{"directory", dir, "a directory, not a regular file"},
		{"sparse file of 1 TiB", sparse, "over the limit of 16 MiB for a keytab"},
		{"credential cache", write("ccache", harness.HugeAddressCountCCache()), "not a keytab"},
		{"entry longer than the file", write("claim", claim), "claims 1000 bytes, 0 are left"},
		{"entry shorter than its key", write("short", short), "key of 32 bytes, 0 left"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() { _, err := Load(c.path, "", ""); done <- err }()
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Load did not return")
			}
			var ue *UnusableError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), c.path) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%v, want an *UnusableError naming %s and saying %q", err, c.path, c.want)
			}
			for _, e := range kt.Entries {
				if strings.Contains(err.Error(), string(e.Key.KeyValue[:8])) {
					t.Fatalf("%q quotes a key", err)
				}
			}
			checkMessage(t, err)
		})
	}
	if _, err := Load(filepath.Join(dir, "none"), "", ""); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a missing file: %v", err)
	}
	if _, err := Load(path, "", ""); err != nil {
		t.Fatal(err)
	}
}

// checkMessage fails t if err's message holds anything but printable ASCII: it is made of
// fixed words and numbers, never of the file's bytes.
func checkMessage(t *testing.T, err error) {
	t.Helper()
	for _, r := range err.Error() {
		if r < 0x20 || r > 0x7e {
			t.Fatalf("error %q holds a byte of the input", err)
		}
	}
}

// allocatedBy returns the bytes allocated while f runs (runtime.MemStats.TotalAlloc), the
// least of three runs so that another goroutine's allocations at the same moment do not count.
func allocatedBy(f func()) uint64 {
	least := ^uint64(0)
	var ms runtime.MemStats
	for range 3 {
		runtime.ReadMemStats(&ms)
		before := ms.TotalAlloc
		f()
		runtime.ReadMemStats(&ms)
		least = min(least, ms.TotalAlloc-before)
	}
	return least
}

// writeSeed writes args as a seed of the fuzz target name, in go test's corpus format.
func writeSeed(t *testing.T, name, file string, args ...[]byte) {
	t.Helper()
	dir := filepath.Join("testdata", "fuzz", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b := []byte("go test fuzz v1\n")
	for _, a := range args {
		b = fmt.Appendf(b, "[]byte(%q)\n", a)
	}
	if err := os.WriteFile(filepath.Join(dir, file), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// manyComponents is a version 2 keytab of n bytes or more: entries of one principal with
// count one-byte components (at most 32767, the 16-bit count), the input that makes gokrb5
// allocate the most per byte.
func manyComponents(count, n int) []byte {
	e := []byte{byte(count >> 8), byte(count), 0, 1, 'R'}
	for range count {
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

// FuzzKeytab decodes keytab images, with the principal asked for (user, realm; user empty:
// the first entry's): never a panic, never more than AllocFactor*len+allocConst bytes
// allocated, an error of printable ASCII only, and what it accepts gokrb5 reads alike.
// Seeds: a keytab kadmin writes (TestLoadKDCKeytab writes it when
// PGCONNECTOR_WRITE_FUZZ_SEEDS is set; TestParseVersion1 its version 1 form with a hole),
// small version 1 and hole cases, and manyComponents.
func FuzzKeytab(f *testing.F) {
	f.Add(manyComponents(21000, 3), []byte(nil), []byte(nil))     // one entry, under MaxEntries
	f.Add(manyComponents(32767, 1<<20), []byte(nil), []byte(nil)) // over MaxEntries
	f.Add([]byte{5, 1, 0, 0, 0, 0}, []byte(nil), []byte(nil))
	f.Add([]byte{5, 2, 0xff, 0xff, 0xff, 0xfc, 1, 2, 3, 4, 0x80, 0, 0, 0}, []byte(nil), []byte(nil))
	f.Fuzz(func(t *testing.T, b, user, realm []byte) {
		var kt *keytab.Keytab
		var err error
		bound := uint64(AllocFactor*min(len(b), MaxEntries) + allocConst + 2*len(user) + 2*len(realm))
		if used := allocatedBy(func() { kt, err = Parse(b, string(user), string(realm)) }); used > bound {
			t.Fatalf("Parse of %d bytes allocated %d bytes, over %d", len(b), used, bound)
		}
		if err != nil {
			checkMessage(t, err)
			return
		}
		var ref keytab.Keytab
		if ref.Unmarshal(b) != nil {
			return // gokrb5 refuses what MIT would read (a keytab of holes only, say)
		}
		// The principal asked for, as components: user split at "/", or, when user is "",
		// the first entry's own (a component of its may hold a "/" that splitting would cut).
		var comps []string
		if len(user) > 0 {
			comps = strings.Split(string(user), "/")
		} else if len(ref.Entries) > 0 {
			comps, realm = ref.Entries[0].Principal.Components, []byte(ref.Entries[0].Principal.Realm)
		}
		var want []string
		for _, e := range ref.Entries {
			if e.Principal.Realm == string(realm) && slices.Equal(e.Principal.Components, comps) {
				want = append(want, fmt.Sprintf("%+v", e))
			}
		}
		if got := entries(kt); !slices.Equal(got, want) {
			t.Fatalf("decoded %v, gokrb5 %v", got, want)
		}
	})
}

// toVersion1 re-encodes the entries of kt in version 1 of the format: integers in the host's
// byte order, the realm counted among the components, no name type.
func toVersion1(kt *keytab.Keytab) []byte {
	o := binary.NativeEndian
	img := []byte{5, 1}
	for _, e := range kt.Entries {
		r := o.AppendUint16(nil, uint16(len(e.Principal.Components)+1))
		r = o.AppendUint16(r, uint16(len(e.Principal.Realm)))
		r = append(r, e.Principal.Realm...)
		for _, c := range e.Principal.Components {
			r = o.AppendUint16(r, uint16(len(c)))
			r = append(r, c...)
		}
		r = o.AppendUint32(r, uint32(e.Timestamp.Unix()))
		r = append(r, e.KVNO8)
		r = o.AppendUint16(r, uint16(e.Key.KeyType))
		r = o.AppendUint16(r, uint16(len(e.Key.KeyValue)))
		r = append(r, e.Key.KeyValue...)
		r = o.AppendUint32(r, e.KVNO)
		img = o.AppendUint32(img, uint32(len(r)))
		img = append(img, r...)
	}
	return img
}

// Version 1 (05 01, the host's byte order), with a hole between entries: kadmin's entries
// re-encoded read as gokrb5 reads them.
func TestParseVersion1(t *testing.T) {
	_, b := kdcKeytab(t)
	var kt keytab.Keytab
	if err := kt.Unmarshal(b); err != nil {
		t.Fatal(err)
	}
	v1 := toVersion1(&kt)
	// A hole of 8 bytes after the header: length -8, then 8 bytes skipped.
	holed := binary.NativeEndian.AppendUint32([]byte{5, 1}, uint32(0xfffffff8))
	holed = append(append(holed, make([]byte, 8)...), v1[2:]...)
	if os.Getenv("PGCONNECTOR_WRITE_FUZZ_SEEDS") != "" {
		writeSeed(t, "FuzzKeytab", "kadmin-ktadd-v1-hole", holed, nil, nil)
	}
	for _, img := range [][]byte{v1, holed} {
		got, err := Parse(img, "", "")
		if err != nil {
			t.Fatal(err)
		}
		realm := kt.Entries[0].Principal.Realm
		if want := gokrb5Entries(t, img, []string{"alice"}, realm); len(want) != 2 || !slices.Equal(entries(got), want) {
			t.Fatalf("version 1: %v, gokrb5 %v", entries(got), want)
		}
		bob, err := Parse(img, "bob", realm)
		if want := gokrb5Entries(t, img, []string{"bob"}, realm); err != nil || len(want) == 0 || !slices.Equal(entries(bob), want) {
			t.Fatalf("version 1, bob: %v, %v; gokrb5 %v", entries(bob), err, want)
		}
	}
}
