package connstring

import (
	"crypto/tls"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgconnector/pgconnector/internal/keepalive"
	"github.com/pgconnector/pgconnector/internal/tlspolicy"
	"github.com/pgconnector/pgconnector/negotiation"
)

// Settings is a parsed connection string.
type Settings struct {
	// Config is what pgx parsed, without the libpq keys (see [Keywords]) in RuntimeParams. Its
	// Password is the connection string's or PGPASSWORD's only: the password file is read at each
	// connect, for each host apart (passfile.go).
	Config *pgx.ConnConfig
	// Hosts are the hosts of the connection string in order, each with its sslmode and hostaddr.
	Hosts []negotiation.Host
	// GSSEncMode is gssencmode (libpq-connect.html#LIBPQ-CONNECT-GSSENCMODE), or PGGSSENCMODE.
	GSSEncMode negotiation.GSSEncMode
	// GSSDelegation is gssdelegation=1: forward the client's credentials to the server.
	GSSDelegation bool
	// TargetSessionAttrs is target_session_attrs, or PGTARGETSESSIONATTRS.
	TargetSessionAttrs negotiation.TargetSessionAttrs
	// LoadBalanceHosts is load_balance_hosts=random (libpq 16), or PGLOADBALANCEHOSTS.
	LoadBalanceHosts bool
	// RequirePeer is requirepeer, or PGREQUIREPEER: the server's operating-system user over a
	// Unix-domain socket.
	RequirePeer string
	// OAuth is oauth_issuer, oauth_client_id, oauth_client_secret and oauth_scope (libpq 18),
	// none of them sent to the server nor given to pgx; an empty value is not given.
	OAuth OAuth
	// Keepalives are the TCP options of keepalives, keepalives_idle, keepalives_interval,
	// keepalives_count and tcp_user_timeout; nil when none is given (pgx's dialer is kept).
	Keepalives *keepalive.Options

	// tlsChecks are the server checks of Hosts' TLS configurations (internal/tlspolicy), one per host,
	// nil for a host without TLS: WithTLSConfigFunc's configurations are checked by them.
	tlsChecks []*tlspolicy.ServerCheck
	// clientCert is the client certificate of sslcert and sslkey, which every host's TLS
	// configuration sends (tlspolicy.ClientCert); nil under sslcertmode=disable.
	clientCert *tlspolicy.ClientCert

	// passfile is the password file to look each host up in at connect time (passfile.go), or ""
	// when the connection string or PGPASSWORD gives the password, which every host gets.
	passfile string

	// pool is pgxpool's configuration without its ConnConfig (PoolConfig), or poolErr the error
	// of a pgxpool key that cannot be read.
	pool    *pgxpool.Config
	poolErr error
}

