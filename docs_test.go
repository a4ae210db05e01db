package pgconnector_test

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// markdownPages returns README.md and every page under docs/, by path from the module's root.
func markdownPages(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join("docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) == 0 {
		t.Fatal("no docs/*.md page")
	}
	return append([]string{"README.md"}, docs...)
}

var (
	fence      = regexp.MustCompile("(?ms)^ *```.*?^ *```[^\n]*$")
	inlineCode = regexp.MustCompile("`[^`\n]*`")
	mdLink     = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	mdHeading  = regexp.MustCompile(`(?m)^#{1,6} +(.+?) *$`)
)

// prose returns the text of a markdown page without its fenced code blocks and code spans, where
// "](" and "#" are code, not links and headings.
func prose(text string) string {
	return inlineCode.ReplaceAllString(fence.ReplaceAllString(text, ""), "")
}

// anchors returns the fragment of each heading of a markdown page as GitHub makes it: the
// heading's text in lower case, without its markup and punctuation, spaces as hyphens, and -1,
// -2... after a repeated one.
func anchors(text string) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	for _, m := range mdHeading.FindAllStringSubmatch(fence.ReplaceAllString(text, ""), -1) {
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case r == ' ':
				b.WriteByte('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[a+"-"+strconv.Itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// Every page under docs/ is linked from the README, so that none is found only by listing the
// directory.
func TestDocsLinkedFromREADME(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	linked := map[string]bool{}
	for _, m := range mdLink.FindAllStringSubmatch(prose(string(b)), -1) {
		linked[filepath.Clean(strings.SplitN(m[1], "#", 2)[0])] = true
	}
	for _, page := range markdownPages(t)[1:] {
		if !linked[page] {
			t.Errorf("README.md has no link to %s", page)
		}
	}
}

// Every relative link of the README and of the docs pages names a file of the repository, and
// its fragment, when it has one and names a markdown page, one of that page's headings.
func TestDocsLinks(t *testing.T) {
	texts := map[string]string{}
	read := func(path string) (string, error) {
		if s, ok := texts[path]; ok {
			return s, nil
		}
		b, err := os.ReadFile(path)
		texts[path] = string(b)
		return string(b), err
	}
	links := 0
	for _, page := range markdownPages(t) {
		text, err := read(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(prose(text), -1) {
			u, err := url.Parse(m[1])
			if err != nil {
				t.Errorf("%s: link %q: %v", page, m[1], err)
				continue
			}
			if u.Scheme != "" || u.Host != "" {
				continue // not in this repository
			}
			links++
			target := page
			if u.Path != "" {
				target = filepath.Join(filepath.Dir(page), filepath.FromSlash(u.Path))
				if _, err := os.Stat(target); err != nil {
					t.Errorf("%s: link %q: %v", page, m[1], err)
					continue
				}
			}
			if u.Fragment == "" || !strings.HasSuffix(target, ".md") {
				continue
			}
			body, err := read(target)
			if err != nil {
				t.Errorf("%s: link %q: %v", page, m[1], err)
				continue
			}
			if !anchors(body)[u.Fragment] {
				t.Errorf("%s: link %q: %s has no heading #%s", page, m[1], target, u.Fragment)
			}
		}
	}
	if links == 0 {
		t.Error("no relative link found: the link pattern no longer matches the pages")
	}
}

// The anchors are GitHub's.
func TestDocsAnchors(t *testing.T) {
	got := anchors("# What is refused, and why\n```\n# not a heading\n```\n### Libraries on `*sql.DB`\n" +
		"## Without database/sql: pgxpool and pgx.Conn\n## Faults\n## Faults\n")
	for _, want := range []string{"what-is-refused-and-why", "libraries-on-sqldb",
		"without-databasesql-pgxpool-and-pgxconn", "faults", "faults-1"} {
		if !got[want] {
			t.Errorf("no anchor %q in %v", want, got)
		}
	}
	if got["not-a-heading"] {
		t.Error("a line of a code block was taken for a heading")
	}
}

// The Go blocks of the docs pages that use this module alone compile as written: each becomes
// the body of a function of its own, in a module that requires this one from the working tree,
// with the names the text leaves to the reader (dsn, ctx, c, db, the application's own helpers)
// declared beside it. A line that is a bare call of an option gets "_ = " before it, and a
// variable the block declares and does not use gets a "_ = v" after it. The integrations page's
// blocks need the libraries of examples/, where each runs in a test of its own.
func TestDocsGoBlocksCompile(t *testing.T) {
	goBlock := regexp.MustCompile("(?ms)^```go\n(.*?)^```$")
	declared := regexp.MustCompile(`(?m)^([A-Za-z_][A-Za-z0-9_]*(?:, *[A-Za-z_][A-Za-z0-9_]*)*) :=`)
	imports := map[string]string{
		"pgconnector": "github.com/pgconnector/pgconnector", "tracing": "github.com/pgconnector/pgconnector/tracing",
		"pgx": "github.com/jackc/pgx/v5", "pgtype": "github.com/jackc/pgx/v5/pgtype",
		"pgxpool": "github.com/jackc/pgx/v5/pgxpool", "multitracer": "github.com/jackc/pgx/v5/multitracer",
		"attribute": "go.opentelemetry.io/otel/attribute", "context": "context", "time": "time", "net": "net", "log": "log",
		"tls": "crypto/tls", "slog": "log/slog", "os": "os",
		"oauth2": "golang.org/x/oauth2", "clientcredentials": "golang.org/x/oauth2/clientcredentials",
		"sqlmw": "github.com/ngrok/sqlmw",
	}
	files := map[string]string{"names.go": `package docs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"database/sql"
	"net"

	"github.com/jackc/pgx/v5"
	"github.com/ngrok/sqlmw"

	"github.com/pgconnector/pgconnector"
)

var (
	logging, rewriting sqlmw.Interceptor
	dsn           = "host=db.example user=app dbname=app"
	ctx           = context.Background()
	c             *pgconnector.Connector
	db            *sql.DB
	iamToken      func(context.Context) (string, error)
	sshClient     interface{ DialContext(context.Context, string, string) (net.Conn, error) }
	caPool        *x509.CertPool
	certs         interface{ Current() *tls.Certificate }
	yours         pgx.QueryTracer
	registerTypes func(context.Context, *pgx.Conn) error
	rows          [][]any
	tenant        func(context.Context) string
)
`}
	n := 0
	for _, page := range []string{"docs/hooks-and-pgx.md", "docs/observability.md", "docs/kerberos.md", "docs/oauth.md"} {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		blocks := goBlock.FindAllStringSubmatch(string(b), -1)
		if len(blocks) == 0 {
			t.Errorf("%s: no Go block", page)
		}
		for i, m := range blocks {
			n++
			body := regexp.MustCompile(`(?m)^pgconnector\.`).ReplaceAllString(m[1], "_ = pgconnector.")
			var uses []string
			for _, d := range declared.FindAllStringSubmatch(body, -1) {
				for _, v := range strings.Split(d[1], ",") {
					if v = strings.TrimSpace(v); v != "_" {
						uses = append(uses, "_ = "+v)
					}
				}
			}
			var imp []string
			code := regexp.MustCompile(`(?m)//.*$`).ReplaceAllString(body, "") // no string of the blocks holds "//"
			for name, path := range imports {
				if regexp.MustCompile(`\b` + name + `\.`).MatchString(code) {
					imp = append(imp, strconv.Quote(path))
				}
			}
			files[fmt.Sprintf("block%d.go", n)] = fmt.Sprintf("// %s, Go block %d\n\npackage docs\n\nimport (\n%s\n)\n\nfunc block%d() error {\n%s\n%s\nreturn nil\n}\n",
				page, i+1, strings.Join(imp, "\n"), n, body, strings.Join(uses, "\n"))
		}
	}
	run := readmeModule(t, files)
	run("vet", ".")
}
