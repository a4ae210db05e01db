package ccache

import (
	"fmt"
	"os"
	"os/user"
	"path"
	"runtime"
	"strconv"
	"strings"
)

// DefaultCCacheName is MIT's build default of the default cache name (DEFCCNAME in
// configure.ac), before expansion.
const DefaultCCacheName = "FILE:/tmp/krb5cc_%{uid}"

// DefaultName returns the name of the default credential cache as krb5_cc_default_name
// (MIT os/ccdefname.c) finds it:
//
//  1. the environment variable KRB5CCNAME, verbatim (MIT does not expand it);
//  2. else defaultCCacheName, the [libdefaults] default_ccache_name of krb5.conf, expanded
//     with Expand;
//  3. else DefaultCCacheName expanded, "FILE:/tmp/krb5cc_<uid>".
//
// getenv is os.Getenv or a stand-in. An empty KRB5CCNAME counts as unset (MIT would take the
// empty name and fail on it). The errors are those of Expand.
func DefaultName(getenv func(string) string, defaultCCacheName string) (string, error) {
	if getenv != nil {
		if v := getenv("KRB5CCNAME"); v != "" {
			return v, nil
		}
	}
	if defaultCCacheName != "" {
		return Expand(defaultCCacheName)
	}
	return Expand(DefaultCCacheName)
}

// Build directories of MIT krb5 as Debian and Ubuntu install it, for %{LIBDIR}, %{BINDIR} and
// %{SBINDIR}. MIT substitutes its own configure-time paths; on other systems they differ
// (/usr/lib64 on Fedora, /usr/local/lib from source), which matters only for names that use
// these tokens (rare in cache names).
var (
	expandLibDir  = path.Join("/usr/lib", debianMultiarch())
	expandBinDir  = "/usr/bin"
	expandSbinDir = "/usr/sbin"
)

// expandTokens is the Unix token table of MIT's expand_path.c, in its order: a token is found
// by comparing only as many bytes as were written, so a prefix matches the first entry it
// begins (%{u} is %{username}, %{LIB} is %{LIBDIR}). Expand keeps that quirk, so that a name
// expands to the cache MIT uses.
var expandTokens = []struct {
	name   string
	expand func() (string, error)
}{
	{"LIBDIR", func() (string, error) { return expandLibDir, nil }},
	{"BINDIR", func() (string, error) { return expandBinDir, nil }},
	{"SBINDIR", func() (string, error) { return expandSbinDir, nil }},
	{"euid", func() (string, error) { return strconv.Itoa(os.Geteuid()), nil }},
	{"username", expandUsername},
	{"TEMP", func() (string, error) {
		if d := os.Getenv("TMPDIR"); d != "" {
			return d, nil
		}
		return "/tmp", nil
	}},
	{"USERID", func() (string, error) { return strconv.Itoa(os.Getuid()), nil }},
	{"uid", func() (string, error) { return strconv.Itoa(os.Getuid()), nil }},
	{"null", func() (string, error) { return "", nil }},
}

// Expand replaces the %{token}s of s as k5_expand_path_tokens (MIT os/expand_path.c) does on
// Unix:
//
//	%{uid}, %{USERID}   the real uid, getuid()
//	%{euid}             the effective uid
//	%{username}         the passwd name of the effective uid
//	%{TEMP}             $TMPDIR, else /tmp
//	%{LIBDIR}, %{BINDIR}, %{SBINDIR}
//	                    Debian's paths of MIT krb5: /usr/lib/<multiarch>, /usr/bin, /usr/sbin
//	%{null}             nothing
//
// A token is matched by prefix as MIT matches it (see expandTokens). An unknown or empty
// token, or a "%{" without "}", is an error naming it. Windows tokens (APPDATA, ...) are
// unknown here.
func Expand(s string) (string, error) {
	var b strings.Builder
	rest := s
	for {
		i := strings.Index(rest, "%{")
		if i < 0 {
			b.WriteString(rest)
			return b.String(), nil
		}
		b.WriteString(rest[:i])
		j := strings.IndexByte(rest[i:], '}')
		if j < 0 {
			return "", fmt.Errorf("expanding %q: %q has no closing \"}\"", s, rest[i:])
		}
		tok := rest[i+2 : i+j]
		val, err := expandToken(tok)
		if err != nil {
			return "", fmt.Errorf("expanding %q: %w", s, err)
		}
		b.WriteString(val)
		rest = rest[i+j+1:]
	}
}

func expandToken(tok string) (string, error) {
	if tok != "" {
		for _, t := range expandTokens {
			if strings.HasPrefix(t.name, tok) {
				return t.expand()
			}
		}
	}
	return "", fmt.Errorf("unknown token %%{%s}", tok)
}

func expandUsername() (string, error) {
	euid := strconv.Itoa(os.Geteuid())
	u, err := user.LookupId(euid)
	if err != nil {
		return "", fmt.Errorf("%%{username}: no user name for uid %s: %w", euid, err)
	}
	return u.Username, nil
}

// debianMultiarch is Debian's multiarch triplet for the running architecture, the directory
// under /usr/lib where Debian installs MIT krb5's libraries.
func debianMultiarch() string {
	switch runtime.GOARCH {
	case "amd64":
		return "x86_64-linux-gnu"
	case "arm64":
		return "aarch64-linux-gnu"
	case "386":
		return "i386-linux-gnu"
	case "arm":
		return "arm-linux-gnueabihf"
	case "ppc64le":
		return "powerpc64le-linux-gnu"
	case "s390x":
		return "s390x-linux-gnu"
	case "riscv64":
		return "riscv64-linux-gnu"
	}
	return ""
}
