package pgconnector

import (
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"strconv"
	"strings"
	"unicode"

	"github.com/jackc/pgx/v5/pgconn"
)

// ParseError is every error of [New] and [ParseSettings]: a connection string, a PG* environment
// variable or a service file entry that cannot be used. Its message names the key at fault and,
// when the key takes one of a fixed set of values, those values.
//
// It never holds a secret. A value is shown only when it cannot be one: 64 bytes at most, printable,
// without "=", a quote, a backslash or white space (a key left empty before password=..., as in
// "gssencmode= password=...", takes the rest as its value: that is masked). It does not unwrap to
// pgx's error, whose message may quote the connection string.
type ParseError struct {
	// Key is the connection-string key at fault, as libpq names it: "gssencmode", "sslmode",
	// "port", ... A malformed string names the key when it can (an unclosed quote names the key
	// whose value it opens, a bad escape in a URL's password "password"), else Key is "" (a word
	// without "=", a bad URL host).
	Key string
	// Env is the environment variable the bad value came from (PGGSSENCMODE, say), or "".
	Env string

	msg string
}

func (e *ParseError) Error() string { return "pgconnector: " + e.msg }

// invalidValue is a ParseError for a key whose value is not one of allowed.
func invalidValue(key, env, value string, allowed ...string) *ParseError {
	msg := "invalid " + key + " " + shown(value)
	if env != "" {
		msg += " (from " + env + ")"
	}
	return &ParseError{Key: key, Env: env, msg: msg + ": must be " + oneOf(allowed)}
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
func fromPgx(err error) *ParseError {
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
	switch {
	case msg == "failed to parse as keyword/value":
		if strings.HasPrefix(innerMsg, "unterminated quoted string") {
			if key := unclosedQuoteKey(pce.ConnString); key != "" {
				return e(key, "malformed connection string: the quoted value of %s is not closed with '", key)
			}
		}
		return e("", "malformed connection string: %s", keywordValueProblem(innerMsg))
	case msg == "failed to parse as URL":
		// pgx names the password, and only the password, instead of quoting it.
		if strings.HasSuffix(innerMsg, " in password") || strings.Contains(innerMsg, " in password,") {
			return e("password", "malformed connection URL: %s", urlProblem(innerMsg, "the password"))
		}
		return e("", "malformed connection URL: %s", urlProblem(innerMsg, "it"))
	case msg == "failed to read service":
		switch {
		case strings.HasPrefix(innerMsg, "unable to find service: "):
			return e("service", "service %s is not in the service file (PGSERVICEFILE, servicefile, else ~/.pg_service.conf)",
				shown(strings.TrimPrefix(innerMsg, "unable to find service: ")))
		default:
			return e("service", "cannot read the service file (PGSERVICEFILE, servicefile, else ~/.pg_service.conf)")
		}
	case msg == "invalid sslcertmode":
		return invalidValue("sslcertmode", "", strings.TrimPrefix(innerMsg, "unknown sslcertmode value: "), sslCertModes...)
	case msg == "invalid connect_timeout":
		return e("connect_timeout", "invalid connect_timeout: must be a whole number of seconds, 0 or more")
	case msg == "invalid port":
		return e("port", "invalid port: must be a number from 1 to 65535 (or a comma-separated list of them, one per host)")
	case strings.HasPrefix(msg, "could not match ") && strings.HasSuffix(msg, " hosts"):
		var ports, hosts int
		if _, err := fmt.Sscanf(msg, "could not match %d port numbers to %d hosts", &ports, &hosts); err == nil {
			return e("port", "%d ports for %d hosts: give one port for all hosts or one per host", ports, hosts)
		}
		return e("port", "the number of ports does not match the number of hosts")
	case msg == "failed to configure TLS":
		return tlsProblem(inner, innerMsg)
	case strings.HasPrefix(msg, "unknown target_session_attrs value: "):
		return invalidValue("target_session_attrs", "", strings.TrimPrefix(msg, "unknown target_session_attrs value: "), targetSessionAttrs...)
	case strings.HasPrefix(msg, "invalid min_protocol_version: "):
		v, _ := strconv.Unquote(strings.TrimPrefix(msg, "invalid min_protocol_version: "))
		return invalidValue("min_protocol_version", "", v, protocolVersions...)
	case strings.HasPrefix(msg, "invalid max_protocol_version: "):
		v, _ := strconv.Unquote(strings.TrimPrefix(msg, "invalid max_protocol_version: "))
		return invalidValue("max_protocol_version", "", v, protocolVersions...)
	case msg == "min_protocol_version cannot be greater than max_protocol_version":
		return e("min_protocol_version", "min_protocol_version is greater than max_protocol_version")
	case strings.HasPrefix(msg, "unknown channel_binding value: "):
		return invalidValue("channel_binding", "", strings.TrimPrefix(msg, "unknown channel_binding value: "), channelBindings...)
	case msg == "invalid require_auth":
		return e("require_auth", "invalid require_auth: must be %s", requireAuthMethods)
	}
	return e("", "invalid connection string (pgx's message is not shown: it may quote a value)")
}

// keywordValueProblem says what is wrong with a keyword/value string, from pgx's inner message
// (pgconn/config.go, parseKeywordValueSettings), which quotes the text it stumbled on.
func keywordValueProblem(inner string) string {
	switch {
	case strings.Contains(inner, "NUL byte"):
		return "it holds a NUL byte"
	case strings.HasPrefix(inner, `missing "=" after `):
		return `a word without "=" (the form is ` + keywordValueExample + ")"
	case strings.HasPrefix(inner, "unterminated quoted string"):
		return "a quoted value is not closed with '"
	}
	return "expected " + keywordValueExample
}

// keyName is what a connection-string key (or a server setting passed as one) looks like.
var keyName = regexp.MustCompile(`^[a-z_][a-z0-9_.]{0,63}$`)

// unclosedQuoteKey returns the key whose quoted value is not closed in a keyword/value string,
// read as libpq reads one (fe-connect.c, conninfo_parse): white space between pairs and around
// "=", a backslash escaping the next character in a value. It returns "" when there is none.
func unclosedQuoteKey(s string) string {
	isSpace := func(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f' }
	i := 0
	skip := func() {
		for i < len(s) && isSpace(s[i]) {
			i++
		}
	}
	for {
		skip()
		start := i
		for i < len(s) && s[i] != '=' && !isSpace(s[i]) {
			i++
		}
		key := s[start:i]
		skip()
		if key == "" || i >= len(s) || s[i] != '=' {
			return ""
		}
		i++
		skip()
		quoted := i < len(s) && s[i] == '\''
		if quoted {
			i++
		}
		for ; i < len(s); i++ {
			if s[i] == '\\' {
				i++
			} else if quoted && s[i] == '\'' || !quoted && isSpace(s[i]) {
				break
			}
		}
		if quoted && i >= len(s) {
			if !keyName.MatchString(key) {
				return "" // not a key name: a stray word, maybe a secret
			}
			return key
		}
		i++
		if i >= len(s) {
			return ""
		}
	}
}

// urlProblem says what is wrong with a postgres:// URL, from pgx's inner message
// (pgconn/parse_url.go), which may quote a part of the URL; subject is the part at fault, as far
// as known ("it", "the password").
func urlProblem(inner, subject string) string {
	switch {
	case strings.Contains(inner, "NUL byte"), strings.Contains(inner, "%00"):
		return subject + " holds a NUL byte"
	case strings.Contains(inner, "percent-encoded token"):
		return subject + " has a bad percent-encoding (% must be followed by two hexadecimal digits)"
	case strings.HasPrefix(inner, "unexpected spaces"):
		return subject + " has white space (write %20)"
	case strings.Contains(inner, "IPv6 host address"):
		return "an IPv6 host address in [] is empty or not closed"
	case strings.HasPrefix(inner, "unexpected character"):
		return `an unexpected character after a host (expected ":" or "/")`
	case strings.HasPrefix(inner, "missing key/value separator"):
		return `a query parameter without "="`
	case strings.HasPrefix(inner, "extra key/value separator"):
		return `a query parameter with more than one "="`
	}
	return "not a valid postgres:// or postgresql:// URL"
}

// tlsProblem names the TLS key at fault (pgconn/config.go, configTLS). File errors keep their
// cause (no such file, permission denied) and show the path when it is safe to.
func tlsProblem(inner error, innerMsg string) *ParseError {
	e := func(key, format string, args ...any) *ParseError {
		return &ParseError{Key: key, msg: fmt.Sprintf(format, args...)}
	}
	switch {
	case innerMsg == "sslmode is invalid":
		// pgx does not say which value; sslmode comes from the string, PGSSLMODE or a service file.
		return &ParseError{Key: "sslmode", msg: "invalid sslmode: must be " + oneOf(sslModes)}
	case innerMsg == `both "sslcert" and "sslkey" are required`:
		return e("sslkey", "sslcert and sslkey must be given together")
	case strings.HasPrefix(innerMsg, "unable to load system certificate pool"):
		return e("sslrootcert", "sslrootcert=system: cannot load the system's certificate authorities")
	case strings.HasPrefix(innerMsg, "unable to read CA file"):
		return e("sslrootcert", "cannot read sslrootcert%s", fileProblem(inner))
	case innerMsg == "unable to add CA to cert pool":
		return e("sslrootcert", "sslrootcert holds no PEM certificate")
	case strings.HasPrefix(innerMsg, "unable to resolve sslcert"), strings.HasPrefix(innerMsg, "unable to read cert"):
		return e("sslcert", "cannot read sslcert%s", fileProblem(inner))
	case strings.HasPrefix(innerMsg, "unable to load cert"):
		return e("sslcert", "sslcert and sslkey do not make a certificate and its key")
	case strings.HasPrefix(innerMsg, "unable to resolve sslkey"), strings.HasPrefix(innerMsg, "unable to read sslkey"):
		return e("sslkey", "cannot read sslkey%s", fileProblem(inner))
	case innerMsg == "failed to decode sslkey":
		return e("sslkey", "sslkey holds no PEM key")
	case strings.HasPrefix(innerMsg, "unable to find sslpassword"):
		return e("sslpassword", "sslkey is encrypted and no sslpassword is given")
	case strings.HasPrefix(innerMsg, "unable to decrypt key"):
		return e("sslpassword", "sslkey cannot be decrypted with sslpassword")
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
