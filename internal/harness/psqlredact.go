package harness

import (
	"net/url"
	"sort"
	"strings"
)

// redactedPassword replaces a password in what Psql reports.
const redactedPassword = "[password]"

// redactPasswords replaces in text every password that conninfo or env
// (PGPASSWORD) gives. libpq quotes in its messages the connection string
// token it cannot parse, or the whole URI: a password with a bad
// percent-encoding, or any URI with a malformed host, ends up in psql's
// standard error.
func redactPasswords(text, conninfo string, env []string) string {
	secrets := conninfoPasswords(conninfo)
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PGPASSWORD="); ok {
			secrets = append(secrets, v)
		}
	}
	// The longest first, so that a password inside another goes too.
	sort.Slice(secrets, func(i, j int) bool { return len(secrets[i]) > len(secrets[j]) })
	for _, s := range secrets {
		if s != "" {
			text = strings.ReplaceAll(text, s, redactedPassword)
		}
	}
	return text
}

// conninfoPasswords returns the passwords in a connection string, as written
// and as libpq would read them, also from a string that libpq rejects.
func conninfoPasswords(conninfo string) []string {
	if strings.HasPrefix(conninfo, "postgresql://") || strings.HasPrefix(conninfo, "postgres://") {
		return uriPasswords(conninfo)
	}
	return keywordPasswords(conninfo)
}

// uriPasswords returns the password of a URI's user information and of its
// password parameters, raw and percent-decoded (when that works).
func uriPasswords(uri string) []string {
	var raw []string
	rest := uri[strings.Index(uri, "://")+3:]
	authority, query, _ := strings.Cut(rest, "?")
	if i := strings.IndexByte(authority, '/'); i >= 0 {
		authority = authority[:i]
	}
	if i := strings.LastIndexByte(authority, '@'); i >= 0 {
		if _, pw, ok := strings.Cut(authority[:i], ":"); ok {
			raw = append(raw, pw)
		}
	}
	for _, param := range strings.Split(query, "&") {
		k, v, _ := strings.Cut(param, "=")
		if dk, err := url.PathUnescape(k); err == nil {
			k = dk
		}
		if k == "password" {
			raw = append(raw, v)
		}
	}
	out := raw
	for _, v := range raw {
		if d, err := url.PathUnescape(v); err == nil && d != v {
			out = append(out, d)
		}
	}
	return out
}

// keywordPasswords returns the values of the password keyword in a
// keyword/value string, as written (with quotes) and unquoted, scanning as
// libpq does (conninfo_parse) and keeping what it has when the string ends
// early.
func keywordPasswords(s string) []string {
	var out []string
	i := 0
	space := func() {
		for i < len(s) && strings.IndexByte(" \t\n\r\f\v", s[i]) >= 0 {
			i++
		}
	}
	for {
		space()
		if i >= len(s) {
			return out
		}
		start := i
		for i < len(s) && s[i] != '=' && strings.IndexByte(" \t\n\r\f\v", s[i]) < 0 {
			i++
		}
		key := s[start:i]
		space()
		if i >= len(s) || s[i] != '=' {
			return out // libpq stops here too
		}
		i++
		space()
		start = i
		var val strings.Builder
		if i < len(s) && s[i] == '\'' {
			for i++; i < len(s) && s[i] != '\''; i++ {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				val.WriteByte(s[i])
			}
			if i < len(s) {
				i++ // the closing quote
			}
		} else {
			for ; i < len(s) && strings.IndexByte(" \t\n\r\f\v", s[i]) < 0; i++ {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				val.WriteByte(s[i])
			}
		}
		if key == "password" {
			out = append(out, s[start:i], val.String())
		}
	}
}
