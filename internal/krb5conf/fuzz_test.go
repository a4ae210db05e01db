package krb5conf

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParse loads a krb5.conf of arbitrary bytes, in which "$DIR" stands for a directory that
// holds a file "a" and a directory "d" with a file "b.conf" to include. An input that would
// include anything outside that directory is left out, so that the fuzzer reads nothing of
// the machine. Load must not panic, must fail only with one of this package's errors, and what
// it loads must answer its lookups consistently. Seeds: testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		text := strings.ReplaceAll(string(data), "$DIR", dir)
		if !includesStayIn(text, dir) {
			return
		}
		write(t, dir, map[string]string{
			"a":        "[libdefaults]\n default_realm = A\n[realms]\n A = {\n  kdc = a:88\n }\n",
			"d/b.conf": "[domain_realm]\n .b = B\n",
			"d/c~":     "[s]\n}}}\n",
		})
		path := filepath.Join(dir, "krb5.conf")
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		p, err := Load([]string{path})
		if err != nil {
			var pe *ParseError
			known := []error{ErrSectionNotTop, ErrSectionSyntax, ErrRelationSyntax, ErrExtraCloseBrace,
				ErrMissingOBrace, ErrIncludeFile, ErrIncludeDir, ErrIncludeDepth, ErrIncludeLoop, ErrModule,
				ErrNotRegular, ErrTooManyFiles, ErrTooLarge, ErrTooManyEntries}
			ok := errors.As(err, &pe)
			for _, k := range known {
				ok = ok || errors.Is(err, k)
			}
			if !ok {
				t.Fatalf("Load: an error of no known kind: %v", err)
			}
			return
		}
		checkLookups(t, p, nil, 0)
		if _, err := p.Gokrb5Config(); err != nil && !strings.HasPrefix(err.Error(), "krb5conf: gokrb5") {
			t.Fatalf("Gokrb5Config: %v", err)
		}
	})
}

// checkLookups walks the sections of p from path: every relation Relations lists has a value,
// and every section Sections lists is listed once.
func checkLookups(t *testing.T, p *Profile, path []string, depth int) {
	if depth > 8 {
		return
	}
	var secs []string
	if len(path) == 0 {
		for _, root := range p.trees {
			secs = append(secs, root.names...)
		}
	} else {
		secs = p.Sections(path...)
		for _, name := range p.Relations(path...) {
			if len(p.Values(append(path[:len(path):len(path)], name)...)) == 0 {
				t.Fatalf("%q lists relation %q, which has no value", path, name)
			}
		}
	}
	seen := map[string]bool{}
	for _, s := range secs {
		if seen[s] && len(path) > 0 {
			t.Fatalf("%q lists section %q twice", path, s)
		}
		seen[s] = true
		checkLookups(t, p, append(path[:len(path):len(path)], s), depth+1)
	}
}

// includesStayIn reports whether every include and includedir directive MIT's parser could
// see in text names a path under dir without "..": the directive is looked for anywhere, as
// long lines are split into several, and paths that a NUL or a split could cut are refused.
func includesStayIn(text, dir string) bool {
	for i := strings.Index(text, "include"); i >= 0; {
		rest := strings.TrimPrefix(text[i+len("include"):], "dir")
		if rest != "" && isSpace(rest[0]) {
			rest = skipBlanks(rest)
			line, _, _ := strings.Cut(rest, "\n")
			// A NUL, or the end of a 2047-byte piece of a long line, could cut the path short.
			if line != "" && (!strings.HasPrefix(line, dir+"/") || strings.Contains(line, "..") ||
				strings.ContainsRune(line, 0) || len(line) > lineMax-len("includedir ")) {
				return false
			}
		}
		j := strings.Index(text[i+1:], "include")
		if j < 0 {
			break
		}
		i += 1 + j
	}
	return true
}
