package ccache

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jcmturner/gokrb5/v8/credentials"
	"github.com/jcmturner/gokrb5/v8/test/testdata"

	"github.com/pgconnector/pgconnector/internal/harness"
)

// Fuzz targets of every parser of local input in this package: FILE images (FuzzFileCache),
// version 4 principal and credential records as KEYRING keys and KCM replies carry them
// (FuzzRecords), KEYRING and DIR primary names (FuzzPrimaryName), and KCM replies read from a
// daemon's socket (FuzzKCMReply). Seeds are under testdata/fuzz/<FuzzName>/: caches written by
// MIT's kinit (TestFileCacheVersions writes them when PGCONNECTOR_WRITE_FUZZ_SEEDS is set) and
// the inputs that once crashed a reader.

// allocatedBy returns the bytes allocated while f runs (runtime.MemStats.TotalAlloc), the
// least of three runs so that another goroutine's allocations at the same moment do not
// count: f's own are the same each run.
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

// allocBound is the most decoder may allocate for n bytes of input.
func allocBound(n int) uint64 { return uint64(decodeAllocFactor*n + decodeAllocConst) }

// writeSeed writes the arguments args as a seed of the fuzz target name, in go test's corpus
// format.
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

// FuzzFileCache decodes FILE images: never a panic, never more than allocBound(len) bytes
// allocated, and what it accepts, gokrb5's parser reads the same.
func FuzzFileCache(f *testing.F) {
	f.Add(harness.HugeAddressCountCCache())
	f.Add([]byte{5, 4, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0})
	gokrb5Cache, err := hex.DecodeString(testdata.CCACHE_TEST) // an MIT cache, gokrb5's test data
	if err != nil {
		f.Fatal(err)
	}
	if cc, err := parseFile(gokrb5Cache); err != nil {
		f.Fatalf("gokrb5's test cache: %v", err)
	} else if ref, ok := gokrb5Unmarshal(gokrb5Cache); !ok || !sameCCache(cc, ref) {
		f.Fatalf("gokrb5's test cache: decoded %+v, gokrb5 (ok %v) %+v", cc, ok, ref)
	}
	f.Add(gokrb5Cache)
	f.Fuzz(func(t *testing.T, b []byte) {
		var cc *credentials.CCache
		var err error
		if used := allocatedBy(func() { cc, err = parseFile(b) }); used > allocBound(len(b)) {
			t.Fatalf("parseFile of %d bytes allocated %d bytes, over %d", len(b), used, allocBound(len(b)))
		}
		if err != nil {
			if strings.Contains(err.Error(), "\x00") {
				t.Fatalf("error %q", err)
			}
			return
		}
		if ref, ok := gokrb5Unmarshal(b); ok && !sameCCache(cc, ref) {
			t.Fatalf("decoded %+v, gokrb5 %+v", cc, ref)
		}
	})
}

// splitCredList splits a GET_CRED_LIST result (u32 count, count x {u32 length, record});
// anything else is one record.
func splitCredList(b []byte) [][]byte {
	if len(b) >= 4 {
		n := binary.BigEndian.Uint32(b)
		var creds [][]byte
		p := 4
		for i := uint32(0); i < n && len(b)-p >= 4; i++ {
			l := binary.BigEndian.Uint32(b[p:])
			if uint64(l) > uint64(len(b)-p-4) {
				break
			}
			creds = append(creds, b[p+4:p+4+int(l)])
			p += 4 + int(l)
		}
		if p == len(b) && len(creds) == int(n) {
			return creds
		}
	}
	return [][]byte{b}
}

