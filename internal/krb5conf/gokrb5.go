package krb5conf

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/jcmturner/gokrb5/v8/config"
)

// The [libdefaults] relations gokrb5 v8.4.4 reads (config/krb5conf.go
// LibDefaults.parseLines), by how Gokrb5Config hands them over.
var (
	// Booleans, parsed with MIT's words and given to gokrb5 as true or false.
	gokrb5Booleans = []string{"allow_weak_crypto", "canonicalize", "dns_lookup_kdc", "dns_lookup_realm",
		"forwardable", "ignore_acceptor_hostname", "k5login_authoritative", "noaddresses", "proxiable",
		"rdns", "verify_ap_req_nofail"}
	// Strings set on the Config as they are: gokrb5's own parser would cut them at
	// '#', ';' or '='.
	gokrb5Strings = []string{"default_client_keytab_name", "default_keytab_name", "default_realm", "k5login_directory"}
	// Encryption type lists: MIT separates them by blanks or commas
	// (krb5int_parse_enctype_list), gokrb5 by blanks only.
	gokrb5Enctypes = []string{"default_tgs_enctypes", "default_tkt_enctypes", "permitted_enctypes"}
	// Numbers, durations and the rest, left to gokrb5's parser.
	gokrb5Others = []string{"ccache_type", "clockskew", "extra_addresses", "kdc_default_options", "kdc_timesync",
		"preferred_preauth_types", "realm_try_domains", "renew_lifetime", "safe_checksum_type",
		"ticket_lifetime", "udp_preference_limit"}
)

// parseBool is profile_parse_boolean (prof_get.c): case-insensitive
// y, yes, true, t, 1, on and n, no, false, nil, 0, off.
func parseBool(s string) (v, ok bool) {
	switch strings.ToLower(s) {
	case "y", "yes", "true", "t", "1", "on":
		return true, true
	case "n", "no", "false", "nil", "0", "off":
		return false, true
	}
	return false, false
}

