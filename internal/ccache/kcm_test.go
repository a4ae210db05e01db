package ccache

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jcmturner/gokrb5/v8/credentials"
	"github.com/pgconnector/pgconnector/internal/harness"
)

// kcmLab is a KDC with principals alice and bob and the service postgres/localhost, and a
// Heimdal KCM daemon on a private socket.
type kcmLab struct {
	kdc *harness.KDC
	kcm *harness.KCM
}

func startKCMLab(t testing.TB) *kcmLab {
	t.Helper()
	k := harness.StartKDCT(t, harness.KDCOptions{})
	for _, p := range []string{"alice", "bob"} {
		if _, err := k.AddPrincipal(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := k.AddServicePrincipals("postgres", "localhost"); err != nil {
		t.Fatal(err)
	}
	return &kcmLab{kdc: k, kcm: harness.StartKCMT(t)}
}

func (l *kcmLab) kinit(t testing.TB, ccname, principal string) {
	t.Helper()
	if err := l.kcm.Kinit(l.kdc, ccname, principal, 0); err != nil {
		t.Fatal(err)
	}
}

func (l *kcmLab) run(t testing.TB, ccname, prog string, args ...string) string {
	t.Helper()
	out, err := l.kcm.Run(l.kdc, ccname, prog, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (l *kcmLab) resolve(t testing.TB, name string) Cache {
	t.Helper()
	c, err := Resolve(name, Options{KCMSocket: l.kcm.Socket})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// klistEntry is one ticket of klist's listing.
type klistEntry struct {
	server  string
	expires time.Time
}

var klistLineRE = regexp.MustCompile(`(?m)^(\S+ \S+)\s+(\S+ \S+)\s+(\S+)$`)

// parseKlist returns klist's default principal and tickets (klist leaves configuration
// entries out).
func parseKlist(t testing.TB, out string) (string, []klistEntry) {
	t.Helper()
	var principal string
	for _, line := range strings.Split(out, "\n") {
		if p, ok := strings.CutPrefix(line, "Default principal: "); ok {
			principal = p
		}
	}
	var entries []klistEntry
	for _, m := range klistLineRE.FindAllStringSubmatch(out, -1) {
		var exp time.Time
		var err error
		for _, layout := range []string{"01/02/06 15:04:05", "01/02/2006 15:04:05", "2006-01-02 15:04:05"} {
			if exp, err = time.ParseInLocation(layout, m[2], time.Local); err == nil {
				break
			}
		}
		if err != nil {
			t.Fatalf("klist expiry %q: %v\n%s", m[2], err, out)
		}
		entries = append(entries, klistEntry{server: m[3], expires: exp})
	}
	if principal == "" || len(entries) == 0 {
		t.Fatalf("klist output without principal or tickets:\n%s", out)
	}
	return principal, entries
}

// tickets returns what klist would list of cc: its credentials without configuration entries,
// as server principal and expiry.
func tickets(cc *credentials.CCache) []klistEntry {
	var out []klistEntry
	for _, c := range cc.Credentials {
		if c.Server.Realm == "X-CACHECONF:" {
			continue
		}
		out = append(out, klistEntry{
			server:  c.Server.PrincipalName.PrincipalNameString() + "@" + c.Server.Realm,
			expires: c.EndTime.Truncate(time.Second),
		})
	}
	return out
}

func principalOf(cc *credentials.CCache) string {
	return cc.DefaultPrincipal.PrincipalName.PrincipalNameString() + "@" + cc.DefaultPrincipal.Realm
}

// checkLikeKlist loads c and compares it with klist's listing of ccname.
func (l *kcmLab) checkLikeKlist(t *testing.T, c Cache, ccname string) *credentials.CCache {
	t.Helper()
	cc, err := c.Load(context.Background())
	if err != nil {
		t.Fatalf("Load of %s: %v", c.Name(), err)
	}
	wantPrincipal, want := parseKlist(t, l.run(t, ccname, "klist"))
	if got := principalOf(cc); got != wantPrincipal {
		t.Errorf("Load of %s: principal %s, klist says %s", c.Name(), got, wantPrincipal)
	}
	got := tickets(cc)
	cmp := func(a, b klistEntry) int { return strings.Compare(a.server, b.server) }
	slices.SortFunc(got, cmp)
	slices.SortFunc(want, cmp)
	if len(got) != len(want) {
		t.Fatalf("Load of %s: tickets %v, klist shows %v", c.Name(), got, want)
	}
	for i := range got {
		if got[i].server != want[i].server || !got[i].expires.Equal(want[i].expires) {
			t.Errorf("Load of %s: ticket %v, klist shows %v", c.Name(), got[i], want[i])
		}
	}
	for _, cr := range cc.Credentials {
		if cr.Server.Realm != "X-CACHECONF:" && (len(cr.Ticket) == 0 || len(cr.Key.KeyValue) == 0) {
			t.Errorf("Load of %s: ticket for %s without ticket or key", c.Name(), cr.Server.PrincipalName.PrincipalNameString())
		}
	}
	return cc
}

// The default cache of a real KCM daemon, written by MIT's kinit, kvno, kdestroy and kswitch:
// Load gives what klist shows, Stamp follows every change and nothing else.
func TestKCMRealDaemon(t *testing.T) {
	l := startKCMLab(t)
	realm := l.kdc.Realm
	c := l.resolve(t, "KCM:")
	if c.Name() != "KCM:" {
		t.Errorf("Name = %q", c.Name())
	}

	empty := mustStamp(t, c)
	if empty.Present {
		t.Errorf("Stamp of an empty daemon: %+v, want Present false", empty)
	}
	if _, err := c.Load(context.Background()); !errors.Is(err, ErrNoCache) {
		t.Errorf("Load of an empty daemon: %v, want ErrNoCache", err)
	}

	l.kinit(t, "KCM:", "alice")
	cc := l.checkLikeKlist(t, c, "KCM:")
	if got := principalOf(cc); got != "alice@"+realm {
		t.Errorf("principal %s, want alice@%s", got, realm)
	}
	if !hasTicket(cc, "krbtgt/"+realm+"@"+realm) {
		t.Errorf("no krbtgt/%s in %v", realm, tickets(cc))
	}
	s1 := mustStamp(t, c)
	if !s1.Present {
		t.Fatalf("Stamp after kinit: %+v, want Present", s1)
	}
	for range 3 {
		if s := mustStamp(t, c); s != s1 {
			t.Fatalf("Stamp changed with nothing done: %+v then %+v", s1, s)
		}
	}
	if _, err := c.Load(context.Background()); err != nil { // reading changes nothing either
		t.Fatal(err)
	}
	if s := mustStamp(t, c); s != s1 {
		t.Fatalf("Stamp changed after a Load: %+v then %+v", s1, s)
	}

	// A service ticket added by kvno.
	l.run(t, "KCM:", "kvno", "postgres/localhost@"+realm)
	s2 := mustStamp(t, c)
	if s2 == s1 {
		t.Errorf("Stamp unchanged after kvno added a ticket: %+v", s2)
	}
	cc = l.checkLikeKlist(t, c, "KCM:")
	if !hasTicket(cc, "postgres/localhost@"+realm) {
		t.Errorf("no postgres/localhost ticket in %v", tickets(cc))
	}

	// kinit again, same principal: new credentials.
	time.Sleep(1100 * time.Millisecond) // so that the new tickets' times differ too
	l.kinit(t, "KCM:", "alice")
	s3 := mustStamp(t, c)
	if s3 == s2 || s3 == s1 || !s3.Present {
		t.Errorf("Stamp after a new kinit: %+v (before: %+v, %+v)", s3, s1, s2)
	}
	l.checkLikeKlist(t, c, "KCM:")

	// kinit of another principal into the same cache.
	l.kinit(t, "KCM:", "bob")
	s4 := mustStamp(t, c)
	if s4 == s3 {
		t.Errorf("Stamp unchanged after kinit bob: %+v", s4)
	}
	if cc := l.checkLikeKlist(t, c, "KCM:"); principalOf(cc) != "bob@"+realm {
		t.Errorf("principal after kinit bob: %s", principalOf(cc))
	}

	// kinit of another principal made a new cache in the collection and made it the default
	// (kinit.c, k5_cc_select); kdestroy destroys it and the first becomes the default again.
	l.run(t, "KCM:", "kdestroy")
	s5 := mustStamp(t, c)
	if !s5.Present || s5 == s4 || s5 != s3 {
		t.Errorf("Stamp after kdestroy of bob's cache: %+v, want alice's %+v", s5, s3)
	}
	if cc := l.checkLikeKlist(t, c, "KCM:"); principalOf(cc) != "alice@"+realm {
		t.Errorf("principal after kdestroy of bob's cache: %s", principalOf(cc))
	}

	l.run(t, "KCM:", "kdestroy", "-A")
	s5 = mustStamp(t, c)
	if s5.Present || s5 == s4 {
		t.Errorf("Stamp after kdestroy: %+v, want Present false", s5)
	}
	if _, err := c.Load(context.Background()); !errors.Is(err, ErrNoCache) {
		t.Errorf("Load after kdestroy: %v, want ErrNoCache", err)
	}
}

// KCM:name reads that cache, whichever is the default; kswitch moves KCM: and its stamp.
func TestKCMRealDaemonNamedCaches(t *testing.T) {
	l := startKCMLab(t)
	uid := os.Getuid()
	first := fmt.Sprintf("KCM:%d:first", uid) // Heimdal lets a uid make caches named after it
	second := fmt.Sprintf("KCM:%d:second", uid)

	missing := l.resolve(t, fmt.Sprintf("KCM:%d:missing", uid))
	if _, err := missing.Load(context.Background()); !errors.Is(err, ErrNoCache) {
		t.Errorf("Load of a cache that does not exist: %v, want ErrNoCache", err)
	}
	if s := mustStamp(t, missing); s.Present {
		t.Errorf("Stamp of a cache that does not exist: %+v", s)
	}

	l.kinit(t, first, "alice")
	l.kinit(t, second, "bob")
	c1, c2, def := l.resolve(t, first), l.resolve(t, second), l.resolve(t, "KCM:")
	if cc := l.checkLikeKlist(t, c1, first); principalOf(cc) != "alice@"+l.kdc.Realm {
		t.Errorf("%s: principal %s", first, principalOf(cc))
	}
	if cc := l.checkLikeKlist(t, c2, second); principalOf(cc) != "bob@"+l.kdc.Realm {
		t.Errorf("%s: principal %s", second, principalOf(cc))
	}

	l.run(t, "KCM:", "kswitch", "-c", first)
	before := mustStamp(t, def)
	cc, err := def.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if principalOf(cc) != "alice@"+l.kdc.Realm {
		t.Errorf("KCM: after kswitch to %s: principal %s", first, principalOf(cc))
	}
	s1 := mustStamp(t, c1)
	l.run(t, "KCM:", "kswitch", "-c", second)
	after := mustStamp(t, def)
	if after == before || !after.Present {
		t.Errorf("Stamp of KCM: unchanged by kswitch: %+v", after)
	}
	if s := mustStamp(t, c1); s != s1 {
		t.Errorf("Stamp of %s changed by kswitch: %+v then %+v", first, s1, s)
	}
	if cc := l.checkLikeKlist(t, def, "KCM:"); principalOf(cc) != "bob@"+l.kdc.Realm {
		t.Errorf("KCM: after kswitch to %s: principal %s", second, principalOf(cc))
	}

	// Destroying one cache leaves the other.
	l.run(t, second, "kdestroy")
	if _, err := c2.Load(context.Background()); !errors.Is(err, ErrNoCache) {
		t.Errorf("Load of %s after kdestroy: %v, want ErrNoCache", second, err)
	}
	if _, err := c1.Load(context.Background()); err != nil {
		t.Errorf("Load of %s after kdestroy of %s: %v", first, second, err)
	}
}

// hasTicket reports whether cc holds a ticket for server (name@realm).
func hasTicket(cc *credentials.CCache, server string) bool {
	return slices.ContainsFunc(tickets(cc), func(e klistEntry) bool { return e.server == server })
}

// No daemon at the socket (no file, or a file nobody listens on): Load wraps ErrNoCache and
// names the socket, Stamp is Present false.
func TestKCMNoDaemon(t *testing.T) {
	dir := t.TempDir()
	refused := filepath.Join(dir, "refused.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: refused, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	for _, sock := range []string{filepath.Join(dir, "none.sock"), refused, filepath.Join(dir, "file", "x.sock")} {
		c, err := Resolve("KCM:", Options{KCMSocket: sock})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Load(context.Background())
		if !errors.Is(err, ErrNoCache) || !strings.Contains(err.Error(), "no KCM daemon at "+sock) {
			t.Errorf("Load with %s: %v, want ErrNoCache naming the socket", sock, err)
		}
		if s, err := c.Stamp(context.Background()); err != nil || s.Present {
			t.Errorf("Stamp with %s: %+v, %v; want Present false, no error", sock, s, err)
		}
	}
}

func TestKCMDisabled(t *testing.T) {
	_, err := Resolve("KCM:", Options{KCMSocket: "-"})
	if err == nil || !strings.Contains(err.Error(), "KCM is disabled") {
		t.Errorf("Resolve with kcm_socket = -: %v", err)
	}
	if _, err := Resolve("KCM:a\x00b", Options{}); err == nil {
		t.Error("Resolve of a name with a NUL byte succeeded")
	}
	c, err := Resolve("kcm:x", Options{})
	if err != nil || c.Name() != "KCM:x" {
		t.Errorf("Resolve(kcm:x) = %v, %v", c, err)
	}
}

func BenchmarkKCMStamp(b *testing.B) {
	l := startKCMLab(b)
	l.kinit(b, "KCM:", "alice")
	l.run(b, "KCM:", "kvno", "postgres/localhost@"+l.kdc.Realm)
	for _, name := range []string{"KCM:", fmt.Sprintf("KCM:%d", os.Getuid())} {
		b.Run(strings.TrimSuffix(strings.ReplaceAll(name, ":", "-"), "-"), func(b *testing.B) {
			c := l.resolve(b, name)
			want := mustStamp(b, c)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if s, err := c.Stamp(context.Background()); err != nil || s != want {
					b.Fatalf("Stamp: %+v, %v", s, err)
				}
			}
		})
	}
	b.Run("parallel", func(b *testing.B) {
		c := l.resolve(b, "KCM:")
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := c.Stamp(context.Background()); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("Load", func(b *testing.B) {
		c := l.resolve(b, "KCM:")
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.Load(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// ---- a fake KCM daemon, for what a real one will not do on demand ----

// startFakeKCM starts a harness.FakeKCM whose handle answers each request at once with the
// raw bytes to write (nil: close the connection without an answer; ending with hangupMark:
// close it after the rest).
func startFakeKCM(t testing.TB, handle func(op uint16, args []byte) []byte) *harness.FakeKCM {
	t.Helper()
	return harness.FakeKCMT(t, func(op uint16, args []byte) ([]byte, time.Duration) { return handle(op, args), 0 })
}

// hangupMark, at the end of a reply, makes the fake close the connection after the rest.
var hangupMark = harness.KCMHangUp

// kcmReply is a reply with op status 0 and result.
func kcmReply(result []byte) []byte { return kcmStatus(0, result) }

func kcmStatus(status int32, result []byte) []byte { return harness.KCMReply(status, result) }

// kcmOuter is an sssd-style error: the outer code, no body.
func kcmOuter(code int32) []byte {
	b := binary.BigEndian.AppendUint32(nil, 0)
	return binary.BigEndian.AppendUint32(b, uint32(code))
}

// credRecord is a version 4 credential record with an aes256 key and a dummy ticket.
func credRecord(client, server []byte, end time.Time) []byte {
	b := slices.Concat(client, server)
	b = binary.BigEndian.AppendUint16(b, 18)
	b = harness.KCMData(b, make([]byte, 32))
	now := uint32(end.Add(-time.Hour).Unix())
	for _, t := range []uint32{now, now, uint32(end.Unix()), 0} {
		b = binary.BigEndian.AppendUint32(b, t)
	}
	b = append(b, 0)
	b = binary.BigEndian.AppendUint32(b, 0x40e00000)
	b = binary.BigEndian.AppendUint32(b, 0) // addresses
	b = binary.BigEndian.AppendUint32(b, 0) // authdata
	b = harness.KCMData(b, []byte("ticket"))
	return harness.KCMData(b, nil)
}

const fakeRealm = "FAKE.TEST"

var (
	fakeClient = harness.KCMPrincipal(fakeRealm, "carol")
	fakeEnd    = time.Unix(2000000000, 0)
	fakeCreds  = [][]byte{
		credRecord(fakeClient, harness.KCMPrincipal(fakeRealm, "krbtgt", fakeRealm), fakeEnd),
		credRecord(fakeClient, harness.KCMPrincipal(fakeRealm, "postgres", "db"), fakeEnd),
	}
	fakeUUIDs = slices.Concat(slices.Repeat([]byte{1}, 16), slices.Repeat([]byte{2}, 16), slices.Repeat([]byte{3}, 16))
)

func credListResult(creds [][]byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(creds)))
	for _, c := range creds {
		b = harness.KCMData(b, c)
	}
	return b
}

// fakeHandler answers like a daemon with one cache "7" holding fakeCreds. credList answers
// GET_CRED_LIST; nil means the daemon lacks it (answered by unsupported).
func fakeHandler(credList func() []byte, unsupported []byte) func(op uint16, args []byte) []byte {
	return func(op uint16, args []byte) []byte {
		switch op {
		case kcmOpGetDefaultCache:
			return kcmReply([]byte("7\x00"))
		case kcmOpGetPrincipal:
			return kcmReply(fakeClient)
		case kcmOpGetCredList:
			if credList == nil {
				return unsupported
			}
			return kcmReply(credList())
		case kcmOpGetCredUUIDList:
			return kcmReply(fakeUUIDs)
		case kcmOpGetCredByUUID:
			if len(args) < 16 {
				return kcmStatus(codeCCIO, nil)
			}
			switch args[len(args)-16] {
			case 1:
				return kcmReply(fakeCreds[0])
			case 2:
				return kcmStatus(codeCCEnd, nil) // removed since the list
			case 3:
				return kcmReply(fakeCreds[1])
			}
		}
		return kcmStatus(codeFCCInternal, nil)
	}
}

func resolveFake(t *testing.T, f *harness.FakeKCM, name string) Cache {
	t.Helper()
	c, err := Resolve(name, Options{KCMSocket: f.Socket})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func checkFakeCache(t *testing.T, cc *credentials.CCache) {
	t.Helper()
	if got := principalOf(cc); got != "carol@"+fakeRealm {
		t.Errorf("principal %s", got)
	}
	got := tickets(cc)
	want := []klistEntry{{"krbtgt/" + fakeRealm + "@" + fakeRealm, fakeEnd}, {"postgres/db@" + fakeRealm, fakeEnd}}
	if !slices.EqualFunc(got, want, func(a, b klistEntry) bool { return a.server == b.server && a.expires.Equal(b.expires) }) {
		t.Errorf("tickets %v, want %v", got, want)
	}
}

// GET_CRED_LIST (MIT's extension, in sssd) is used when the daemon has it: one request.
func TestKCMFakeCredList(t *testing.T) {
	f := startFakeKCM(t, fakeHandler(func() []byte { return credListResult(fakeCreds) }, nil))
	cc, err := resolveFake(t, f, "KCM:").Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	checkFakeCache(t, cc)
	ops, accepts := f.Ops(), f.Accepts()
	if want := []uint16{kcmOpGetDefaultCache, kcmOpGetPrincipal, kcmOpGetCredList}; !slices.Equal(ops, want) || accepts != 1 {
		t.Errorf("requests %v on %d connections, want %v on 1", ops, accepts, want)
	}
}

// A daemon without GET_CRED_LIST says so in its outer code (sssd 2.4+: KRB5_CC_NOSUPP or
// KRB5_CC_IO) or its op status (Heimdal: KRB5_FCC_INTERNAL): Load falls back to the UUIDs and
// skips a credential gone meanwhile (KRB5_CC_END).
func TestKCMFakeCredListUnsupported(t *testing.T) {
	for _, tt := range []struct {
		name string
		rep  []byte
	}{
		{"sssd outer CC_NOSUPP", kcmOuter(codeCCNoSupp)},
		{"sssd outer CC_IO", kcmOuter(codeCCIO)},
		{"sssd outer FCC_INTERNAL", kcmOuter(codeFCCInternal)},
		{"heimdal FCC_INTERNAL", kcmStatus(codeFCCInternal, nil)},
		{"CC_NOSUPP", kcmStatus(codeCCNoSupp, nil)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := startFakeKCM(t, fakeHandler(nil, tt.rep))
			cc, err := resolveFake(t, f, "KCM:7").Load(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			checkFakeCache(t, cc)
			ops, accepts := f.Ops(), f.Accepts()
			want := []uint16{kcmOpGetPrincipal, kcmOpGetCredList, kcmOpGetCredUUIDList,
				kcmOpGetCredByUUID, kcmOpGetCredByUUID, kcmOpGetCredByUUID}
			if !slices.Equal(ops, want) || accepts != 1 {
				t.Errorf("requests %v on %d connections, want %v on 1", ops, accepts, want)
			}
		})
	}
}

// The codes for a cache that does not exist, outer or inner, and an empty principal, give
// ErrNoCache from Load and Present false from Stamp; other codes are errors.
func TestKCMFakeNoCache(t *testing.T) {
	for _, tt := range []struct {
		name    string
		rep     []byte
		noCache bool
	}{
		{"CC_NOTFOUND", kcmStatus(codeCCNotFound, nil), true},
		{"FCC_NOFILE", kcmStatus(codeFCCNoFile, nil), true},
		{"CC_END", kcmStatus(codeCCEnd, nil), true},
		{"outer CC_NOTFOUND", kcmOuter(codeCCNotFound), true},
		{"outer FCC_NOFILE", kcmOuter(codeFCCNoFile), true},
		{"empty", kcmReply(nil), true},
		{"EACCES", kcmStatus(13, nil), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := startFakeKCM(t, func(op uint16, args []byte) []byte {
				if op == kcmOpGetPrincipal || op == kcmOpGetCredUUIDList && tt.name != "empty" {
					return tt.rep
				}
				return fakeHandler(nil, kcmStatus(codeFCCInternal, nil))(op, args)
			})
			c := resolveFake(t, f, "KCM:")
			_, err := c.Load(context.Background())
			if errors.Is(err, ErrNoCache) != tt.noCache || err == nil {
				t.Errorf("Load: %v, want ErrNoCache %v", err, tt.noCache)
			}
			if err != nil && !strings.Contains(err.Error(), "KCM:7") {
				t.Errorf("Load: %v, want the default cache's name KCM:7", err)
			}
			if tt.name == "empty" {
				return // an empty UUID list is a cache without credentials
			}
			s, err := c.Stamp(context.Background())
			if tt.noCache && (err != nil || s.Present) || !tt.noCache && err == nil {
				t.Errorf("Stamp: %+v, %v", s, err)
			}
		})
	}
}

// Replies that are cut short, too long, or malformed give errors, never a panic; the
// connection is dropped after a reply that leaves it out of step.
func TestKCMFakeMalformed(t *testing.T) {
	hugeCount := slices.Concat(fakeClient, harness.KCMPrincipal(fakeRealm, "x"))
	hugeCount = binary.BigEndian.AppendUint16(hugeCount, 18)
	hugeCount = harness.KCMData(hugeCount, nil)
	hugeCount = append(hugeCount, make([]byte, 21)...)
	hugeCount = binary.BigEndian.AppendUint32(hugeCount, 0x7fffffff) // addresses
	for _, tt := range []struct {
		name string
		op   uint16
		rep  []byte
		want string
	}{
		{"cut short", kcmOpGetPrincipal, slices.Concat(kcmReply(fakeClient)[:12], hangupMark), "cut short"},
		{"header cut short", kcmOpGetPrincipal, slices.Concat([]byte{0, 0}, hangupMark), "cut short"},
		{"over 10 MiB", kcmOpGetPrincipal, binary.BigEndian.AppendUint32([]byte{0, 0xa0, 0, 1}, 0), "over the limit"},
		{"no status", kcmOpGetPrincipal, []byte{0, 0, 0, 2, 0, 0, 0, 0, 1, 2}, "no status"},
		{"default name without NUL", kcmOpGetDefaultCache, kcmReply([]byte("7")), "NUL"},
		{"default name empty", kcmOpGetDefaultCache, kcmReply([]byte{0}), "NUL"},
		{"short principal", kcmOpGetPrincipal, kcmReply(fakeClient[:10]), "principal"},
		{"count over length", kcmOpGetCredList, kcmReply([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}), "credentials in"},
		{"entry over length", kcmOpGetCredList, kcmReply([]byte{0, 0, 0, 1, 0, 0, 1, 0, 1}), "cut short"},
		{"no count", kcmOpGetCredList, kcmReply([]byte{0, 0}), "no count"},
		{"credential cut", kcmOpGetCredList, kcmReply(credListResult([][]byte{fakeCreds[0][:40]})), "credential record"},
		{"credential with extra", kcmOpGetCredList, kcmReply(credListResult([][]byte{append(slices.Clone(fakeCreds[0]), 0)})), "after its end"},
		{"2^31 addresses", kcmOpGetCredList, kcmReply(credListResult([][]byte{hugeCount})), "entries in"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := fakeHandler(func() []byte { return credListResult(fakeCreds) }, nil)
			f := startFakeKCM(t, func(op uint16, args []byte) []byte {
				if op == tt.op {
					return tt.rep
				}
				return h(op, args)
			})
			c := resolveFake(t, f, "KCM:")
			_, err := c.Load(context.Background())
			if err == nil || errors.Is(err, ErrNoCache) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Load: %v, want an error with %q", err, tt.want)
			}
			if !strings.Contains(err.Error(), f.Socket) {
				t.Errorf("Load: %v, want the socket named", err)
			}
		})
	}
}

// Random replies to every request: errors or a cache, never a panic.
func TestKCMFakeRandomReplies(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var mu sync.Mutex
	valid := map[uint16][]byte{
		kcmOpGetDefaultCache: []byte("7\x00"), kcmOpGetPrincipal: fakeClient,
		kcmOpGetCredList: credListResult(fakeCreds), kcmOpGetCredUUIDList: fakeUUIDs, kcmOpGetCredByUUID: fakeCreds[0],
	}
	f := startFakeKCM(t, func(op uint16, args []byte) []byte {
		mu.Lock()
		defer mu.Unlock()
		res := slices.Clone(valid[op])
		switch rng.IntN(4) {
		case 0: // flip bytes
			for range 1 + rng.IntN(4) {
				if len(res) > 0 {
					res[rng.IntN(len(res))] ^= byte(1 + rng.IntN(255))
				}
			}
		case 1: // truncate
			res = res[:rng.IntN(len(res)+1)]
		case 2: // random
			res = make([]byte, rng.IntN(64))
			for i := range res {
				res[i] = byte(rng.Uint32())
			}
		}
		return kcmReply(res)
	})
	c := resolveFake(t, f, "KCM:")
	for range 2000 {
		_, _ = c.Load(context.Background())
		_, _ = c.Stamp(context.Background())
	}
}

// A daemon that never answers: Load and Stamp fail after KCMTimeout.
func TestKCMFakeNoAnswer(t *testing.T) {
	old := KCMTimeout
	KCMTimeout = 200 * time.Millisecond
	t.Cleanup(func() { KCMTimeout = old })
	release := make(chan struct{})
	f := startFakeKCM(t, func(op uint16, args []byte) []byte {
		<-release
		return nil
	})
	t.Cleanup(func() { close(release) }) // before the server's cleanup waits for its handlers
	c := resolveFake(t, f, "KCM:")
	start := time.Now()
	_, err := c.Load(context.Background())
	if err == nil || !strings.Contains(err.Error(), "no answer within 200ms") {
		t.Errorf("Load: %v, want a timeout", err)
	}
	_, err = c.Stamp(context.Background())
	if err == nil || !strings.Contains(err.Error(), "no answer") {
		t.Errorf("Stamp: %v, want a timeout", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("two timed-out calls took %v", d)
	}
	if accepts := f.Accepts(); accepts != 2 {
		t.Errorf("%d connections, want 2 (none retried after a timeout)", accepts)
	}
}

// One connection serves many calls; when the daemon closes it (a restart, an idle timeout)
// the next call reconnects once and succeeds.
func TestKCMFakeConnectionReuse(t *testing.T) {
	var closeAfter sync.Map
	h := fakeHandler(func() []byte { return credListResult(fakeCreds) }, nil)
	f := startFakeKCM(t, func(op uint16, args []byte) []byte {
		if _, ok := closeAfter.Load("yes"); ok && op == kcmOpGetCredUUIDList {
			closeAfter.Delete("yes")
			return nil // drop the connection without answering
		}
		return h(op, args)
	})
	c := resolveFake(t, f, "KCM:")
	s := mustStamp(t, c)
	for range 20 {
		if got := mustStamp(t, c); got != s {
			t.Fatalf("Stamp %+v then %+v", s, got)
		}
	}
	if _, err := c.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	if accepts := f.Accepts(); accepts != 1 {
		t.Errorf("%d connections for 22 calls, want 1", accepts)
	}
	closeAfter.Store("yes", true)
	if got := mustStamp(t, c); got != s {
		t.Errorf("Stamp after a dropped connection: %+v, want %+v", got, s)
	}
	if accepts := f.Accepts(); accepts != 2 {
		t.Errorf("%d connections, want 2", accepts)
	}
}

// Concurrent Stamp calls share one request sequence.
func TestKCMFakeStampCoalesced(t *testing.T) {
	h := fakeHandler(nil, kcmStatus(codeFCCInternal, nil))
	f := startFakeKCM(t, func(op uint16, args []byte) []byte {
		time.Sleep(100 * time.Millisecond)
		return h(op, args)
	})
	c := resolveFake(t, f, "KCM:")
	const n = 64
	stamps := make([]Stamp, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { stamps[i] = mustStamp(t, c) })
	}
	wg.Wait()
	for _, s := range stamps {
		if s != stamps[0] || !s.Present {
			t.Fatalf("stamps differ: %+v, %+v", stamps[0], s)
		}
	}
	ops := f.Ops()
	if len(ops) > 4 { // one sequence of 2 requests; a straggler may start a second
		t.Errorf("%d requests for %d concurrent Stamp calls: %v", len(ops), n, ops)
	}
}

// A daemon that accepts and never answers: Stamp and Load return when their context ends,
// well before KCMTimeout, with an error that wraps the context's; so does a Load that waits
// behind a Stamp sequence still hanging, and a Load whose context is canceled.
func TestKCMFakeNoAnswerContext(t *testing.T) {
	release := make(chan struct{})
	f := startFakeKCM(t, func(op uint16, args []byte) []byte {
		<-release
		return nil
	})
	t.Cleanup(func() { close(release) })
	c := resolveFake(t, f, "KCM:")
	t.Cleanup(func() { c.Close() })
	const wait = 200 * time.Millisecond
	check := func(what string, err error, start time.Time, want error) {
		t.Helper()
		d := time.Since(start)
		if !errors.Is(err, want) {
			t.Errorf("%s: %v, want %v", what, err, want)
		}
		if d < wait-10*time.Millisecond || d > wait+300*time.Millisecond {
			t.Errorf("%s returned after %v, want about %v (KCMTimeout %v)", what, d, wait, KCMTimeout)
		}
	}
	// A Stamp canceled: its sequence, with no deadline but KCMTimeout, goes on.
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(wait, cancel)
	start := time.Now()
	_, err := c.Stamp(ctx)
	check("Stamp canceled", err, start, context.Canceled)

	// Load waits behind that sequence, within its ctx.
	ctx, cancel = context.WithTimeout(context.Background(), wait)
	defer cancel()
	start = time.Now()
	_, err = c.Load(ctx)
	check("Load behind a hanging Stamp", err, start, context.DeadlineExceeded)

	// On a cache of their own: a Load canceled in its exchange, a Stamp past its deadline.
	c2 := resolveFake(t, f, "KCM:")
	t.Cleanup(func() { c2.Close() })
	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(wait, cancel)
	start = time.Now()
	_, err = c2.Load(ctx)
	check("Load canceled", err, start, context.Canceled)
	c3 := resolveFake(t, f, "KCM:")
	t.Cleanup(func() { c3.Close() })
	ctx, cancel = context.WithTimeout(context.Background(), wait)
	defer cancel()
	start = time.Now()
	_, err = c3.Stamp(ctx)
	check("Stamp", err, start, context.DeadlineExceeded)
}

// A Stamp never takes the answer of a request sequence that began before it was called (a
// kdestroy between the two would go unseen), and concurrent callers still share sequences: at
// most two per wave of simultaneous callers.
func TestKCMFakeStampNeverStale(t *testing.T) {
	var mu sync.Mutex
	var seqs int
	starts := map[uint64]time.Time{} // fnv64a of the UUID list -> when its sequence began
	var cur []byte
	f := startFakeKCM(t, func(op uint16, args []byte) []byte {
		time.Sleep(10 * time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		switch op {
		case kcmOpGetDefaultCache: // the first request of a Stamp sequence of KCM:
			seqs++
			cur = binary.BigEndian.AppendUint64(make([]byte, 8), uint64(seqs))
			starts[fnv64a(cur)] = time.Now()
			return kcmReply([]byte("7\x00"))
		case kcmOpGetCredUUIDList:
			return kcmReply(cur)
		}
		return kcmStatus(codeFCCInternal, nil)
	})
	c := resolveFake(t, f, "KCM:")
	t.Cleanup(func() { c.Close() })
	const waves, callers = 6, 32
	for w := range waves {
		go0 := make(chan struct{})
		var wg sync.WaitGroup
		for i := range callers {
			wg.Go(func() {
				<-go0
				if i%2 == 1 {
					time.Sleep(time.Duration(i) * time.Millisecond / 2) // some arrive mid-sequence
				}
				called := time.Now()
				s, err := c.Stamp(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				began, ok := starts[s.B]
				mu.Unlock()
				if !ok {
					t.Errorf("wave %d: stamp %+v from no sequence", w, s)
				} else if began.Before(called) {
					t.Errorf("wave %d: a call at %v got the answer of a sequence that began %v before it",
						w, called.Format("15:04:05.000000"), called.Sub(began))
				}
			})
		}
		close(go0)
		wg.Wait()
	}
	mu.Lock()
	defer mu.Unlock()
	// Each wave: the sequence the first caller starts, then at most one for those that came
	// while it ran, and one for those that came while that one ran (the late half).
	if seqs > 3*waves {
		t.Errorf("%d sequences for %d waves of %d callers", seqs, waves, callers)
	}
	t.Logf("%d sequences for %d waves of %d callers", seqs, waves, callers)
}

// Close closes the connection to the daemon, and nothing opens one afterwards.
func TestKCMFakeClose(t *testing.T) {
	f := startFakeKCM(t, fakeHandler(func() []byte { return credListResult(fakeCreds) }, nil))
	c := resolveFake(t, f, "KCM:")
	mustStamp(t, c)
	conn := c.(*kcmCache).conn
	if conn == nil {
		t.Fatal("no connection after Stamp")
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil { // again
		t.Fatal(err)
	}
	if _, err := conn.Write([]byte{0}); !errors.Is(err, net.ErrClosed) {
		t.Errorf("the connection after Close: write gives %v, want net.ErrClosed", err)
	}
	if _, err := c.Stamp(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Stamp after Close: %v, want ErrClosed", err)
	}
	if _, err := c.Load(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Load after Close: %v, want ErrClosed", err)
	}
	if accepts := f.Accepts(); accepts != 1 {
		t.Errorf("%d connections, want 1 (none after Close)", accepts)
	}
}
