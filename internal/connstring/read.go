package connstring

import (
	"os"
	"strings"
)

// source is where a key's value came from: the connection string, the service file or the
// environment variable env; known says whether value is the value (a URL's value that does not
// decode is not known).
type source struct {
	value, env string
	known      bool
	service    bool // from the service file
	quoted     bool // a keyword/value string's value in single quotes
}

// values is a connection string read once: the string's keys in the order written, the named
// service's section of the service file, and the environment, looked up with libpq's precedence
// (fe-connect.c, conninfo_add_defaults): the string, then the service file, then the environment
// variable. Everything Parse decides, every error it writes and the configuration pgx builds
// (pgxString) read its keys here: pgx never sees the connection string itself.
type values struct {
	dsn   string
	isURL bool

	// str are the string's keys in the order written (the last one of a key wins, as in libpq),
	// each value as libpq reads it (a URL's parts percent-decoded). A URL's user, password, host
	// list, ports and database come first, then its query parameters.
	str []struct {
		key string
		src source
	}
	// portMisplaced: a URL whose port may be part of a password (see urlPortMisplaced).
	portMisplaced bool

	service     map[string]string // the named service's keys; nil without one
	serviceKeys []string          // service's keys in the order written
	serviceName source            // service, else PGSERVICE; known=false without one
	servicePath string            // the service file the service was found in, or ""
	serviceErr  error             // a problem of pgx's own service read (none: see pgxString)
}

// read reads dsn as libpq reads it (keyword/value or URL: a malformed string is an error here,
// before any file is read), checks its keys (checkKeys: a key libpq does not know is an error
// unless it is one of pgx's or a server parameter), then the service's section of the service
// files (service, else PGSERVICE; servicefile.go: the user's file, then
// $PGSYSCONFDIR/pg_service.conf) and nothing else: the environment is looked up per key. The
// error is a *ParseError; a service file that exists but is not a regular file is one too (a
// FIFO would hold the read forever).
func read(dsn string) (*values, error) {
	v := &values{dsn: dsn, isURL: isURL(dsn)}
	if err := v.readString(); err != nil {
		return nil, err
	}
	if err := v.checkKeys(); err != nil {
		return nil, err
	}
	name, ok := v.inString("service")
	if !ok {
		// libpq: PGSERVICE set, even to "", names a service (parseServiceInfo).
		e, set := os.LookupEnv("PGSERVICE")
		if !set {
			return v, nil
		}
		name = source{value: e, env: "PGSERVICE", known: true}
	}
	v.serviceName = name
	if err := v.readService(name); err != nil {
		return nil, err
	}
	return v, nil
}

// readString reads the string itself, keyword/value or URL.
func (v *values) readString() *ParseError {
	if strings.IndexByte(v.dsn, 0) >= 0 {
		// libpq reads a C string, which ends at a NUL; a Go string goes on, and the server would
		// take the NUL for the end of a startup parameter.
		if v.isURL {
			return &ParseError{msg: "malformed connection URL: it holds a NUL byte"}
		}
		return &ParseError{msg: "malformed connection string: it holds a NUL byte"}
	}
	if v.isURL {
		return v.readURL()
	}
	return v.readKeywordValue()
}

func (v *values) add(key string, src source) {
	v.str = append(v.str, struct {
		key string
		src source
	}{key, src})
}

// readKeywordValue reads a keyword/value string as libpq does (fe-connect.c, conninfo_parse):
// white space between pairs and around "=", values in single quotes or up to white space, a
// backslash taking the next character literally. A malformed string is an error that names no
// part of it but a key name (a stray word may be a secret).
func (v *values) readKeywordValue() *ParseError {
	pairs, unclosed, complete := scanPairs(v.dsn)
	for _, p := range pairs {
		v.add(p.key, source{value: p.value, known: true, quoted: p.quoted})
	}
	switch {
	case unclosed != "" && keyName.MatchString(unclosed):
		return &ParseError{Key: unclosed, msg: "malformed connection string: the quoted value of " + unclosed + " is not closed with '"}
	case unclosed != "":
		return &ParseError{msg: "malformed connection string: a quoted value is not closed with '"}
	case !complete:
		return &ParseError{msg: `malformed connection string: a word without "=" (the form is ` + keywordValueExample + ")"}
	}
	return nil
}

