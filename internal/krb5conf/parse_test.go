package krb5conf

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// write creates the files of m (name -> content; a name ending in "/" is a
// directory) under dir.
func write(t *testing.T, dir string, m map[string]string) {
	t.Helper()
	for name, text := range m {
		p := filepath.Join(dir, name)
		if strings.HasSuffix(name, "/") {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(strings.ReplaceAll(text, "$DIR", dir)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// load reads the comma-separated paths (relative to dir) with a time limit,
// so that a loop in the loader fails the test instead of hanging it.
func load(t *testing.T, dir string, paths string) (*Profile, error) {
	t.Helper()
	var list []string
	for _, p := range strings.Split(paths, ",") {
		if p != "" {
			p = filepath.Join(dir, p)
		}
		list = append(list, p)
	}
	type result struct {
		p   *Profile
		err error
	}
	ch := make(chan result, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				ch <- result{nil, errors.New("panic")}
				t.Errorf("Load panicked: %v", r)
			}
		}()
		p, err := Load(list)
		ch <- result{p, err}
	}()
	select {
	case r := <-ch:
		return r.p, r.err
	case <-time.After(10 * time.Second):
		t.Fatal("Load did not return within 10 s")
		return nil, nil
	}
}

// Each case is one rule of MIT's profile library; lookup is
// "section/…/tag" and want the values MIT returns for it (profile_get_values),
// joined by "|"; or wantErr is an error the load must wrap.
func TestParseRules(t *testing.T) {
	cases := []struct {
		name    string
		files   map[string]string
		paths   string // comma-separated, relative to the directory; default "krb5.conf"
		lookup  string
		want    string
		wantErr error
		errText string // in the message, with $DIR replaced
	}{
		// prof_parse.c parse_line: text before the first "[" in column 0 is ignored.
		{name: "text before the first section", files: map[string]string{"krb5.conf": "junk without equals\n  [libdefaults]\n[libdefaults]\n a = 1\n"},
			lookup: "libdefaults/a", want: "1"},
		// parse_std_line: comments are ';' or '#' as the first non-blank, never trailing.
		{name: "comments", files: map[string]string{"krb5.conf": "[s]\n # x = 0\n ;y = 0\n x = 1 # not a comment\n"},
			lookup: "s/x", want: "1 # not a comment"},
		// parse_std_line: trailing blanks of a value go, a quoted value keeps them and has escapes.
		{name: "quoted value", files: map[string]string{"krb5.conf": "[s]\n a = \" x\\ty\\\\\" ignored\n a = plain \t \r\n"},
			lookup: "s/a", want: " x\ty\\|plain"},
		// parse_std_line: "tag =" then '{' on the next line opens a subsection.
		{name: "brace on the next line", files: map[string]string{"krb5.conf": "[realms]\n R =\n  {\n kdc = k:1\n }\n"},
			lookup: "realms/R/kdc", want: "k:1"},
		{name: "missing open brace", files: map[string]string{"krb5.conf": "[realms]\n R =\n kdc = k\n"},
			wantErr: ErrMissingOBrace, errText: "krb5.conf:3:"},
		{name: "extra close brace", files: map[string]string{"krb5.conf": "[s]\n}\n"}, wantErr: ErrExtraCloseBrace},
		{name: "unterminated section header", files: map[string]string{"krb5.conf": "[libdefaults\n a = 1\n"},
			wantErr: ErrSectionSyntax, errText: "krb5.conf:1:"},
		{name: "text after the section header", files: map[string]string{"krb5.conf": "[s] x\n"}, wantErr: ErrSectionSyntax},
		{name: "section header inside a subsection", files: map[string]string{"krb5.conf": "[realms]\n R = {\n[s]\n"}, wantErr: ErrSectionNotTop},
		{name: "relation without '='", files: map[string]string{"krb5.conf": "[s]\n a\n"}, wantErr: ErrRelationSyntax},
		{name: "relation without tag", files: map[string]string{"krb5.conf": "[s]\n = 1\n"}, wantErr: ErrRelationSyntax},
		{name: "blank inside a tag", files: map[string]string{"krb5.conf": "[s]\n a b = 1\n"}, wantErr: ErrRelationSyntax},
		// MIT does not check that braces are closed at the end of a file.
		{name: "unclosed brace at the end", files: map[string]string{"krb5.conf": "[realms]\n R = {\n kdc = k:1\n"},
			lookup: "realms/R/kdc", want: "k:1"},
		// prof_tree.c profile_add_node: sections of one name merge; values keep read order.
		{name: "section and subsection merged", files: map[string]string{"krb5.conf": "[realms]\n R = {\n kdc = a:1\n }\n[libdefaults]\n[realms]\n R = {\n kdc = b:1\n }\n"},
			lookup: "realms/R/kdc", want: "a:1|b:1"},
		// prof_init.c: files of KRB5_CONFIG in order, missing ones skipped; values append.
		{name: "list, missing file skipped", files: map[string]string{"a": "[libdefaults]\n x = a\n", "b": "[libdefaults]\n x = b\n"},
			paths: "a,none,,b", lookup: "libdefaults/x", want: "a|b"},
		{name: "directory in the list", files: map[string]string{"d/1.conf": "[s]\n x = 1\n", "d/2": "[s]\n x = 2\n", "d/3~": "[s]\n x = 3\n"},
			paths: "d", lookup: "s/x", want: "1|2"},
		// '*' final: a final section or relation hides later files (prof_tree.c profile_node_iterator).
		{name: "final section", files: map[string]string{"a": "[s]*\n x = a\n", "b": "[s]\n x = b\n"},
			paths: "a,b", lookup: "s/x", want: "a"},
		{name: "final relation", files: map[string]string{"a": "[s]\n x* = a\n", "b": "[s]\n x = b\n"},
			paths: "a,b", lookup: "s/x", want: "a"},
		{name: "final subsection by closing brace", files: map[string]string{"a": "[realms]\n R = {\n kdc = a:1\n }*\n", "b": "[realms]\n R = {\n kdc = b:1\n }\n"},
			paths: "a,b", lookup: "realms/R/kdc", want: "a:1"},
		// MIT 1.22 (f951625e): a later section of a final one's name in the same tree is discarded.
		{name: "final section discards later ones", files: map[string]string{"krb5.conf": "[s]*\n x = 1\n[s]\n x = 2\n R = {\n y = 1\n }\n[t]\n z = 1\n"},
			lookup: "s/x", want: "1"},
		{name: "final relation in one tree", files: map[string]string{"krb5.conf": "[s]\n x* = 1\n x = 2\n"},
			lookup: "s/x", want: "1"},
		// include / includedir: column 0 only, path = rest of line minus CR/LF.
		{name: "include", files: map[string]string{"krb5.conf": "[s]\n x = 1\ninclude $DIR/inc\n x = 3\n", "inc": "ignored = before section\n[s]\n x = 2\n"},
			lookup: "s/x", want: "1|2|3"},
		{name: "indented include is a relation error", files: map[string]string{"krb5.conf": "[s]\n include /x\n"}, wantErr: ErrRelationSyntax},
		{name: "include with trailing blank", files: map[string]string{"krb5.conf": "include $DIR/inc \n", "inc": "[s]\n"},
			wantErr: ErrIncludeFile, errText: "krb5.conf:1:"},
		{name: "include with CRLF", files: map[string]string{"krb5.conf": "include $DIR/inc\r\n", "inc": "[s]\n x = 1\n"},
			lookup: "s/x", want: "1"},
		{name: "missing include file", files: map[string]string{"krb5.conf": "[s]\n\ninclude $DIR/none\n"},
			wantErr: ErrIncludeFile, errText: "krb5.conf:3:"},
		{name: "missing include file in an included file", files: map[string]string{"krb5.conf": "include $DIR/inc\n", "inc": "\ninclude $DIR/none\n"},
			wantErr: ErrIncludeFile, errText: "$DIR/inc:2:"},
		{name: "missing includedir", files: map[string]string{"krb5.conf": "includedir $DIR/none\n"}, wantErr: ErrIncludeDir},
		{name: "include of a directory includes nothing", files: map[string]string{"krb5.conf": "include $DIR/d\n[s]\n x = 1\n", "d/a.conf": "[s]\n x = 2\n"},
			lookup: "s/x", want: "1"},
		// prof_parse.c valid_name, dir_filenames.c sorted by strcmp.
		{name: "includedir names and order", files: map[string]string{"krb5.conf": "includedir $DIR/d\n",
			"d/b.conf": "[s]\n x = b.conf\n", "d/Zed": "[s]\n x = Zed\n", "d/a_1-x": "[s]\n x = a_1-x\n",
			"d/.hidden.conf": "[s]\n x = hidden\n", "d/c~": "[s]\n x = backup\n", "d/e.rpmsave": "[s]\n x = rpmsave\n", "d/f.txt": "[s]\n x = txt\n"},
			lookup: "s/x", want: "Zed|a_1-x|b.conf"},
		{name: "include inside a subsection", files: map[string]string{"krb5.conf": "[realms]\n R = {\ninclude $DIR/inc\n kdc = a:1\n }\n", "inc": "[realms]\n R = {\n kdc = b:1\n }\n"},
			lookup: "realms/R/kdc", want: "b:1|a:1"},
		{name: "include loop", files: map[string]string{"krb5.conf": "include $DIR/a\n", "a": "include $DIR/b\n", "b": "include $DIR/a\n"},
			wantErr: ErrIncludeLoop, errText: "$DIR/a -> $DIR/b -> $DIR/a"},
		{name: "include of itself", files: map[string]string{"krb5.conf": "[s]\ninclude $DIR/krb5.conf\n"}, wantErr: ErrIncludeLoop},
		{name: "includedir of its own directory", files: map[string]string{"d/x.conf": "includedir $DIR/d\n", "krb5.conf": "includedir $DIR/d\n"}, wantErr: ErrIncludeLoop},
		{name: "module in the first file", files: map[string]string{"krb5.conf": "module /lib/x.so:res\n[s]\n"}, wantErr: ErrModule},
		{name: "module in an included file", files: map[string]string{"krb5.conf": "include $DIR/inc\n", "inc": "module x:y\n"}, wantErr: ErrModule},
		{name: "module after a section", files: map[string]string{"krb5.conf": "[s]\nmodule x:y\n"}, wantErr: ErrRelationSyntax},
		// parse_file: fgets with a 2048-byte buffer splits longer lines.
		{name: "long line split", files: map[string]string{"krb5.conf": "[s]\n x = " + strings.Repeat("v", 2100) + "\n"}, wantErr: ErrRelationSyntax},
		// A NUL ends what the parser sees of a line.
		{name: "NUL in a line", files: map[string]string{"krb5.conf": "[s]\n x = 1\x00junk\n"}, lookup: "s/x", want: "1"},
		{name: "empty and whitespace files", files: map[string]string{"a": "", "b": " \n\t\n"}, paths: "a,b", lookup: "s/x", want: ""},
		{name: "binary garbage", files: map[string]string{"krb5.conf": "[s]\n\xff\xfe = \x01\n}}}\n"}, wantErr: ErrExtraCloseBrace},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			write(t, dir, c.files)
			paths := c.paths
			if paths == "" {
				paths = "krb5.conf"
			}
			p, err := load(t, dir, paths)
			if c.wantErr != nil {
				if !errors.Is(err, c.wantErr) {
					t.Fatalf("Load: %v, want %v", err, c.wantErr)
				}
				if want := strings.ReplaceAll(c.errText, "$DIR", dir); !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
				return
			}
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			got := strings.Join(p.Values(strings.Split(c.lookup, "/")...), "|")
			if got != c.want {
				t.Errorf("%s = %q, want %q", c.lookup, got, c.want)
			}
		})
	}
}