// Parse parses a connection string as New does: read once (see the package doc), then the keys
// that change what pgx must parse written at its end for pgx, then every check and the hosts
// from what was read and what pgx built. Every error is a [*ParseError]: it names the bad key
// (and the allowed values) and never holds the password or another secret.
func Parse(dsn string) (*Settings, error) {
	v, err := read(dsn)
	if err != nil {
		return nil, err
	}
	// An empty value libpq refuses (empty.go), before pgx takes it for its default.
	if err := v.checkEmpty(); err != nil {
		return nil, err
	}
	// Keys that change what pgx must parse: a missing sslcert, hostaddr without host (the
	// addresses then name the hosts, as libpq's PQhost does), requiressl (an sslmode).
	extra, err := v.libpqRewrites()
	if err != nil {
		return nil, err
	}
	if err := v.checkRequireAuth(); err != nil {
		return nil, err
	}
	// pgx parses what was read, never the string itself, with an empty passfile: pgx would look
	// the password file up for the first host and give that password to every host; the
	// connector looks it up per host (passfile.go).
	cfg, pool, poolErr, err := v.parsePgx(v.pgxString(extra))
	if err != nil {
		return nil, fromPgx(err, v)
	}
	switch cfg.SSLNegotiation {
	case "", "postgres", "direct":
	default:
		// pgx keeps any value and treats it as "postgres"; libpq rejects it.
		_, src, _ := v.get("sslnegotiation", "PGSSLNEGOTIATION", false)
		return nil, invalid("sslnegotiation", source{value: cfg.SSLNegotiation, env: src.env, known: true}, "one of postgres, direct")
	}
	s := &Settings{Config: cfg, pool: pool, poolErr: poolErr}
	if cfg.Password == "" { // libpq: a password set but empty reads the file too
		s.passfile = passfilePath(v)
	}
	gssenc, src, _ := v.get("gssencmode", "PGGSSENCMODE", false)
	if s.GSSEncMode, err = negotiation.ParseGSSEncMode(gssenc); err != nil {
		return nil, invalid("gssencmode", src, "one of disable, prefer, require")
	}
	if s.GSSEncMode == negotiation.GSSEncModeRequire && !gssBuilt {
		// libpq built without GSSAPI refuses it before connecting (fe-connect.c,
		// pqConnectOptions2), whatever the host: "gssencmode value "require" invalid when
		// GSSAPI support is not compiled in".
		e := invalid("gssencmode", src, "disable or prefer: "+ErrNoGSS.Error())
		e.err = ErrNoGSS
		return nil, e
	}
	deleg, _, _ := v.get("gssdelegation", "PGGSSDELEGATION", false)
	s.GSSDelegation = negotiation.ParseGSSDelegation(deleg)
	if err := s.libpqKeys(v); err != nil {
		return nil, err
	}
	s.TargetSessionAttrs = targetOf(cfg.ValidateConnect)

	s.Hosts = hostsOf(&cfg.Config)
	if len(s.Hosts) == 0 {
		return nil, &ParseError{Key: "host", msg: "connection string has no host"}
	}
	if err := s.hostaddrs(v); err != nil {
		return nil, err
	}
	if err := s.tlsKeys(v, extra, cfg); err != nil {
		return nil, err
	}
	cfg.RuntimeParams = runtimeParams(cfg.RuntimeParams)
	return s, nil
}

// runtimeParams returns the run-time parameters for the server from what pgx left in
// RuntimeParams: libpq's keys removed unless libpq sends them too, and those it sends only when
// not empty (fe-connect.c, build_startup_packet), client_encoding=auto as UTF8 (libpq picks the
// encoding of the client's locale; pgx reads and writes UTF-8 only), and
// fallback_application_name as application_name when none is given (an empty
// application_name is given: neither is sent).
func runtimeParams(pgxParams map[string]string) map[string]string {
	params := maps.Clone(pgxParams)
	if v, ok := params["client_encoding"]; ok && strings.EqualFold(v, "auto") {
		params["client_encoding"] = "UTF8"
	}
	if v, ok := params["fallback_application_name"]; ok {
		if _, set := params["application_name"]; !set {
			params["application_name"] = v
		}
	}
	for _, k := range keywords {
		if !sentToServer[k.Name] || params[k.Name] == "" {
			delete(params, k.Name)
		}
	}
	return params
}

// TLSCheck returns the server check (root certificate file, chain, host name, CRLs) of s.Hosts[i]'s
// TLS configuration, which a configuration changed by WithTLSConfigFunc is checked by again; nil
// for a host without TLS or a Settings that Parse did not make.
func TLSCheck(s *Settings, i int) *tlspolicy.ServerCheck {
	if i < 0 || i >= len(s.tlsChecks) {
		return nil
	}
	return s.tlsChecks[i]
}

// ClientCertCheck returns the check of the client certificate files (sslcert, sslkey) that
// Hosts' BeforeTLS runs after the server check's, as libpq loads them before its ClientHello
// (tlspolicy.ClientCert.BeforeTLS); nil when there is none to load (sslcertmode=disable, or a
// Settings that Parse did not make). A caller that replaces a host's BeforeTLS for one attempt
// (the root certificates given in memory) runs it in its place.
func ClientCertCheck(s *Settings) func() error {
	if s.clientCert == nil {
		return nil
	}
	return s.clientCert.BeforeTLS
}

