package pgconnector_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// readmeModule writes files into a module of its own in a temporary directory, which requires
// this one from the working tree, and returns a function that runs the go command there.
func readmeModule(t *testing.T, files map[string]string) func(args ...string) string {
	t.Helper()
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
	sum, err := os.ReadFile("go.sum")
	if err != nil {
		t.Fatal(err)
	}
	files["go.mod"], files["go.sum"] = mod, string(sum)
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return func(args ...string) string {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s\nthe example:\n%s", strings.Join(args, " "), err, out, files)
		}
		return string(out)
	}
}

// useSection returns the README's "## Use" section, up to the next heading.
func useSection(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)\n## Use\n(.*?)\n##").FindSubmatch(b)
	if m == nil {
		t.Fatal("README: no ## Use section")
	}
	return string(m[1])
}

// The README's "Use" section starts with the install command of this module, and its Go example
// compiles as pasted: it is built as a package of its own, in a module that requires this one
// from the working tree.
func TestREADMEUseCompiles(t *testing.T) {
	use := useSection(t)
	goMod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	module := regexp.MustCompile(`(?m)^module (\S+)$`).FindSubmatch(goMod)
	if want := "\n```sh\ngo get " + string(module[1]) + "\n```\n"; !strings.HasPrefix(use, want) {
		t.Errorf("README: ## Use does not start with %q", want)
	}
	blocks := regexp.MustCompile("(?s)\n```go\n(package .*?)\n```\n").FindAllStringSubmatch(use, -1)
	if len(blocks) < 2 {
		t.Fatalf("README: %d Go package blocks under ## Use, want the first use and the deployment options", len(blocks))
	}
	files := map[string]string{}
	for i, m := range blocks {
		files[fmt.Sprintf("use%d.go", i)] = m[1] + "\n"
	}
	run := readmeModule(t, files)
	run("vet", ".")
}

// The README's sql.Open("pgconnector", ...) example shows the blank import that registers the
// driver, and with it, as pasted into a program, sql.Open finds the driver (sql.Open does not
// connect: without the import it fails with "unknown driver").
func TestREADMESQLOpenImport(t *testing.T) {
	use := useSection(t)
	m := regexp.MustCompile("(?s)```go\n(import _ \"github.com/pgconnector/pgconnector\"[^\n]*)\n\n(db, err := sql\\.Open\\(\"pgconnector\", [^\n]*)\n```").FindStringSubmatch(use)
	if m == nil {
		t.Fatal(`README: no example of sql.Open("pgconnector", ...) with its blank import under ## Use`)
	}
	prog := "package main\n\nimport (\n\t\"database/sql\"\n\t\"fmt\"\n)\n\n" + m[1] + "\n\nfunc main() {\n\t" + m[2] +
		"\n\tif err != nil {\n\t\tpanic(err)\n\t}\n\tfmt.Println(\"opened\")\n\tdb.Close()\n}\n"
	run := readmeModule(t, map[string]string{"main.go": prog})
	if out := run("run", "."); !strings.Contains(out, "opened") {
		t.Errorf("the program printed %q, want \"opened\"", out)
	}
}
