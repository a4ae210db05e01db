package pgxpoolsuite

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/pgconnector/pgconnector/internal/harness"
)

func TestMain(m *testing.M) {
	os.Exit(harness.Run(m)) // stops the servers too
}

// upstreamTests is the number of tests (func Test...) in pgx v5.13.0's pgxpool/*_test.go.
const upstreamTests = 71

// rewrites are the constructor calls replaced in upstream's files, with how many of each
// v5.13.0 has: a different count means another pgx, whose files must be read again.
var rewrites = []struct {
	from, to string
	count    int
}{
	{"pgxpool.ParseConfig(", "connectorPoolConfig(", 33},
	{"pgxpool.New(", "connectorPool(", 44},
}

const (
	pgmockImport = `"github.com/jackc/pgx/v5/internal/pgmock"`
	pgxpoolPath  = `"github.com/jackc/pgx/v5/pgxpool"`
)

// TestPgxpoolSuite runs pgx's pgxpool tests with every pool built through a Connector (see
// the package doc) and asserts that each of the 71 passes.
func TestPgxpoolSuite(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pgxDir := goList(t, "-m", "-f", "{{.Dir}}", "github.com/jackc/pgx/v5")
	root := filepath.Dir(goList(t, "-m", "-f", "{{.GoMod}}"))
	testifyVersion := goList(t, "-m", "-f", "{{.Version}}", "github.com/stretchr/testify")
	pgxVersion := goList(t, "-m", "-f", "{{.Version}}", "github.com/jackc/pgx/v5")

	dir := t.TempDir()
	writeModule(t, dir, root, pgxVersion, testifyVersion)
	writeUpstream(t, dir, pgxDir)

	p, err := harness.Start(ctx, harness.Options{Major: 15})
	if errors.Is(err, harness.ErrNotInstalled) {
		t.Fatalf("PostgreSQL 15 is not installed: run scripts/install-deps.sh: %v", err)
	}
	if err != nil {
		t.Fatalf("starting PostgreSQL 15: %v", err)
	}

	args := []string{"test", "-count=1", "-json", "-timeout", "5m", "-run", "^Test"}
	if raceDetector {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, ".")...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"PGX_TEST_DATABASE="+p.DSN("sslmode=disable"),
		// No Kerberos credentials from the machine: the server takes passwords.
		"KRB5CCNAME=FILE:/nonexistent/pgconnector-test-ccache", "KRB5_CLIENT_KTNAME=",
		// Only the module cache: the temporary module needs nothing the repository's does not.
		"GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	results := readResults(out)
	var passed, failed []string
	for name, r := range results {
		if r.action == "pass" {
			passed = append(passed, name)
		} else {
			failed = append(failed, name)
		}
	}
	sort.Strings(failed)
	for _, name := range failed {
		t.Errorf("%s: %s\n%s", name, results[name].action, results[name].output)
	}
	t.Logf("%d of pgx's %d pgxpool tests passed", len(passed), upstreamTests)
	if len(passed) != upstreamTests {
		t.Errorf("%d of pgx's %d pgxpool tests passed (%d not: %v); go test: %v\n%s", len(passed), upstreamTests, len(failed), failed, err, tail(stderr.String()+string(out), 4000))
	} else if err != nil {
		t.Errorf("go test: %v\n%s", err, tail(stderr.String(), 4000))
	}
}

// A result is what go test -json said of one top-level test: its last action (pass, fail,
// skip, or run when the binary ended before it did) and its output.
type result struct {
	action string
	output string
}

// readResults reads go test -json's events, keeping the top-level tests.
func readResults(out []byte) map[string]*result {
	results := map[string]*result{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var ev struct{ Action, Test, Output string }
		if err := dec.Decode(&ev); err != nil {
			return results
		}
		if ev.Test == "" || strings.Contains(ev.Test, "/") {
			if r := results[strings.SplitN(ev.Test, "/", 2)[0]]; r != nil && ev.Action == "output" {
				r.output += ev.Output
			}
			continue
		}
		r := results[ev.Test]
		if r == nil {
			r = &result{}
			results[ev.Test] = r
		}
		switch ev.Action {
		case "run", "pass", "fail", "skip":
			r.action = ev.Action
		case "output":
			r.output += ev.Output
		}
	}
}

// writeModule writes the temporary module's go.mod (the connector from root, pgx and testify at
// the versions of root's build) and root's go.sum.
func writeModule(t *testing.T, dir, root, pgxVersion, testifyVersion string) {
	t.Helper()
	gomod := fmt.Sprintf(`module pgxpoolsuite

go 1.26.0

require (
	github.com/jackc/pgx/v5 %s
	github.com/pgconnector/pgconnector v0.0.0
	github.com/stretchr/testify %s
)

replace github.com/pgconnector/pgconnector => %s
`, pgxVersion, testifyVersion, root)
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	constructors, err := os.ReadFile(filepath.Join("testdata", "constructors_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"go.mod": []byte(gomod), "go.sum": sum, "constructors_test.go": constructors} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// writeUpstream writes pgx's pgxpool/*_test.go into dir with the changes of the package doc,
// and pgx's internal/pgmock as dir/pgmock.
func writeUpstream(t *testing.T, dir, pgxDir string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(pgxDir, "pgxpool", "*_test.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no pgxpool tests in %s: %v", pgxDir, err)
	}
	counts := make([]int, len(rewrites))
	tests := 0
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		s := string(src)
		for i, r := range rewrites {
			counts[i] += strings.Count(s, r.from)
			s = strings.ReplaceAll(s, r.from, r.to)
		}
		s = strings.ReplaceAll(s, pgmockImport, `"pgxpoolsuite/pgmock"`)
		if !strings.Contains(s, "pgxpool.") {
			s = strings.Replace(s, "\t"+pgxpoolPath+"\n", "", 1)
		}
		tests += len(testFunc.FindAllString(s, -1))
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i, r := range rewrites {
		if counts[i] != r.count {
			t.Fatalf("%d calls %s in pgx's pgxpool tests, %d expected: another pgx version?", counts[i], r.from, r.count)
		}
	}
	if tests != upstreamTests {
		t.Fatalf("%d tests in pgx's pgxpool tests, %d expected: another pgx version?", tests, upstreamTests)
	}
	mock, err := filepath.Glob(filepath.Join(pgxDir, "internal", "pgmock", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "pgmock"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range mock {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "pgmock", filepath.Base(f)), src, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

var testFunc = regexp.MustCompile(`(?m)^func Test\w+\(t \*testing\.T\)`)

// goList runs go list with args in this package's module and returns its output, trimmed.
func goList(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list"}, args...)...).Output()
	if err != nil {
		t.Fatalf("go list %v: %v", args, err)
	}
	return strings.TrimSpace(string(out))
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
