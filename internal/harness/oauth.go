package harness

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
)

// OAuthOptions prepare a PostgreSQL 18 server for OAuth (SASL OAUTHBEARER, RFC 7628 as
// PostgreSQL 18 uses it: src/backend/libpq/auth-oauth.c): the harness's validator module
// (oauthvalidator.go) is loaded and authorizes the tokens of TokenFile, which an OAuthIssuer
// writes (OAuthIssuer.OAuth fills Issuer, Scope and TokenFile). The server never contacts the
// issuer.
type OAuthOptions struct {
	// Issuer is the hba option issuer=: an https issuer identifier (the server sends
	// Issuer + "/.well-known/openid-configuration" as the discovery URI, or Issuer itself when
	// it already holds "/.well-known/"). Required.
	Issuer string
	// Scope is the hba option scope=, the space-separated scopes the server asks for. Required.
	Scope string
	// TokenFile is the file of tokens the validator module authorizes (OAuthIssuer.TokenFile),
	// read again at each validation; its path is fixed for the life of the server (the
	// postmaster's environment). Required.
	TokenFile string
	// DelegateIdentMapping adds delegate_ident_mapping=1: the module then authorizes a token only
	// when its identity is the requested role, and the server applies no mapping. Without it the
	// module sets the identity as authn_id and the server requires it to equal the role, or to
	// map to it through Map. Fixed for the life of the server.
	DelegateIdentMapping bool
	// Map is the hba option map= (a pg_ident.conf map name; "" for none); not with
	// DelegateIdentMapping.
	Map string
	// Ident are the lines of pg_ident.conf ("MAPNAME SYSTEM-USERNAME PG-USERNAME"), for Map.
	Ident []string
	// Types are the connection types that get the oauth line: "host" (TCP, with or without TLS),
	// "hostssl" (TLS only; needs Options.TLS), "local" (the unix socket, for every role but the
	// superuser "postgres", which the harness keeps for itself). Empty means {"host"}. Ignored
	// when Options.HBA is set (write the lines with HBALine then).
	Types []string
}

var oauthTypes = map[string]bool{"host": true, "hostssl": true, "local": true}

// check returns an error naming what is wrong with o, for a server of major version major.
func (o *OAuthOptions) check(major int, tls bool) error {
	if o == nil {
		return nil
	}
	if major != 18 {
		return fmt.Errorf("harness: Options.OAuth needs PostgreSQL 18 (OAuth arrived in 18), not %d: use Options.Major 18", major)
	}
	u, err := url.Parse(o.Issuer)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("harness: OAuthOptions.Issuer %q is not an https URL", o.Issuer)
	}
	if o.Scope == "" {
		return errors.New("harness: OAuthOptions.Scope is empty (the hba option scope= is required)")
	}
	if !filepath.IsAbs(o.TokenFile) {
		return fmt.Errorf("harness: OAuthOptions.TokenFile %q is not an absolute path", o.TokenFile)
	}
	if o.DelegateIdentMapping && o.Map != "" {
		return errors.New("harness: OAuthOptions: Map and DelegateIdentMapping together (the server applies no map when it delegates)")
	}
	for _, s := range append([]string{o.Issuer, o.Scope, o.Map, o.TokenFile}, o.Ident...) {
		if strings.ContainsAny(s, "\"\n\r\x00") {
			return errors.New("harness: OAuthOptions: a value holds a double quote, a line break or NUL")
		}
	}
	for _, t := range o.Types {
		if !oauthTypes[t] {
			return fmt.Errorf("harness: OAuthOptions.Types: unknown connection type %q (want host, hostssl or local)", t)
		}
		if t == "hostssl" && !tls {
			return errors.New("harness: OAuthOptions.Types hostssl needs Options.TLS")
		}
	}
	return nil
}

// HBALine returns the pg_hba.conf line that makes connections of type connType ("host",
// "hostssl", "hostnossl" or "local") from 127.0.0.1 (or the unix socket) authenticate with OAuth
// as o says, for every database and role (for "local": every role but "postgres", see Types):
//
//	host all all 127.0.0.1/32 oauth issuer="..." scope="..." validator=... [delegate_ident_mapping=1] [map=...]
func (o *OAuthOptions) HBALine(connType string) string {
	// pg_hba.conf quotes with double quotes and no escapes (check refuses a '"' in them).
	opts := `oauth issuer="` + o.Issuer + `" scope="` + o.Scope + `" validator=` + oauthValidatorName
	if o.DelegateIdentMapping {
		opts += " delegate_ident_mapping=1"
	}
	if o.Map != "" {
		opts += " map=" + o.Map
	}
	if connType == "local" {
		return "local all all " + opts
	}
	return connType + " all all 127.0.0.1/32 " + opts
}

// setupOAuth prepares the server for o: the module, its settings and environment, pg_ident.conf,
// and the local oauth line. It returns the host lines to use when Options.HBA is nil.
func (p *Postgres) setupOAuth(ctx context.Context, o *OAuthOptions) ([]string, error) {
	dir, err := oauthValidatorModule(ctx)
	if err != nil {
		return nil, err
	}
	if p.set == nil {
		p.set = map[string]string{}
	}
	for k, v := range map[string]string{
		"dynamic_library_path":      "$libdir:" + dir,
		"oauth_validator_libraries": oauthValidatorName,
	} {
		if _, ok := p.set[k]; !ok {
			p.set[k] = v
		}
	}
	delegate := "0"
	if o.DelegateIdentMapping {
		delegate = "1"
	}
	p.serverEnv = append(p.serverEnv, oauthTokenFileEnv+"="+o.TokenFile, oauthDelegateEnv+"="+delegate)
	if len(o.Ident) > 0 {
		ident := "# Written by the pgconnector test harness.\n" + strings.Join(o.Ident, "\n") + "\n"
		if err := p.env.acct.writeFile(filepath.Join(p.DataDir, "pg_ident.conf"), []byte(ident), 0o600); err != nil {
			return nil, fmt.Errorf("harness: %w", err)
		}
	}
	types := o.Types
	if len(types) == 0 {
		types = []string{"host"}
	}
	var host []string
	for _, t := range types {
		if t == "local" {
			p.localHBA = append(p.localHBA, o.HBALine(t))
		} else {
			host = append(host, o.HBALine(t))
		}
	}
	return host, nil
}