// beforeTLS is a host's check before its ClientHello, in libpq's order (initialize_SSL): the
// root certificate file, then the client certificate and key.
func beforeTLS(server *tlspolicy.ServerCheck, client *tlspolicy.ClientCert) func() error {
	if client == nil {
		return server.BeforeTLS
	}
	return func() error {
		if err := server.BeforeTLS(); err != nil {
			return err
		}
		return client.BeforeTLS()
	}
}

// libpqKeys applies the libpq keys pgx does not know, other than hostaddr.
func (s *Settings) libpqKeys(vals *values) error {
	for _, k := range keywords {
		if k.Status != Rejected {
			continue
		}
		// An empty SCRAM key is refused before (checkEmpty).
		if v, _, ok := vals.get(k.Name, k.Env, false); ok && v != "" {
			return &ParseError{Key: k.Name, msg: k.Name + " is not supported: " + k.Note}
		}
	}
	s.OAuth = oauthKeys(vals)
	// libpq built without SSPI ignores gsslib's value; sspi cannot be had off Windows.
	if v, src, ok := vals.get("gsslib", "PGGSSLIB", false); ok && strings.EqualFold(v, "sspi") {
		return &ParseError{Key: "gsslib", Env: src.env, msg: "gsslib=sspi is only available on Windows: use gssapi"}
	}
	if v, src, ok := vals.get("load_balance_hosts", "PGLOADBALANCEHOSTS", false); ok {
		switch v {
		case "disable":
		case "random":
			s.LoadBalanceHosts = true
		default:
			return invalid("load_balance_hosts", src, "one of disable, random")
		}
	}
	if v, _, ok := vals.get("requirepeer", "PGREQUIREPEER", false); ok {
		s.RequirePeer = v
	}
	ka, err := parseKeepalives(vals)
	if err != nil {
		return err
	}
	s.Keepalives = ka
	return nil
}

// tlsKeys applies the libpq TLS keys pgx does not know (tlskeys.go) to every TLS configuration
// pgx built, which the hosts share, and refuses the weak sslmode combinations libpq refuses.
// extra are the keys libpqRewrites added (an sslmode from requiressl counts as given).
func (s *Settings) tlsKeys(vals *values, extra [][2]string, cfg *pgx.ConnConfig) error {
	// An environment variable set to "" is a value here ("no bound"), as in libpq.
	get := func(key, env string) (string, source, bool) { return vals.get(key, env, true) }
	k, err := parseTLSKeys(get)
	if err != nil {
		return err
	}
	mode, src, given := get("sslmode", "PGSSLMODE")
	for _, kv := range extra {
		if kv[0] == "sslmode" {
			mode, given = kv[1], true
		}
	}
	// pgx checks sslmode only for the hosts it builds a TLS configuration for: a connection
	// string of Unix sockets alone (no host at all included) would take any value, where libpq
	// refuses it whatever the hosts (fe-connect.c, pqConnectOptions2: "invalid sslmode value").
	// An empty value is left to pgx (to which PGSSLMODE="" is unset).
	if mode != "" && !slices.Contains(sslModes, mode) {
		return invalid("sslmode", src, oneOf(sslModes))
	}
	k.sslmode = mode
	// The configurations of s.Hosts are those of cfg and its fallbacks (hostsOf), one per host.
	s.tlsChecks = make([]*tlspolicy.ServerCheck, len(s.Hosts))
	s.clientCert = k.client
	for i := range s.Hosts {
		h := &s.Hosts[i]
		h.TLSConfig, s.tlsChecks[i] = k.applyCheck(h.TLSConfig, h.Host)
		if s.tlsChecks[i] != nil {
			h.BeforeTLS = beforeTLS(s.tlsChecks[i], k.client)
		}
	}
	rootcert, _, _ := get("sslrootcert", "PGSSLROOTCERT")
	return checkWeakSSLMode(mode, given && mode != "", cfg.SSLNegotiation, rootcert)
}

