package connstring

import (
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"strconv"
	"strings"
	"unicode"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgconnector/pgconnector/negotiation"
)

// ParseError is every error of [Parse] (pgconnector.ParseSettings), and of pgconnector.New but
// for WithKerberos in a build with the pgconnector_nogss tag: a connection string, a PG* environment variable or a service file
// entry that cannot be used. Its message names the key at fault and, when the key takes one of a
// fixed set of values, those values. gssencmode=require in a build with that tag unwraps to
// [ErrNoGSS]; no other ParseError unwraps.
//
// It never holds a secret. A value is shown only when it cannot be one: 64 bytes at most, printable,
// without "=", a quote, a backslash or white space (a key left empty before password=..., as in
// "gssencmode= password=...", takes the rest as its value: that is masked). It does not unwrap to
// pgx's error, whose message may quote the connection string.
type ParseError struct {
	// Key is the connection-string key at fault, as libpq names it: "gssencmode", "sslmode",
	// "port", ... A malformed string names the key when it can (an unclosed quote names the key
	// whose value it opens, a bad escape in a URL's password "password"), else Key is "" (a word
	// without "=", a URL query parameter without "=", or an unknown key after a password not in
	// quotes, which may be part of the password and is not shown).
	Key string
	// Env is the environment variable the bad value came from (PGGSSENCMODE, say), or "".
	Env string

	msg string
	err error // ErrNoGSS, or nil
}

func (e *ParseError) Error() string { return "pgconnector: " + e.msg }

// Unwrap returns [ErrNoGSS] for gssencmode=require in a build with the pgconnector_nogss tag,
// else nil.
func (e *ParseError) Unwrap() error { return e.err }

// invalid is a ParseError for a key whose value is not allowed; must says what it must be.
func invalid(key string, src source, must string) *ParseError {
	msg := "invalid " + key
	if src.known {
		msg += " " + shown(src.value)
	}
	if src.env != "" {
		msg += " (from " + src.env + ")"
	}
	return &ParseError{Key: key, Env: src.env, msg: msg + ": must be " + must}
}

func oneOf(allowed []string) string {
	if len(allowed) == 1 {
		return allowed[0]
	}
	return "one of " + strings.Join(allowed, ", ")
}

// maxShown is the longest value an error shows.
const maxShown = 64

// shown returns value quoted when it cannot hold a secret (see ParseError), else a placeholder.
func shown(value string) string {
	if len(value) > maxShown {
		return "(value not shown)"
	}
	for _, r := range value {
		if r == '=' || r == '\'' || r == '"' || r == '`' || r == '\\' || unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return "(value not shown)"
		}
	}
	return strconv.Quote(value)
}

// Values of the keys pgx validates, for the messages (libpq-connect.html, "Parameter Key Words").
var (
	sslModes            = []string{"disable", "allow", "prefer", "require", "verify-ca", "verify-full"}
	sslCertModes        = []string{"disable", "allow", "require"}
	targetSessionAttrs  = []string{"any", "read-write", "read-only", "primary", "standby", "prefer-standby"}
	channelBindings     = []string{"disable", "prefer", "require"}
	protocolVersions    = []string{"3.0", "3.2", "latest"}
	requireAuthMethods  = "a comma-separated list of password, md5, gss, sspi, scram-sha-256, oauth, none, either all or none of them negated with \"!\", each once"
	keywordValueExample = "key=value pairs separated by white space, values with white space in single quotes"
)