// readURL reads a postgres:// or postgresql:// URL as libpq does (fe-connect.c,
// conninfo_uri_parse_options and conninfo_uri_parse_params):
//
//	postgresql://[user[:password]@][host][:port][,...][/dbname][?key=value&...]
//
// The user information ends at the first "@" before any "/" (so "?", "&" and "=" may stand in a
// password unencoded; "@" and "/" may not), the user at its first ":"; a host ends at ":", "/",
// "?" or ",", or is an IPv6 address in brackets; a port ends at "/", "?" or ","; the database
// at "?"; the query is split at "&", each parameter at its one "="; every part is then
// decoded as libpq 18 decodes it (uriDecode: spaces around it dropped, a space inside refused, a
// "%" followed by two hexadecimal digits, %00 refused, "+" a plus sign). ssl=true is sslmode=require. An empty user, password or database is not set.
func (v *values) readURL() *ParseError {
	rest, ok := strings.CutPrefix(v.dsn, "postgresql://")
	if !ok {
		rest, _ = strings.CutPrefix(v.dsn, "postgres://")
	}
	v.portMisplaced = urlPortMisplaced(v.dsn)
	add := func(key, raw string) *ParseError {
		d, problem := uriDecode(raw)
		if problem != "" {
			return urlError(key, problem)
		}
		v.add(key, source{value: d, known: true})
		return nil
	}
	if i := strings.IndexAny(rest, "@/"); i >= 0 && rest[i] == '@' {
		user, password, hasPassword := strings.Cut(rest[:i], ":")
		rest = rest[i+1:]
		if user != "" {
			if err := add("user", user); err != nil {
				return err
			}
		}
		if hasPassword && password != "" {
			if err := add("password", password); err != nil {
				return err
			}
		}
	}
	var hosts, ports strings.Builder
	var term byte // what ended the last part read: 0 at the end of the URL
	next := func(stops string) string {
		i := strings.IndexAny(rest, stops)
		if i < 0 {
			part := rest
			rest, term = "", 0
			return part
		}
		part := rest[:i]
		rest, term = rest[i+1:], rest[i]
		return part
	}
	for {
		if strings.HasPrefix(rest, "[") {
			end := strings.IndexByte(rest, ']')
			switch {
			case end < 0:
				return urlError("host", "an IPv6 host address in [] is not closed")
			case end == 1:
				return urlError("host", "an IPv6 host address in [] is empty")
			}
			hosts.WriteString(rest[1:end])
			rest = rest[end+1:]
			if rest != "" && !strings.ContainsRune(":/?,", rune(rest[0])) {
				return urlError("host", `an unexpected character after a host (expected ":" or "/")`)
			}
			term = 0
			if rest != "" {
				rest, term = rest[1:], rest[0]
			}
		} else {
			hosts.WriteString(next(":/?,"))
		}
		if term == ':' {
			ports.WriteString(next("/?,"))
		}
		if term != ',' {
			break
		}
		hosts.WriteByte(',')
		ports.WriteByte(',')
	}
	if strings.Contains(hosts.String(), "@") {
		// libpq would look the host up by that name, the rest of a password with it
		// (postgres://u:p@ss@h): refused, and not shown.
		return urlError("host", `an "@" in a host (percent-encode "@" in a password: %40)`)
	}
	if hosts.Len() > 0 {
		if err := add("host", hosts.String()); err != nil {
			return err
		}
	}
	if ports.Len() > 0 {
		if err := add("port", ports.String()); err != nil {
			return err
		}
	}
	if term == '/' {
		if db := next("?"); db != "" {
			if err := add("dbname", db); err != nil {
				return err
			}
		}
	}
	if term != '?' {
		return nil
	}
	for rest != "" {
		param := next("&")
		k, val, ok := strings.Cut(param, "=")
		switch {
		case !ok:
			return urlError("", `a query parameter without "="`)
		case strings.Contains(val, "="):
			return urlError("", `a query parameter with more than one "="`)
		}
		key, problem := uriDecode(k)
		if problem != "" {
			return urlError("", problem)
		}
		value, problem := uriDecode(val)
		if problem != "" {
			if !keyName.MatchString(key) {
				key = "" // not a key name: not shown
			}
			return urlError(key, problem)
		}
		if key == "ssl" && value == "true" { // libpq's (and JDBC's) alias
			key, value = "sslmode", "require"
		}
		v.add(key, source{value: value, known: true})
	}
	return nil
}

// uriDecode percent-decodes a part of a URL as libpq 18 does (fe-connect.c, conninfo_uri_decode):
// spaces before and after the part are dropped, a space within it is refused (percent-encode it
// as %20), "%" and two hexadecimal digits (either case) is a byte, %00 is refused, anything else
// is kept as it is ("+" too). problem says what is wrong, without quoting the part.
func uriDecode(s string) (decoded, problem string) {
	s = strings.TrimLeft(s, " ")
	if end := strings.TrimRight(s, " "); strings.Contains(end, " ") {
		return "", "has white space inside (write %20)"
	} else {
		s = end
	}
	if !strings.Contains(s, "%") {
		return s, ""
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		hi, okHi := unhex(s, i+1)
		lo, okLo := unhex(s, i+2)
		if !okHi || !okLo {
			return "", "has a bad percent-encoding (% must be followed by two hexadecimal digits)"
		}
		if c := hi<<4 | lo; c == 0 {
			return "", "holds a NUL byte (%00)"
		} else {
			b.WriteByte(c)
		}
		i += 2
	}
	return b.String(), ""
}

