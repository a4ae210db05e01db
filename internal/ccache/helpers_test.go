package ccache

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jcmturner/gokrb5/v8/credentials"
	"github.com/pgconnector/pgconnector/internal/harness"
)

// klistTicketRE matches a ticket line of klist: start, expiry, service principal.
var klistTicketRE = regexp.MustCompile(`(?m)^(\d\d/\d\d/\d\d \d\d:\d\d:\d\d)\s+(\d\d/\d\d/\d\d \d\d:\d\d:\d\d)\s+(\S+)$`)

// checkMatchesKlist loads c and checks it against klist of klistName: the default principal,
// the same tickets with the same end times, among them a valid TGT of the realm.
func checkMatchesKlist(t *testing.T, k *harness.KDC, c Cache, klistName, principal string) {
	t.Helper()
	cc, err := c.Load(context.Background())
	if err != nil {
		t.Fatalf("Load %s: %v", c.Name(), err)
	}
	checkCCacheMatchesKlist(t, k, cc, c.Name(), klistName, principal)
}

// checkCCacheMatchesKlist is checkMatchesKlist of cc, loaded from the cache named name.
func checkCCacheMatchesKlist(t *testing.T, k *harness.KDC, cc *credentials.CCache, name, klistName, principal string) {
	t.Helper()
	want := k.Principal(principal)
	if got := cc.DefaultPrincipal.PrincipalName.PrincipalNameString() + "@" + cc.DefaultPrincipal.Realm; got != want {
		t.Fatalf("Load %s: default principal %s, want %s", name, got, want)
	}
	out, err := k.KlistName(klistName)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "Default principal: "+want+"\n") {
		t.Fatalf("klist %s does not show %s:\n%s", klistName, want, out)
	}
	var fromKlist, fromLoad []string
	for _, m := range klistTicketRE.FindAllStringSubmatch(out, -1) {
		fromKlist = append(fromKlist, m[3]+" "+m[2])
	}
	tgt := false
	for _, cr := range cc.GetEntries() {
		server := cr.Server.PrincipalName.PrincipalNameString() + "@" + cr.Server.Realm
		fromLoad = append(fromLoad, server+" "+cr.EndTime.Local().Format("01/02/06 15:04:05"))
		if server == "krbtgt/"+k.Realm+"@"+k.Realm && cr.EndTime.After(time.Now()) && len(cr.Ticket) > 0 && len(cr.Key.KeyValue) > 0 {
			tgt = true
		}
	}
	slices.Sort(fromKlist)
	slices.Sort(fromLoad)
	if !slices.Equal(fromKlist, fromLoad) || len(fromLoad) == 0 {
		t.Fatalf("Load %s: tickets %q, klist shows %q", name, fromLoad, fromKlist)
	}
	if !tgt {
		t.Fatalf("Load %s: no valid TGT krbtgt/%s among %q", name, k.Realm, fromLoad)
	}
}

func mustResolve(t testing.TB, name string) Cache {
	t.Helper()
	c, err := Resolve(name, Options{})
	if err != nil {
		t.Fatalf("Resolve(%q): %v", name, err)
	}
	return c
}

func mustStamp(t testing.TB, c Cache) Stamp {
	t.Helper()
	s, err := c.Stamp(context.Background())
	if err != nil {
		t.Fatalf("Stamp %s: %v", c.Name(), err)
	}
	return s
}

// checkGone checks that c is absent: a stamp with Present false and a Load error that wraps
// ErrNoCache.
func checkGone(t *testing.T, c Cache) {
	t.Helper()
	if s := mustStamp(t, c); s.Present {
		t.Fatalf("Stamp %s: %+v, want not present", c.Name(), s)
	}
	if _, err := c.Load(context.Background()); !errors.Is(err, ErrNoCache) {
		t.Fatalf("Load %s: %v, want ErrNoCache", c.Name(), err)
	}
}

// stampChanged returns the new stamp of c; it fails if that equals old, or if a second Stamp
// with nothing done in between differs.
func stampChanged(t *testing.T, c Cache, old Stamp, what string) Stamp {
	t.Helper()
	s := mustStamp(t, c)
	if s == old {
		t.Fatalf("Stamp %s unchanged after %s: %+v", c.Name(), what, s)
	}
	if s2 := mustStamp(t, c); s2 != s {
		t.Fatalf("Stamp %s changed with nothing done after %s: %+v then %+v", c.Name(), what, s, s2)
	}
	return s
}

var ticketCacheRE = regexp.MustCompile(`(?m)^Ticket cache: (\S+)$`)

// resolvedName is the name of the cache klist shows for name: a collection's primary.
func resolvedName(t *testing.T, k *harness.KDC, name string) string {
	t.Helper()
	out, err := k.KlistName(name)
	if err != nil {
		t.Fatal(err)
	}
	m := ticketCacheRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("klist %s shows no ticket cache:\n%s", name, out)
	}
	return m[1]
}

// collectionKDC starts a KDC with the principals alice and bob.
func collectionKDC(t *testing.T) *harness.KDC {
	k := harness.StartKDCT(t, harness.KDCOptions{})
	for _, p := range []string{"alice", "bob"} {
		if _, err := k.AddPrincipal(p); err != nil {
			t.Fatal(err)
		}
	}
	return k
}

// checkCollection runs kinit, kswitch and kdestroy on the collection name (DIR or KEYRING) and
// checks Load and Stamp after each.
func checkCollection(t *testing.T, k *harness.KDC, name string) {
	c := mustResolve(t, name)
	checkGone(t, c)
	if err := k.KinitName(name, "alice", 0); err != nil {
		t.Fatal(err)
	}
	checkMatchesKlist(t, k, c, name, "alice")
	s1 := stampChanged(t, c, Stamp{}, "the first kinit")

	if err := k.KinitName(name, "alice", 0); err != nil {
		t.Fatal(err)
	}
	checkMatchesKlist(t, k, c, name, "alice")
	s2 := stampChanged(t, c, s1, "kinit of the same principal")

	if err := k.KinitName(name, "bob", 0); err != nil { // a new cache, made the primary
		t.Fatal(err)
	}
	checkMatchesKlist(t, k, c, name, "bob")
	s3 := stampChanged(t, c, s2, "kinit of another principal")

	if err := k.Kswitch(name, "alice"); err != nil {
		t.Fatal(err)
	}
	checkMatchesKlist(t, k, c, name, "alice")
	s4 := stampChanged(t, c, s3, "kswitch")

	// One cache of the collection by its full name.
	sub := resolvedName(t, k, name)
	cs := mustResolve(t, sub)
	checkMatchesKlist(t, k, cs, sub, "alice")
	ss := mustStamp(t, cs)
	if err := k.Kswitch(name, "bob"); err != nil {
		t.Fatal(err)
	}
	if s := mustStamp(t, cs); s != ss {
		t.Fatalf("Stamp of %s changed after kswitch to another cache", sub)
	}
	s5 := stampChanged(t, c, s4, "kswitch to bob")

	if err := k.Kdestroy(name, false); err != nil { // bob's cache, the primary
		t.Fatal(err)
	}
	if s := mustStamp(t, c); s == s5 {
		t.Fatal("Stamp unchanged after kdestroy")
	}
	checkGone(t, c)
	checkMatchesKlist(t, k, cs, sub, "alice") // the other cache stays
	if err := k.Kdestroy(sub, false); err != nil {
		t.Fatal(err)
	}
	checkGone(t, cs)
}