// FuzzRecords checks the version 4 record readers of KEYRING keys and KCM replies:
// principalLen, checkCredential and credentialLen agree on what a whole record is, and
// fromRecords never panics, allocates at most allocBound of its input, and reads what gokrb5
// reads from the same records in a FILE image.
func FuzzRecords(f *testing.F) {
	f.Add(fakeClient, credListResult(fakeCreds))
	huge := harness.HugeAddressCountCCache()
	f.Add(huge[16:48], huge[48:]) // principal; the credential claiming 2^31-1 addresses
	f.Fuzz(func(t *testing.T, principal, list []byte) {
		creds := splitCredList(list)
		for i, c := range creds {
			n, lerr := credentialLen(c)
			cerr := checkCredential(c)
			if (cerr == nil) != (lerr == nil && n == len(c)) {
				t.Fatalf("record %d: checkCredential %v, credentialLen %d of %d, %v", i, cerr, n, len(c), lerr)
			}
			if lerr == nil && (n <= 0 || n > len(c)) {
				t.Fatalf("record %d: credentialLen %d of %d", i, n, len(c))
			}
		}
		pn, perr := principalLen(principal)
		if perr == nil && (pn < 8 || pn > len(principal)) {
			t.Fatalf("principalLen %d of %d", pn, len(principal))
		}
		var cc *credentials.CCache
		var err error
		size := len(principal) + len(list)
		if used := allocatedBy(func() { cc, err = fromRecords(principal, creds) }); used > allocBound(size) {
			t.Fatalf("fromRecords of %d bytes allocated %d bytes, over %d", size, used, allocBound(size))
		}
		if err != nil {
			return
		}
		img := slices.Concat([]byte{5, 4, 0, 0}, principal[:pn], slices.Concat(creds...))
		ref, ok := gokrb5Unmarshal(img)
		if !ok || !sameCCache(cc, ref) {
			t.Fatalf("decoded %+v, gokrb5 (ok %v) %+v", cc, ok, ref)
		}
	})
}

// FuzzPrimaryName checks the readers of a collection's primary cache name: the KEYRING key
// krb_ccache:primary (parsePrimaryKey) and the DIR file primary (parsePrimaryFile).
func FuzzPrimaryName(f *testing.F) {
	f.Add([]byte("\x00\x00\x00\x01\x00\x00\x00\x03tkt"))
	f.Add([]byte("tktABC\nextra"))
	f.Add([]byte("\x00\x00\x00\x01\xff\xff\xff\xff"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if name, err := parsePrimaryKey(b); err == nil {
			if len(b) < 8 || binary.BigEndian.Uint32(b) != krccCollectionVer || !bytes.HasPrefix(b[8:], []byte(name)) ||
				uint32(len(name)) != binary.BigEndian.Uint32(b[4:]) {
				t.Fatalf("parsePrimaryKey(%q) = %q", b, name)
			}
		}
		if name, err := parsePrimaryFile(b); err == nil {
			if !strings.HasPrefix(name, "tkt") || strings.ContainsAny(name, "/\\\n") || len(name) > 62 || !bytes.HasPrefix(b, []byte(name+"\n")) {
				t.Fatalf("parsePrimaryFile(%q) = %q", b, name)
			}
		}
	})
}

// FuzzKCMReply answers a KCM Load from a daemon on a socket with principal as the
// GET_PRINCIPAL result and list as the GET_CRED_LIST result: an error that names the socket, or
// a cache, never a panic, never more allocated than allocBound of the replies plus what the
// exchanges cost. One fake daemon serves all the inputs of a fuzzing process.
func FuzzKCMReply(f *testing.F) {
	f.Add(fakeClient, credListResult(fakeCreds))
	huge := harness.HugeAddressCountCCache()
	f.Add(huge[16:48], credListResult([][]byte{huge[48:]}))
	type replies struct{ principal, list []byte }
	var cur atomic.Pointer[replies]
	kcm := startFakeKCM(f, func(op uint16, args []byte) []byte {
		r := cur.Load()
		switch op {
		case kcmOpGetDefaultCache:
			return kcmReply([]byte("7\x00"))
		case kcmOpGetPrincipal:
			return kcmReply(r.principal)
		case kcmOpGetCredList:
			return kcmReply(r.list)
		}
		return kcmStatus(codeFCCInternal, nil)
	})
	c, err := Resolve("KCM:", Options{KCMSocket: kcm.Socket})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { c.Close() })
	f.Fuzz(func(t *testing.T, principal, list []byte) {
		cur.Store(&replies{principal, list})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// The exchanges themselves (request and reply buffers) cost a few KiB; the replies
		// are copied twice (read, then kept) before they are decoded.
		size := len(principal) + len(list)
		bound := allocBound(size) + uint64(4*size) + 256<<10
		var err error
		if used := allocatedBy(func() { _, err = c.Load(ctx) }); used > bound {
			t.Fatalf("Load of replies of %d bytes allocated %d bytes, over %d", size, used, bound)
		}
		if err != nil && !strings.Contains(err.Error(), kcm.Socket) {
			t.Fatalf("Load: %v does not name the socket", err)
		}
	})
}