// fromPgx turns an error of pgx.ParseConfig into a ParseError with a message of this package's
// own: pgx's message is not passed on, as it may quote a value or the connection string. Every
// message pgx 5 writes is recognised; one that is not (a newer pgx) gives a message that says
// pgx refused the string, without its text.
//
// v is what was read: the message says where a bad value came from (the string, or an
// environment variable) and shows it when that is safe.
func fromPgx(err error, v *values) *ParseError {
	var pce *pgconn.ParseConfigError
	if !errors.As(err, &pce) {
		return &ParseError{msg: "invalid connection string (pgx's message is not shown: it may quote a value)"}
	}
	inner := errors.Unwrap(pce)
	// pgx's own part of the message, without the connection string: "msg" or "msg (inner)".
	bare := *pce
	bare.ConnString = ""
	msg := strings.TrimPrefix(bare.Error(), "cannot parse ``: ")
	innerMsg := ""
	if inner != nil {
		innerMsg = inner.Error()
		msg = strings.TrimSuffix(msg, " ("+innerMsg+")")
	}
	e := func(key, format string, args ...any) *ParseError {
		return &ParseError{Key: key, msg: fmt.Sprintf(format, args...)}
	}
	// bad is the error for a value of key that is not allowed; pgx quotes some values itself
	// (after prefix, or quoted with %q), the others are looked up in dsn.
	bad := func(key, must, prefix string, quoted bool) *ParseError {
		src := v.sourceOf(key)
		if v, ok := strings.CutPrefix(msg, prefix); ok && prefix != "" {
			if quoted {
				v, _ = strconv.Unquote(v)
			}
			src.value, src.known = v, true
		}
		return invalid(key, src, must)
	}
	switch {
	case msg == "failed to read service":
		switch {
		case strings.HasPrefix(innerMsg, "unable to find service: "):
			return e("service", "service %s is not in the service file (PGSERVICEFILE, servicefile, else ~/.pg_service.conf)",
				shown(strings.TrimPrefix(innerMsg, "unable to find service: ")))
		default:
			return v.serviceFileProblem(strings.TrimPrefix(innerMsg, "failed to read service file: "))
		}
	case msg == "invalid sslcertmode":
		src := v.sourceOf("sslcertmode")
		if v, ok := strings.CutPrefix(innerMsg, "unknown sslcertmode value: "); ok {
			src.value, src.known = v, true
		}
		return invalid("sslcertmode", src, oneOf(sslCertModes))
	case msg == "invalid connect_timeout":
		return bad("connect_timeout", "a whole number of seconds, 0 or more", "", false)
	case msg == "invalid port":
		const must = "a number from 1 to 65535 (or a comma-separated list of them, one per host)"
		if v.portMisplaced {
			return &ParseError{Key: "port", msg: "invalid port (not shown: an \"@\" after the host in the URL means it may be part of a password; " +
				"percent-encode \"@\" and \"/\" in a password: %40, %2F): must be " + must}
		}
		return bad("port", must, "", false)
	case strings.HasPrefix(msg, "could not match ") && strings.HasSuffix(msg, " hosts"):
		var ports, hosts int
		if _, err := fmt.Sscanf(msg, "could not match %d port numbers to %d hosts", &ports, &hosts); err == nil {
			return e("port", "%d ports for %s: give one port for all hosts or one per host", ports, plural(hosts, "host"))
		}
		return e("port", "the number of ports does not match the number of hosts")
	case msg == "failed to configure TLS":
		if innerMsg == "sslmode is invalid" {
			return bad("sslmode", oneOf(sslModes), "", false)
		}
		return tlsProblem(inner, innerMsg)
	case strings.HasPrefix(msg, "unknown target_session_attrs value: "):
		return bad("target_session_attrs", oneOf(targetSessionAttrs), "unknown target_session_attrs value: ", false)
	case strings.HasPrefix(msg, "invalid min_protocol_version: "):
		return bad("min_protocol_version", oneOf(protocolVersions), "invalid min_protocol_version: ", true)
	case strings.HasPrefix(msg, "invalid max_protocol_version: "):
		return bad("max_protocol_version", oneOf(protocolVersions), "invalid max_protocol_version: ", true)
	case msg == "min_protocol_version cannot be greater than max_protocol_version":
		return e("min_protocol_version", "min_protocol_version is greater than max_protocol_version")
	case strings.HasPrefix(msg, "unknown channel_binding value: "):
		return bad("channel_binding", oneOf(channelBindings), "unknown channel_binding value: ", false)
	case msg == "invalid require_auth":
		return bad("require_auth", requireAuthMethods, "", false)
	}
	return e("", "invalid connection string (pgx's message is not shown: it may quote a value)")
}

