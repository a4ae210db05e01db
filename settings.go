package pgconnector

import (
	"crypto/tls"
	"maps"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgconnector/pgconnector/negotiation"
)

// Settings is a parsed connection string.
type Settings struct {
	// Config is what pgx parsed, without the keys below in RuntimeParams.
	Config *pgx.ConnConfig
	// Hosts are the hosts of the connection string in order, each with its sslmode.
	Hosts []negotiation.Host
	// GSSEncMode is gssencmode (libpq-connect.html#LIBPQ-CONNECT-GSSENCMODE), or PGGSSENCMODE.
	GSSEncMode negotiation.GSSEncMode
	// GSSDelegation is gssdelegation=1: forward the client's credentials to the server.
	GSSDelegation bool
}

// libpq keys that pgx does not know and would otherwise send to the server as run-time
// parameters (the server rejects them: unrecognized configuration parameter).
var libpqOnlyKeys = []string{"gssencmode", "gssdelegation"}

// ParseSettings parses a connection string as New does. Every error is a [*ParseError]: it names
// the bad key (and the allowed values) and never holds the password or another secret.
func ParseSettings(dsn string) (*Settings, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fromPgx(err, dsn)
	}
	switch cfg.SSLNegotiation {
	case "", "postgres", "direct":
	default:
		// pgx keeps any value and treats it as "postgres"; libpq rejects it.
		src := sourceOf(dsn, "sslnegotiation")
		return nil, invalid("sslnegotiation", source{value: cfg.SSLNegotiation, env: src.env, known: true}, "one of postgres, direct")
	}
	s := &Settings{Config: cfg}

	params := maps.Clone(cfg.RuntimeParams)
	gssenc, ok := params["gssencmode"]
	env := ""
	if !ok {
		gssenc, env = os.Getenv("PGGSSENCMODE"), "PGGSSENCMODE"
	}
	if s.GSSEncMode, err = negotiation.ParseGSSEncMode(gssenc); err != nil {
		return nil, invalid("gssencmode", source{value: gssenc, env: env, known: true}, "one of disable, prefer, require")
	}
	if s.GSSDelegation, err = negotiation.ParseGSSDelegation(params["gssdelegation"]); err != nil {
		return nil, invalid("gssdelegation", source{value: params["gssdelegation"], known: true}, "0 or 1")
	}
	for _, k := range libpqOnlyKeys {
		delete(params, k)
	}
	cfg.RuntimeParams = params

	s.Hosts = hostsOf(&cfg.Config)
	if len(s.Hosts) == 0 {
		return nil, &ParseError{Key: "host", msg: "connection string has no host"}
	}
	return s, nil
}

// hostsOf groups pgx's attempts (Host, Port, TLSConfig and the Fallbacks) by host: pgx expands
// each host into one attempt per TLS configuration of its sslmode (pgconn/config.go,
// configTLS): disable [plain]; allow [plain, TLS]; prefer [TLS, plain]; require, verify-ca and
// verify-full [TLS]. The shape gives back the sslmode; the TLS configuration is kept as pgx built it.
func hostsOf(cfg *pgconn.Config) []negotiation.Host {
	all := make([]pgconn.FallbackConfig, 0, 1+len(cfg.Fallbacks))
	all = append(all, pgconn.FallbackConfig{Host: cfg.Host, Port: cfg.Port, TLSConfig: cfg.TLSConfig})
	for _, fb := range cfg.Fallbacks {
		all = append(all, *fb)
	}
	var hosts []negotiation.Host
	for i := 0; i < len(all); {
		j := i + 1
		for j < len(all) && all[j].Host == all[i].Host && all[j].Port == all[i].Port && j-i < 2 {
			j++
		}
		group := all[i:j]
		// Two plain attempts in a row are two hosts written twice, not one sslmode.
		if len(group) == 2 && (group[0].TLSConfig == nil) == (group[1].TLSConfig == nil) {
			group, j = group[:1], i+1
		}
		h := negotiation.Host{Host: all[i].Host, Port: all[i].Port}
		switch {
		case len(group) == 2 && group[0].TLSConfig != nil:
			h.SSLMode, h.TLSConfig = negotiation.SSLModePrefer, group[0].TLSConfig
		case len(group) == 2:
			h.SSLMode, h.TLSConfig = negotiation.SSLModeAllow, group[1].TLSConfig
		case group[0].TLSConfig == nil:
			h.SSLMode = negotiation.SSLModeDisable
		default:
			h.SSLMode, h.TLSConfig = requiredMode(group[0].TLSConfig), group[0].TLSConfig
		}
		hosts = append(hosts, h)
		i = j
	}
	return hosts
}

// requiredMode tells require, verify-ca and verify-full apart by what pgx set (configTLS):
// verify-full verifies the chain and the name; verify-ca (and require with sslrootcert, which
// libpq treats as verify-ca) verifies the chain only; require verifies nothing.
func requiredMode(c *tls.Config) negotiation.SSLMode {
	switch {
	case !c.InsecureSkipVerify:
		return negotiation.SSLModeVerifyFull
	case c.VerifyPeerCertificate != nil || c.VerifyConnection != nil:
		return negotiation.SSLModeVerifyCA
	}
	return negotiation.SSLModeRequire
}