// targetOf tells which target_session_attrs pgx parsed from the validation function it chose
// (pgconn/config.go: one exported function per value).
func targetOf(f pgconn.ValidateConnectFunc) negotiation.TargetSessionAttrs {
	if f == nil {
		return negotiation.TargetAny
	}
	p := reflect.ValueOf(f).Pointer()
	for t, g := range map[negotiation.TargetSessionAttrs]pgconn.ValidateConnectFunc{
		negotiation.TargetReadWrite:     pgconn.ValidateConnectTargetSessionAttrsReadWrite,
		negotiation.TargetReadOnly:      pgconn.ValidateConnectTargetSessionAttrsReadOnly,
		negotiation.TargetPrimary:       pgconn.ValidateConnectTargetSessionAttrsPrimary,
		negotiation.TargetStandby:       pgconn.ValidateConnectTargetSessionAttrsStandby,
		negotiation.TargetPreferStandby: pgconn.ValidateConnectTargetSessionAttrsPreferStandby,
	} {
		if reflect.ValueOf(g).Pointer() == p {
			return t
		}
	}
	return negotiation.TargetAny
}

// hostaddrs pairs hostaddr's entries with the hosts (fe-connect.c, pqConnectOptions2: as many
// entries as hosts; an empty one resolves its host; an empty hostaddr is not given).
func (s *Settings) hostaddrs(vals *values) error {
	v, src, ok := vals.get("hostaddr", "PGHOSTADDR", false)
	if !ok || v == "" {
		return nil
	}
	addrs := strings.Split(v, ",")
	if len(addrs) != len(s.Hosts) {
		return &ParseError{Key: "hostaddr", Env: src.env, msg: fmt.Sprintf("could not match %s to %s: give one hostaddr per host",
			plural(len(s.Hosts), "host name"), plural(len(addrs), "hostaddr value"))}
	}
	for i, a := range addrs {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		if s.Hosts[i].UnixSocket() {
			return &ParseError{Key: "hostaddr", Env: src.env, msg: fmt.Sprintf("hostaddr %s is given for the Unix-socket directory %s: give host a name (for TLS and Kerberos) or leave hostaddr's entry empty", shown(a), shown(s.Hosts[i].Host))}
		}
		ip, err := netip.ParseAddr(a)
		if err != nil {
			return invalid("hostaddr", source{value: a, env: src.env, known: true}, "a numeric IPv4 or IPv6 address (or a comma-separated list of them, one per host)")
		}
		s.Hosts[i].HostAddr = ip.String()
	}
	return nil
}