// Gokrb5Config returns the profile as a gokrb5 Config that answers what gokrb5
// asks the way MIT answers from the same files:
//   - [libdefaults]: the first value of each relation gokrb5 knows, under its
//     exact (lower case) name, as MIT does; gokrb5's own parser keeps the last
//     one and lower-cases names. Booleans take MIT's words (on, off, nil ...);
//     a value MIT cannot read as a boolean leaves gokrb5's default, as MIT
//     leaves its own. dns_canonicalize_hostname = fallback (MIT 1.18) counts
//     as true. Encryption type lists may use commas. udp_preference_limit
//     above 32700 is 32700, as MIT clamps it (os/sendto_kdc.c). A number or
//     duration with '#', ';' or '=' in it is left out (MIT cannot parse it
//     either and takes its default). Other values gokrb5 cannot parse are its
//     error.
//   - dns_lookup_kdc defaults to true, MIT's default; gokrb5's is false.
//   - [realms]: one Realm per realm name, with the values of each relation from
//     every file in read order (a realm defined in two places is merged, where
//     gokrb5 would keep two entries and use the last in GetKDCs and the first
//     in IsConfigured); kdc without a port gets ":88" as gokrb5 does;
//     default_domain is the first value; kpasswd_server defaults to each
//     admin_server host with port 464, as gokrb5 does.
//   - [domain_realm]: the first value of each name. MIT looks the host name up
//     in lower case, so a name with upper case letters never matches there and
//     is left out here.
//
// Unknown relations and sections are not given to gokrb5; [Profile.Value]
// reads them.
func (p *Profile) Gokrb5Config() (cfg *config.Config, err error) {
	defer func() {
		if r := recover(); r != nil {
			cfg, err = nil, fmt.Errorf("krb5conf: gokrb5 failed on [libdefaults] of %s", strings.Join(p.files, ", "))
		}
	}()
	var b strings.Builder
	b.WriteString("[libdefaults]\n")
	line := func(name, value string) {
		b.WriteString(" " + name + " = " + value + "\n")
	}
	dnsLookupKDC := false
	for _, name := range gokrb5Booleans {
		s, ok := p.LibDefault(name)
		if !ok {
			continue
		}
		if v, ok := parseBool(s); ok {
			line(name, strconv.FormatBool(v))
			dnsLookupKDC = dnsLookupKDC || name == "dns_lookup_kdc"
		}
	}
	if !dnsLookupKDC {
		line("dns_lookup_kdc", "true")
	}
	if s, ok := p.LibDefault("dns_canonicalize_hostname"); ok {
		v, ok := parseBool(s)
		if strings.EqualFold(s, "fallback") {
			v, ok = true, true
		}
		if ok {
			line("dns_canonicalize_hostname", strconv.FormatBool(v))
		}
	}
	for _, name := range gokrb5Enctypes {
		if s, ok := p.LibDefault(name); ok {
			if clean(s) {
				line(name, strings.Join(strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' }), " "))
			}
		}
	}
	for _, name := range gokrb5Others {
		s, ok := p.LibDefault(name)
		if !ok || !clean(s) {
			continue
		}
		if name == "udp_preference_limit" {
			if n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64); err == nil && n > 32700 {
				s = "32700"
			}
		}
		line(name, s)
	}
	cfg, err = config.NewFromString(b.String())
	if err != nil {
		return nil, fmt.Errorf("krb5conf: gokrb5 rejects a value of [libdefaults] in %s: %w", strings.Join(p.files, ", "), err)
	}
	for _, name := range gokrb5Strings {
		s, ok := p.LibDefault(name)
		if !ok {
			continue
		}
		switch name {
		case "default_client_keytab_name":
			cfg.LibDefaults.DefaultClientKeytabName = s
		case "default_keytab_name":
			cfg.LibDefaults.DefaultKeytabName = s
		case "default_realm":
			cfg.LibDefaults.DefaultRealm = s
		case "k5login_directory":
			cfg.LibDefaults.K5LoginDirectory = s
		}
	}

	for _, name := range p.Sections("realms") {
		r := config.Realm{Realm: name}
		for _, kdc := range p.Values("realms", name, "kdc") {
			r.KDC = append(r.KDC, withPort(kdc, "88"))
		}
		r.AdminServer = p.Values("realms", name, "admin_server")
		r.KPasswdServer = p.Values("realms", name, "kpasswd_server")
		r.MasterKDC = p.Values("realms", name, "master_kdc")
		r.DefaultDomain, _ = p.Value("realms", name, "default_domain")
		if len(r.KPasswdServer) == 0 {
			for _, a := range r.AdminServer {
				r.KPasswdServer = append(r.KPasswdServer, hostOf(a)+":464")
			}
		}
		cfg.Realms = append(cfg.Realms, r)
	}

	for _, name := range p.Relations("domain_realm") {
		if strings.ToLower(name) != name {
			continue
		}
		if realm, ok := p.Value("domain_realm", name); ok {
			cfg.DomainRealm[name] = realm
		}
	}
	return cfg, nil
}

// clean reports whether gokrb5's line parser would take s whole.
func clean(s string) bool { return !strings.ContainsAny(s, "#;=\n\r") }

// withPort adds port to a host without one ("kdc.example.com", "[::1]").
func withPort(hostport, port string) string {
	if _, _, err := net.SplitHostPort(hostport); err == nil {
		return hostport
	}
	if strings.HasPrefix(hostport, "[") && strings.HasSuffix(hostport, "]") {
		return hostport + ":" + port
	}
	if strings.Contains(hostport, ":") {
		return hostport // as gokrb5: anything with a colon is taken as having a port
	}
	return hostport + ":" + port
}

// hostOf is the host of an admin_server value, as gokrb5 takes it (up to the first ':').
func hostOf(hostport string) string {
	h, _, _ := strings.Cut(hostport, ":")
	return h
}
