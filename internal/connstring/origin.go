package connstring

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/jackc/pgservicefile"
)

// origin finds where a key's value comes from, with libpq's precedence (fe-connect.c,
// conninfo_add_defaults): the connection string, then the service file's section, then the
// environment variable. pgx merges them the same way, but keeps no trace of where a value came
// from; the keys that change what pgx must parse (requiressl, hostaddr without host, a missing
// sslcert) and the checks of weak sslmode combinations need it.
type origin struct {
	dsn     string
	service map[string]string // the named service's keys, as written in the file; nil without one
}

// newOrigin reads the service file when a service is named (service, else PGSERVICE): servicefile,
// else PGSERVICEFILE, else ~/.pg_service.conf, as pgx does. The error is a *ParseError for a
// service file that exists but is not a regular file (a FIFO would hold pgx's read forever);
// other problems with the file are left to pgx, which reports them.
func newOrigin(dsn string) (*origin, error) {
	o := &origin{dsn: dsn}
	name, ok := o.inString("service")
	if !ok {
		name = os.Getenv("PGSERVICE")
	}
	if name == "" {
		return o, nil
	}
	path, ok := o.inString("servicefile")
	src := source{value: path, known: true}
	if !ok {
		path = os.Getenv("PGSERVICEFILE")
		src = source{value: path, env: "PGSERVICEFILE", known: true}
	}
	if path == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return o, nil
		}
		path = filepath.Join(home, ".pg_service.conf")
		src = source{value: path, known: true}
	}
	if err := checkRegularFile("servicefile", src, path); err != nil {
		return nil, err
	}
	f, err := pgservicefile.ReadServicefile(path)
	if err != nil {
		return o, nil // pgx reports it
	}
	s, err := f.GetService(name)
	if err != nil {
		return o, nil
	}
	o.service = s.Settings
	return o, nil
}

// get returns key's value: from the connection string, else the service file, else env (when
// not ""). emptyEnv says whether an environment variable set to "" is a value.
func (o *origin) get(key, env string, emptyEnv bool) (value string, src source, ok bool) {
	if v, ok := o.inString(key); ok {
		return v, source{value: v, known: true}, true
	}
	if v, ok := o.service[key]; ok {
		return v, source{value: v, known: true, service: true}, true
	}
	if env != "" {
		if v, ok := os.LookupEnv(env); ok && (v != "" || emptyEnv) {
			return v, source{value: v, env: env, known: true}, true
		}
	}
	return "", source{}, false
}

// inString returns key's value in the connection string itself (the last one, as libpq), with a
// URL's host part for host.
func (o *origin) inString(key string) (string, bool) {
	if !isURL(o.dsn) {
		pairs, _ := scanKeywordValue(o.dsn)
		for i := len(pairs) - 1; i >= 0; i-- {
			if pairs[i][0] == key || key == "dbname" && pairs[i][0] == "database" {
				return pairs[i][1], true
			}
		}
		return "", false
	}
	value, found := "", false
	if _, query, ok := strings.Cut(o.dsn, "?"); ok {
		for param := range strings.SplitSeq(query, "&") {
			k, v, _ := strings.Cut(param, "=")
			if k == key {
				if u, err := url.QueryUnescape(v); err == nil {
					value, found = u, true
				}
			}
		}
	}
	if found || key != "host" {
		return value, found
	}
	rest := o.dsn[strings.Index(o.dsn, "://")+3:]
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		rest = rest[:i]
	}
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		rest = rest[i+1:]
	}
	var hosts []string
	for h := range strings.SplitSeq(rest, ",") {
		if h != "" && !strings.HasPrefix(h, ":") {
			hosts = append(hosts, h)
		}
	}
	return strings.Join(hosts, ","), len(hosts) > 0
}