func TestSplitAndEnvPaths(t *testing.T) {
	if got := SplitPaths("/a::/b/"); !slices.Equal(got, []string{"/a", "", "/b/"}) {
		t.Errorf("SplitPaths = %q", got)
	}
	t.Setenv("KRB5_CONFIG", "")
	if got := EnvPaths(); !slices.Equal(got, []string{""}) {
		t.Errorf("EnvPaths with KRB5_CONFIG empty = %q", got)
	}
	p, err := LoadEnv()
	if err != nil || len(p.Files()) != 0 {
		t.Errorf("LoadEnv with KRB5_CONFIG empty: %v, %v", p.Files(), err)
	}
	os.Unsetenv("KRB5_CONFIG")
	if got := EnvPaths(); !slices.Equal(got, []string{DefaultPath}) {
		t.Errorf("EnvPaths without KRB5_CONFIG = %q", got)
	}
	t.Setenv("HOME", t.TempDir())
	write(t, os.Getenv("HOME"), map[string]string{"k.conf": "[libdefaults]\n kcm_socket = /run/kcm\n default_ccache_name = KCM:%{uid}\n"})
	t.Setenv("KRB5_CONFIG", "/nonexistent:~/k.conf")
	p, err = LoadEnv()
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := p.KCMSocket(); s != "/run/kcm" || !ok {
		t.Errorf("KCMSocket = %q, %v", s, ok)
	}
	if s, _ := p.DefaultCCacheName(); s != "KCM:%{uid}" {
		t.Errorf("DefaultCCacheName = %q", s)
	}
}

