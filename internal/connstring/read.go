package connstring

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/jackc/pgservicefile"
)

// source is where a key's value came from: the connection string, the service file or the
// environment variable env; known says whether value is the value (a URL's value that does not
// decode is not known).
type source struct {
	value, env string
	known      bool
	service    bool // from the service file
}

// values is a connection string read once: the string's keys in the order written, the named
// service's section of the service file, and the environment, looked up with libpq's precedence
// (fe-connect.c, conninfo_add_defaults): the string, then the service file, then the environment
// variable. Everything Parse decides, and every error it writes, reads its keys here; only pgx
// parses the string again, for its own configuration.
type values struct {
	dsn   string
	isURL bool

	// str are the string's keys in the order written (the last one of a key wins, as in libpq).
	// A URL's host list and ports come first, as host and port, then its query parameters.
	str []struct {
		key string
		src source
	}
	// unclosed is the key whose quoted value is not closed (keyword/value); malformed says the
	// reading stopped before the end (pgx then fails before it reads any file); emptyLast says
	// the string ends with a key and "=" and nothing after.
	unclosed  string
	malformed bool
	emptyLast bool
	// portMisplaced: a URL whose port may be part of a password (see urlPortMisplaced).
	portMisplaced bool

	service     map[string]string // the named service's keys; nil without one
	serviceName source            // service, else PGSERVICE; known=false without one
	servicePath string            // the service file read, or ""
	serviceErr  error             // why it could not be read (its messages name no line's text)
}

// read reads dsn, the service file it names (service, else PGSERVICE: servicefile, else
// PGSERVICEFILE, else ~/.pg_service.conf, as pgx finds it) and nothing else: the environment
// is looked up per key. The error is a *ParseError for a service file that exists but is not a
// regular file (a FIFO would hold pgx's read forever); other problems with the file are kept for
// the message of pgx's error (serviceFileProblem).
func read(dsn string) (*values, error) {
	v := &values{dsn: dsn, isURL: isURL(dsn)}
	if v.isURL {
		v.readURL()
	} else {
		v.readKeywordValue()
	}
	name, ok := v.inString("service")
	if !ok {
		if e := os.Getenv("PGSERVICE"); e != "" {
			name = source{value: e, env: "PGSERVICE", known: true}
		}
	}
	v.serviceName = name
	if name.value == "" {
		v.serviceName = source{}
		return v, nil
	}
	src, ok := v.inString("servicefile")
	if !ok {
		src = source{value: os.Getenv("PGSERVICEFILE"), env: "PGSERVICEFILE", known: true}
	}
	path := src.value
	if path == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return v, nil
		}
		path = filepath.Join(home, ".pg_service.conf")
		src = source{value: path, known: true}
	}
	if err := checkRegularFile("servicefile", src, path); err != nil {
		return nil, err
	}
	v.servicePath = path
	f, err := pgservicefile.ReadServicefile(path)
	if err != nil {
		v.serviceErr = err
		return v, nil // pgx reports it
	}
	if s, err := f.GetService(name.value); err == nil {
		v.service = s.Settings
	}
	return v, nil
}

func (v *values) add(key string, src source) {
	v.str = append(v.str, struct {
		key string
		src source
	}{key, src})
}

// readKeywordValue reads a keyword/value string as libpq does (fe-connect.c, conninfo_parse):
// white space between pairs and around "=", values in single quotes or up to white space, a
// backslash taking the next character literally; up to the first malformed part.
func (v *values) readKeywordValue() {
	pairs, unclosed, complete := scanKeywordValue(v.dsn)
	for _, p := range pairs {
		v.add(p[0], source{value: p[1], known: true})
	}
	v.unclosed, v.malformed = unclosed, !complete
	// An unpaired backslash at the end escapes the end of the string: libpq and pgx drop it.
	end := v.dsn
	if n := len(end) - len(strings.TrimRight(end, `\`)); n%2 == 1 {
		end = end[:len(end)-1]
	}
	v.emptyLast = unclosed == "" && len(pairs) > 0 && pairs[len(pairs)-1][1] == "" &&
		strings.HasSuffix(strings.TrimRight(end, " \t\n\r\v\f"), "=")
}

// readURL reads a postgres:// URL's host list, ports and query parameters, decoded as pgx and
// libpq decode them (pgconn/parse_url.go; fe-connect.c, conninfo_uri_parse_options).
func (v *values) readURL() {
	netloc := netlocOf(v.dsn)
	var hosts []string
	for hp := range strings.SplitSeq(netloc, ",") {
		h := hp
		if strings.HasPrefix(hp, "[") {
			if end := strings.IndexByte(hp, ']'); end >= 0 {
				h = hp[:end+1]
			}
		} else if i := strings.IndexByte(hp, ':'); i >= 0 {
			h = hp[:i]
		}
		if h != "" {
			hosts = append(hosts, h)
		}
	}
	if len(hosts) > 0 {
		v.add("host", source{value: strings.Join(hosts, ","), known: true})
	}
	if ports, ok := urlPorts(v.dsn); ok {
		v.add("port", source{value: ports, known: true})
	} else if strings.Contains(netloc, ":") {
		v.add("port", source{}) // a port that does not decode
	}
	v.portMisplaced = urlPortMisplaced(v.dsn)
	if _, query, ok := strings.Cut(v.dsn, "?"); ok {
		for param := range strings.SplitSeq(query, "&") {
			k, val, _ := strings.Cut(param, "=")
			d, err := url.QueryUnescape(val)
			v.add(k, source{value: d, known: err == nil})
		}
	}
}

// netlocOf returns the host list of a postgres:// URL as libpq reads it (fe-connect.c,
// conninfo_uri_parse_options): after the user information (up to the first "@" before any "/")
// and up to the path ("/") or the query ("?").
func netlocOf(dsn string) string {
	p, ok := strings.CutPrefix(dsn, "postgresql://")
	if !ok {
		p, _ = strings.CutPrefix(dsn, "postgres://")
	}
	if i := strings.IndexAny(p, "@/"); i >= 0 && p[i] == '@' {
		p = p[i+1:]
	}
	if i := strings.IndexAny(p, "/?"); i >= 0 {
		p = p[:i]
	}
	return p
}

// urlPorts returns the ports of a postgres:// URL's hosts, comma-separated as pgx joins them
// (pgconn/parse_url.go; "" for a host without one), percent-decoded; ok is false when no host has
// a port or one does not decode. A port is the text after a ":" that follows a host name or a
// bracketed IPv6 address.
func urlPorts(dsn string) (ports string, ok bool) {
	var list []string
	found := false
	for hp := range strings.SplitSeq(netlocOf(dsn), ",") {
		if strings.HasPrefix(hp, "[") {
			end := strings.IndexByte(hp, ']')
			if end < 0 {
				return "", false
			}
			hp = hp[end+1:]
		}
		_, port, has := strings.Cut(hp, ":")
		found = found || has
		list = append(list, port)
	}
	if !found {
		return "", false
	}
	joined, err := url.PathUnescape(strings.Join(list, ","))
	if err != nil {
		return "", false
	}
	return joined, true
}

// urlPortMisplaced reports whether a postgres:// URL's port may be part of a password: an "@"
// after the user information means a password with an "@", "/" or "?" that is not
// percent-encoded, which libpq and pgx then read (in part) as a host and its port
// (postgres://u:se/cret@h has the host "u" and the port "se").
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
		pairs = append(pairs, [2]string{key, v.String()})
		if i++; i >= len(s) {
			return pairs, "", true
		}
	}
}

func isURL(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")
}
