package connstring

import (
	"regexp"
	"strings"
)

// The keys a connection string may hold. libpq refuses any key it does not know before it
// connects (fe-connect.c, conninfo_storeval: `invalid connection option "..."`; in a URL's query,
// conninfo_uri_parse_params: `invalid URI query parameter: "..."`; in a service file,
// parseServiceFile: "syntax error in service file"), so a misspelt key (sslmdoe=verify-full) can
// never turn a check off. pgx instead sends every key it does not know to the server as a
// run-time parameter, after authentication (the password already sent). The connector takes:
//   - libpq's keywords (the keyword table, [Keywords]);
//   - pgx's own keys, which strings written for pgx carry: database (dbname), krbspn,
//     servicefile, statement_cache_capacity, description_cache_capacity,
//     default_query_exec_mode and pgxpool's pool_* keys;
//   - server parameters, sent to the server in the StartupMessage as pgx sends them: the names
//     of PostgreSQL 15 to 18's parameters that a client may set at connection start
//     (serverParameters; any letter case, as the server reads them) and dotted custom names
//     (myapp.tenant: guc.c, valid_custom_variable_name);
//
// and refuses every other key, before any file is read or connection opened, naming the key
// (unless it follows a password, of which it may be a part) and the nearest libpq keyword.

// pgxKeys are pgx's (pgconn/config.go, conn.go, pgxpool/pool.go) keys that are not libpq's.
var pgxKeys = map[string]bool{
	"database": true, "krbspn": true, "servicefile": true,
	"statement_cache_capacity": true, "description_cache_capacity": true, "default_query_exec_mode": true,
}

// customParameter is a dotted custom parameter name (guc.c, valid_custom_variable_name: each
// part a letter or underscore, then letters, digits, underscores or dollars).
var customParameter = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_$]*(\.[A-Za-z_][A-Za-z0-9_$]*)+$`)

// knownKey reports whether a connection string may hold key (see above).
func knownKey(key string) bool {
	if _, ok := keywordIndex[key]; ok || pgxKeys[key] {
		return true
	}
	if _, ok := poolKeys[key]; ok {
		return true
	}
	if serverParameters[strings.ToLower(key)] {
		return true
	}
	// A dotted name that is a libpq keyword with dots in it, or one edit from one (ssl.mode),
	// is a misspelt keyword, not a custom parameter.
	return customParameter.MatchString(key) && !nearKeyword(strings.ReplaceAll(key, ".", ""))
}

// nearKeyword reports whether key is at most one edit from a libpq keyword.
func nearKeyword(key string) bool {
	for _, k := range keywords {
		if editDistance(strings.ToLower(key), k.Name) <= 1 {
			return true
		}
	}
	return false
}

// keywordIndex finds a libpq keyword's row in the table.
var keywordIndex = func() map[string]int {
	m := make(map[string]int, len(keywords))
	for i, k := range keywords {
		m[k.Name] = i
	}
	return m
}()

// checkKeys refuses the first key of the string that it may not hold (knownKey).
func (v *values) checkKeys() *ParseError {
	for i, e := range v.str {
		if knownKey(e.key) {
			continue
		}
		// In keyword/value form, a word after a password not in quotes may be the rest of a
		// password with white space: not shown.
		hidden := !v.isURL && i > 0 && isSecretKey(v.str[i-1].key) && !v.str[i-1].src.quoted
		what := "invalid connection option"
		if v.isURL {
			what = "invalid URI query parameter"
		}
		return unknownKeyError(e.key, what, hidden)
	}
	return nil
}

func isSecretKey(key string) bool {
	return key == "password" || key == "sslpassword" || key == "oauth_client_secret"
}

// unknownKeyError is the error for a key the string may not hold.
func unknownKeyError(key, what string, hidden bool) *ParseError {
	msg := what
	e := &ParseError{}
	switch shownKey := shown(key); {
	case hidden:
		msg += " after the password (not shown: a password with white space must be in single quotes)"
	case key == "":
		msg += ` "" (a key before "=" is empty)`
	case shownKey == "(value not shown)":
		msg += " (not shown: it is not a key name)"
	default:
		msg += " " + shownKey
		e.Key = key
	}
	if near := nearestKeyword(key); near != "" {
		msg += ": did you mean " + near + "?"
	} else {
		msg += ": not a libpq keyword, nor a server parameter a client may set at connection start"
	}
	e.msg = msg + " (a key must be a libpq keyword, one of pgx's, or a server parameter such as search_path or a dotted custom name: see docs/connection-strings.md)"
	return e
}

// nearestKeyword returns the libpq keyword closest to key, when it is close enough to be what
// was meant (at most two edits, a swap of neighbours counting as one, and at most a third of
// the key's length), else "".
func nearestKeyword(key string) string {
	if key == "ssl" { // JDBC's key: libpq takes ssl=true in a URL only
		return "sslmode (ssl=true, in a URL only, means sslmode=require)"
	}
	best, bestD := "", 3
	for _, k := range keywords {
		if d := editDistance(strings.ToLower(key), k.Name); d < bestD && 3*d <= len(key) {
			best, bestD = k.Name, d
		}
	}
	return best
}

// editDistance is the optimal string alignment distance of a and b (insertions, deletions,
// substitutions and swaps of adjacent bytes).
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// IsServerParameter reports whether name is in the list of server parameters a connection
// string may carry (serverParameters, any letter case); for the test that checks the list
// against the installed servers.
func IsServerParameter(name string) bool { return serverParameters[strings.ToLower(name)] }

// ServerParameters returns the list, lower-cased, in no order.
func ServerParameters() []string {
	names := make([]string, 0, len(serverParameters))
	for n := range serverParameters {
		names = append(names, n)
	}
	return names
}