// libpqRewrites returns the keys to add at the end of the connection string so that pgx parses
// what libpq would:
//   - no sslcert and sslkey for pgx: the connector reads them at each connection
//     (tlspolicy.ClientCert), as libpq does (fe-secure-openssl.c, initialize_SSL);
//   - no sslrootcert for pgx (unless "system"): the connector reads the file (internal/tlspolicy);
//   - hostaddr's addresses as the hosts when no host is given (libpq's PQhost);
//   - an empty application_name for PGAPPNAME set to "", which pgx skips;
//   - sslmode for requiressl (fe-connect.c, conninfo_storeval: "1..." is require, anything else
//     prefer; a later sslmode in the string wins). PGREQUIRESSL counts only when sslmode has no
//     value from the string, the service file or PGSSLMODE (conninfo_add_defaults); requiressl in
//     a service file is an error of its reading (servicefile.go), as libpq's parser knows no such key.
func (o *values) libpqRewrites() ([][2]string, error) {
	var extra [][2]string
	cert, certSrc, certOK := o.get("sslcert", "PGSSLCERT", false)
	key, keySrc, keyOK := o.get("sslkey", "PGSSLKEY", false)
	if home, err := os.UserHomeDir(); err == nil {
		if !certOK || cert == "" {
			cert = filepath.Join(home, ".postgresql", "postgresql.crt") // libpq's default, also for an empty value
		}
		if !keyOK || key == "" {
			key = filepath.Join(home, ".postgresql", "postgresql.key")
		}
	}
	// The client certificate is the connector's (tlspolicy.ClientCert, read at each connection):
	// pgx gets neither file, or it would read them here, once, and refuse what libpq reads
	// (DER keys, encrypted PKCS#8, an sslkey missing with no sslcert file).
	extra = append(extra, [2]string{"sslcert", ""}, [2]string{"sslkey", ""})
	// The root certificate file is the connector's, read at each connection (internal/tlspolicy): pgx
	// would read it once, here, and fail on a file that does not exist, where libpq goes on
	// without verifying under sslmode prefer, allow and require. pgx also reads its default,
	// ~/.postgresql/root.crt, when it exists (a FIFO there would hold New forever).
	if root, _, ok := o.get("sslrootcert", "PGSSLROOTCERT", false); ok && root != "" && root != "system" {
		extra = append(extra, [2]string{"sslrootcert", ""})
	} else if home, err := os.UserHomeDir(); !ok && err == nil { // pgx's lookup (pgconn/defaults.go)
		if _, err := os.Stat(filepath.Join(home, ".postgresql", "root.crt")); err == nil {
			extra = append(extra, [2]string{"sslrootcert", ""})
		}
	}
	if addrs, _, ok := o.get("hostaddr", "PGHOSTADDR", false); ok && addrs != "" {
		if host, _, ok := o.get("host", "PGHOST", false); !ok || host == "" {
			extra = append(extra, [2]string{"host", addrs})
		}
	}
	// PGAPPNAME set to "" is an application_name for libpq, which then sends neither it nor
	// fallback_application_name (build_startup_packet); pgx skips the variable.
	if app, src, ok := o.get("application_name", "PGAPPNAME", true); ok && app == "" && src.env != "" {
		extra = append(extra, [2]string{"application_name", ""})
	}
	if v, ok := o.inString("requiressl"); ok {
		if !o.after("requiressl", "sslmode") {
			mode := "prefer"
			if strings.HasPrefix(v.value, "1") {
				mode = "require"
			}
			extra = append(extra, [2]string{"sslmode", mode})
		}
	} else if strings.HasPrefix(os.Getenv("PGREQUIRESSL"), "1") {
		if _, _, ok := o.get("sslmode", "PGSSLMODE", false); !ok {
			extra = append(extra, [2]string{"sslmode", "require"})
		}
	}
	// Unless sslmode is disable, the files are read at each connection, without blocking; one
	// that is not a regular file already fails here (libpq would wait on a FIFO of sslcert for
	// good). sslkey is read only with a certificate, by libpq too.
	mode, _, _ := o.get("sslmode", "PGSSLMODE", false)
	for _, kv := range extra {
		if kv[0] == "sslmode" {
			mode = kv[1]
		}
	}
	if mode != "disable" {
		if err := checkRegularFile("sslcert", certSrc, cert); err != nil {
			return nil, err
		}
		if _, err := os.Stat(cert); err == nil {
			if err := checkRegularFile("sslkey", keySrc, key); err != nil {
				return nil, err
			}
		}
	}
	return extra, nil
}

// pgxString returns what pgx parses, built from what was read and never the connection string
// itself: a keyword/value string of the service's keys (servicefile.go), then the string's keys
// in the order written (a URL's parts decoded as libpq decodes them), which win over them, then
// the pairs added (which win over earlier ones), then an empty passfile (which keeps pgx from
// reading the password file: the connector reads it per host). service and servicefile are
// left out: the connector has read the service (parsePgx keeps pgx from reading PGSERVICE's).
// Every value is quoted, ' and \ escaped, so pgx's reading (pgconn/config.go,
// parseKeywordValueSettings) is this one. requiressl, which pgx does not know, is left out: its
// sslmode is among the pairs (libpqRewrites).
func (v *values) pgxString(pairs [][2]string) string {
	var b strings.Builder
	quote := strings.NewReplacer(`\`, `\\`, `'`, `\'`)
	write := func(k, val string) {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(k + "='" + quote.Replace(val) + "'")
	}
	for _, k := range v.serviceKeys {
		if k != "requiressl" {
			write(k, v.service[k])
		}
	}
	for _, e := range v.str {
		switch e.key {
		case "requiressl", "service", "servicefile":
		default:
			write(e.key, e.src.value)
		}
	}
	for _, p := range pairs {
		write(p[0], p[1])
	}
	write("passfile", "")
	return b.String()
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
