package krb5conf

import (
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/jcmturner/gokrb5/v8/config"
	"github.com/jcmturner/gokrb5/v8/iana/etypeID"
)

// What gokrb5 is given where its own parser answers differently from MIT.
func TestGokrb5ConfigMatchesMIT(t *testing.T) {
	dir := t.TempDir()
	first := "[libdefaults]\n default_realm = FIRST.TEST\n default_realm = SECOND.TEST\n forwardable = on\n rdns = off\n" +
		" dns_canonicalize_hostname = fallback\n udp_preference_limit = 99999\n default_keytab_name = FILE:/k#1;x=y\n" +
		" default_tkt_enctypes = aes128-cts-hmac-sha1-96,aes256-cts-hmac-sha1-96\n ticket_lifetime = 10h # comment\n" +
		" kcm_socket = /run/a\n" +
		"[realms]\n R.TEST = {\n kdc = a.test\n admin_server = adm.test:749\n }\n" +
		" R.TEST = {\n kdc = b.test:8888\n }\n" +
		"[domain_realm]\n .r.test = R.TEST\n .r.test = OTHER.TEST\n UPPER.TEST = R.TEST\n"
	second := "[libdefaults]\n default_realm = THIRD.TEST\n forwardable = false\n kcm_socket = /run/b\n" +
		"[realms]\n R.TEST = {\n kdc = [::1]\n }\n S.TEST = {\n kdc = s.test\n }\n" +
		"[domain_realm]\n .r.test = THIRD.TEST\n"
	write(t, dir, map[string]string{"a": first, "b": second})
	p, err := load(t, dir, "a,b")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := p.Gokrb5Config()
	if err != nil {
		t.Fatal(err)
	}
	l := cfg.LibDefaults
	if l.DefaultRealm != "FIRST.TEST" || !l.Forwardable || l.RDNS || !l.DNSCanonicalizeHostname ||
		l.UDPPreferenceLimit != 32700 || l.DefaultKeytabName != "FILE:/k#1;x=y" || !l.DNSLookupKDC {
		t.Errorf("libdefaults: realm %q forwardable %v rdns %v canon %v udp %d keytab %q dnskdc %v", l.DefaultRealm,
			l.Forwardable, l.RDNS, l.DNSCanonicalizeHostname, l.UDPPreferenceLimit, l.DefaultKeytabName, l.DNSLookupKDC)
	}
	if want := []int32{etypeID.AES128_CTS_HMAC_SHA1_96, etypeID.AES256_CTS_HMAC_SHA1_96}; !slices.Equal(l.DefaultTktEnctypeIDs, want) {
		t.Errorf("default_tkt_enctypes = %v, want %v", l.DefaultTktEnctypeIDs, want)
	}
	if l.TicketLifetime != config.New().LibDefaults.TicketLifetime {
		t.Errorf("ticket_lifetime with a trailing '# comment' (unparsable for MIT) = %v, want the default", l.TicketLifetime)
	}
	if s, _ := p.KCMSocket(); s != "/run/a" {
		t.Errorf("kcm_socket = %q, want the first file's", s)
	}

	if len(cfg.Realms) != 2 {
		t.Fatalf("%d realms, want 2: %+v", len(cfg.Realms), cfg.Realms)
	}
	n, kdcs, err := cfg.GetKDCs("R.TEST", true)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, k := range kdcs {
		got = append(got, k)
	}
	sort.Strings(got)
	if want := []string{"[::1]:88", "a.test:88", "b.test:8888"}; n != 3 || !slices.Equal(got, want) {
		t.Errorf("GetKDCs(R.TEST) = %d %v, want %v", n, got, want)
	}
	if r := cfg.Realms[0]; r.Realm != "R.TEST" || !slices.Equal(r.KPasswdServer, []string{"adm.test:464"}) {
		t.Errorf("realm %+v", r)
	}
	if got := cfg.ResolveRealm("h.r.test"); got != "R.TEST" {
		t.Errorf("domain_realm .r.test -> %q, want the first value R.TEST", got)
	}
	if _, ok := cfg.DomainRealm["upper.test"]; ok || len(cfg.DomainRealm) != 1 {
		t.Errorf("domain_realm %v: an upper-case name never matches in MIT", cfg.DomainRealm)
	}

	// gokrb5's own parser on the same text gives the answers reconciled above.
	if _, err := config.NewFromString(first); err == nil {
		t.Error("gokrb5 alone now takes forwardable = on")
	}
	raw, err := config.NewFromString(strings.NewReplacer("= on", "= true", "= off", "= false", "= fallback", "= true", "= 99999", "= 1").Replace(first))
	if err != nil {
		t.Fatal(err)
	}
	if raw.LibDefaults.DefaultRealm != "SECOND.TEST" || len(raw.Realms) != 2 || raw.DomainRealm[".r.test"] != "OTHER.TEST" {
		t.Errorf("gokrb5 alone: realm %q, %d realm entries, .r.test -> %q", raw.LibDefaults.DefaultRealm, len(raw.Realms), raw.DomainRealm[".r.test"])
	}
	if _, err := config.NewFromString("[libdefaults]\n dns_canonicalize_hostname = fallback\n"); err == nil {
		t.Error("gokrb5 alone now takes dns_canonicalize_hostname = fallback")
	}
}

func TestGokrb5ConfigEmptyAndErrors(t *testing.T) {
	cfg, err := (&Profile{}).Gokrb5Config()
	if err != nil || len(cfg.Realms) != 0 || !cfg.LibDefaults.DNSLookupKDC {
		t.Fatalf("empty profile: %+v, %v", cfg, err)
	}
	dir := t.TempDir()
	write(t, dir, map[string]string{"krb5.conf": "[libdefaults]\n clockskew = soon\n"})
	p, err := load(t, dir, "krb5.conf")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Gokrb5Config(); err == nil || !strings.Contains(err.Error(), "clockskew") || !strings.Contains(err.Error(), dir) {
		t.Fatalf("bad clockskew: %v", err)
	}
}