// checkRequireAuth checks require_auth (or PGREQUIREAUTH, or the service file's) as libpq 18 does
// when it connects, before pgx, whose one message says nothing of the reason: libpq's reason
// (fe-connect.c, pqConnectOptions2; see negotiation.ParseRequireAuth), the element at fault shown
// only when it cannot be part of a secret, and for an unknown method the methods there are.
func (v *values) checkRequireAuth() *ParseError {
	ra, src, ok := v.get("require_auth", "PGREQUIREAUTH", false)
	if !ok {
		return nil
	}
	err := negotiation.ParseRequireAuth(ra)
	if err == nil {
		return nil
	}
	msg := err.Error()
	if src.env != "" {
		msg += " (from " + src.env + ")"
	}
	var rae *negotiation.RequireAuthError
	if errors.As(err, &rae) && rae.Kind == negotiation.RequireAuthUnknown {
		msg += "; require_auth must be " + requireAuthMethods
	}
	return &ParseError{Key: "require_auth", Env: src.env, msg: msg}
}

// keyName is what a connection-string key (or a server setting passed as one) looks like.
var keyName = regexp.MustCompile(`^[a-z_][a-z0-9_.]{0,63}$`)

// sourceOf tells where pgx took the value of key from: the connection string, else the service
// file, else the environment variable the keyword table names for it when that is set.
func (v *values) sourceOf(key string) source {
	env := ""
	for _, k := range keywords {
		if k.Name == key {
			env = k.Env
		}
	}
	_, src, _ := v.get(key, env, false)
	return src
}

// plural is "1 host", "2 hosts".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

// tlsProblem names the TLS key at fault (pgconn/config.go, configTLS). pgx is given no sslcert
// or sslkey (the connector loads them, tlspolicy.ClientCert): only the root certificate's
// problems remain. File errors keep their
// cause (no such file, permission denied) and show the path when it is safe to.
func tlsProblem(inner error, innerMsg string) *ParseError {
	e := func(key, format string, args ...any) *ParseError {
		return &ParseError{Key: key, msg: fmt.Sprintf(format, args...)}
	}
	switch {
	case strings.HasPrefix(innerMsg, "unable to load system certificate pool"):
		return e("sslrootcert", "sslrootcert=system: cannot load the system's certificate authorities")
	case strings.HasPrefix(innerMsg, "unable to read CA file"):
		return e("sslrootcert", "cannot read sslrootcert%s", fileProblem(inner))
	case innerMsg == "unable to add CA to cert pool":
		return e("sslrootcert", "sslrootcert holds no PEM certificate")
	}
	return e("sslmode", "invalid TLS settings (pgx's message is not shown: it may quote a value)")
}

// fileProblem is " PATH: CAUSE" (or "") for a file that could not be read, with the path only when it is
// safe to show (see ParseError).
func fileProblem(err error) string {
	var pe *fs.PathError
	if !errors.As(err, &pe) {
		return ""
	}
	path := shown(pe.Path)
	if path == "(value not shown)" {
		path = "(path not shown)"
	}
	return " " + path + ": " + pe.Err.Error()
}

// serviceFileProblem is the error for a service file that pgx could not read (pgconn/config.go,
// parseServiceSettings, whose message names the file but drops the cause): it names the service,
// the file and why it cannot be read, each when it is safe to show (see ParseError).
func (v *values) serviceFileProblem(path string) *ParseError {
	service := v.serviceName
	msg := "cannot read the service file"
	if p := shown(path); path != "" && p != "(value not shown)" {
		msg += " " + p
	}
	if service.known {
		msg += " for service " + shown(service.value)
		if service.env != "" {
			msg += " (from " + service.env + ")"
		}
	}
	if err := v.serviceErr; path != "" && path == v.servicePath && err != nil {
		// pgx's message drops the reason: the one of the same file's read. pgservicefile's own
		// errors name a line by its number, never its text.
		var pe *fs.PathError
		if errors.As(err, &pe) {
			msg += ": " + pe.Err.Error()
		} else {
			msg += ": " + err.Error()
		}
	}
	msg += " (the file is servicefile, else PGSERVICEFILE, else ~/.pg_service.conf)"
	return &ParseError{Key: "service", Env: service.env, msg: msg}
}