func unhex(s string, i int) (byte, bool) {
	if i >= len(s) {
		return 0, false
	}
	switch c := s[i]; {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// urlError is the error for a malformed URL: key is the part at fault ("" when not known),
// problem what is wrong with it; nothing of the URL is quoted.
func urlError(key, problem string) *ParseError {
	subject := "it"
	switch key {
	case "user", "password", "host", "port":
		subject = "the " + key
	case "dbname":
		subject = "the database name"
	case "":
	default:
		subject = "the value of " + key
	}
	if strings.HasPrefix(problem, "has ") || strings.HasPrefix(problem, "holds ") {
		problem = subject + " " + problem
	}
	return &ParseError{Key: key, msg: "malformed connection URL: " + problem}
}

// urlPortMisplaced reports whether a postgres:// URL's port may be part of a password: an "@"
// after the user information means a password with an "@" or "/" that is not percent-encoded,
// which libpq (and pgx) then read (in part) as a host and its port (postgres://u:se/cret@h has
// the host "u" and the port "se").
func urlPortMisplaced(dsn string) bool {
	p, ok := strings.CutPrefix(dsn, "postgresql://")
	if !ok {
		if p, ok = strings.CutPrefix(dsn, "postgres://"); !ok {
			return false
		}
	}
	if i := strings.IndexAny(p, "@/"); i >= 0 && p[i] == '@' {
		p = p[i+1:]
	}
	return strings.Contains(p, "@")
}

// inString returns key's value in the connection string itself (the last one, as libpq); dbname
// is also written database.
func (v *values) inString(key string) (source, bool) {
	for i := len(v.str) - 1; i >= 0; i-- {
		if k := v.str[i].key; k == key || key == "dbname" && k == "database" {
			return v.str[i].src, true
		}
	}
	return source{}, false
}

// get returns key's value: from the connection string, else the service file, else env (when
// not ""). emptyEnv says whether an environment variable set to "" is a value.
func (v *values) get(key, env string, emptyEnv bool) (value string, src source, ok bool) {
	if s, ok := v.inString(key); ok {
		return s.value, s, true
	}
	if s, ok := v.service[key]; ok {
		return s, source{value: s, known: true, service: true}, true
	}
	if env != "" {
		if e, ok := os.LookupEnv(env); ok && (e != "" || emptyEnv) {
			return e, source{value: e, env: env, known: true}, true
		}
	}
	return "", source{}, false
}

// after reports whether the string sets later after key (the later of the two wins).
func (v *values) after(key, later string) bool {
	at, after := -1, false
	for i, s := range v.str {
		switch s.key {
		case key:
			at, after = i, false
		case later:
			after = at >= 0
		}
	}
	return after
}

// scanKeywordValue reads a keyword/value string as libpq does (fe-connect.c, conninfo_parse):
// white space between pairs and around "=", values in single quotes or up to white space, a
// backslash taking the next character literally. It returns the pairs read, in order, up to the
// first malformed part; unclosed is the key of a quoted value that is not closed; complete says
// the whole string was read.
func scanKeywordValue(s string) (pairs [][2]string, unclosed string, complete bool) {
	read, unclosed, complete := scanPairs(s)
	for _, p := range read {
		pairs = append(pairs, [2]string{p.key, p.value})
	}
	return pairs, unclosed, complete
}

// pair is a key and its value as scanPairs reads them; quoted says the value was in quotes.
type pair struct {
	key, value string
	quoted     bool
}

// scanPairs is scanKeywordValue, with whether each value was quoted.
func scanPairs(s string) (pairs []pair, unclosed string, complete bool) {
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
			return pairs, "", key == "" && i >= len(s)
		}
		i++
		skip()
		quoted := i < len(s) && s[i] == '\''
		if quoted {
			i++
		}
		var v strings.Builder
		for ; i < len(s); i++ {
			if s[i] == '\\' {
				if i++; i < len(s) {
					v.WriteByte(s[i])
				}
				continue
			}
			if quoted && s[i] == '\'' || !quoted && isSpace(s[i]) {
				break
			}
			v.WriteByte(s[i])
		}
		if quoted && i >= len(s) {
			return pairs, key, false
		}
		pairs = append(pairs, pair{key, v.String(), quoted})
		if i++; i >= len(s) {
			return pairs, "", true
		}
	}
}

func isURL(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")
}
