package pgconnector_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The README's "Use" example compiles as pasted: it is built as a package of its own, in a
// module that requires this one from the working tree.
func TestREADMEUseCompiles(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)\n## Use\n\n```go\n(.*?)\n```\n").FindSubmatch(b)
	if m == nil {
		t.Fatal("README: no Go block under ## Use")
	}
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	goMod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	goVersion := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(goMod)
	mod := "module readme.example/app\n\ngo " + string(goVersion[1]) + "\n\n" +
		"require github.com/pgconnector/pgconnector v0.0.0\n\n" +
		"replace github.com/pgconnector/pgconnector => " + root + "\n"
	for name, text := range map[string]string{"go.mod": mod, "use.go": string(m[1]) + "\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sum, err := os.ReadFile("go.sum")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v\n%s\nthe example:\n%s", strings.Join(args, " "), err, out, m[1])
		}
	}
	run("vet", ".")
}