// A file that exists but cannot be read is skipped like a missing one, and is
// the error when no file could be read (prof_init.c, EACCES).
func TestUnreadable(t *testing.T) {
	if os.Geteuid() == 0 {
		// Permissions do not stop root: the mode-0 file is read, as MIT reads it.
		dir := t.TempDir()
		write(t, dir, map[string]string{"a": "[s]\n x = 1\n"})
		if err := os.Chmod(filepath.Join(dir, "a"), 0); err != nil {
			t.Fatal(err)
		}
		p, err := load(t, dir, "a")
		if err != nil || len(p.Values("s", "x")) != 1 {
			t.Fatalf("root reading a mode-0 file: %v", err)
		}
		return
	}
	dir := t.TempDir()
	write(t, dir, map[string]string{"a": "[s]\n x = 1\n", "b": "[s]\n x = 2\n"})
	if err := os.Chmod(filepath.Join(dir, "a"), 0); err != nil {
		t.Fatal(err)
	}
	p, err := load(t, dir, "a,b")
	if err != nil || strings.Join(p.Values("s", "x"), "|") != "2" {
		t.Fatalf("a unreadable, b readable: %v", err)
	}
	if _, err := load(t, dir, "a"); !errors.Is(err, os.ErrPermission) {
		t.Fatalf("only a: %v", err)
	}
}

func TestIncludeDepth(t *testing.T) {
	dir := t.TempDir()
	m := map[string]string{"krb5.conf": "include $DIR/f0\n"}
	for i := 0; i < MaxIncludeDepth+1; i++ {
		m["f"+strconv.Itoa(i)] = "[s]\n x = " + strconv.Itoa(i) + "\ninclude $DIR/f" + strconv.Itoa(i+1) + "\n"
	}
	m["f"+strconv.Itoa(MaxIncludeDepth+1)] = "[s]\n"
	write(t, dir, m)
	if _, err := load(t, dir, "krb5.conf"); !errors.Is(err, ErrIncludeDepth) {
		t.Fatalf("Load: %v, want %v", err, ErrIncludeDepth)
	}
	// One level less is fine.
	m["f"+strconv.Itoa(MaxIncludeDepth-2)] = "[s]\n"
	write(t, dir, m)
	p, err := load(t, dir, "krb5.conf")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(p.Values("s", "x")); n != MaxIncludeDepth-2 {
		t.Errorf("%d values, want %d", n, MaxIncludeDepth-2)
	}
}
