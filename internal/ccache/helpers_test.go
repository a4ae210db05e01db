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
