// Package krb5conf reads krb5.conf the way MIT Kerberos's profile library does
// (util/profile in MIT krb5): the colon-separated file list of KRB5_CONFIG,
// directories in that list, include and includedir, sections merged by name,
// relations kept in read order with the first value winning single lookups, and
// the final flag ('*'). The result answers lookups directly ([Profile.Value],
// [Profile.Values]) and converts to a gokrb5 [config.Config] ([Profile.Gokrb5Config])
// that gives gokrb5 MIT's answers.
//
// The rules follow MIT krb5 1.22 (src/util/profile/prof_parse.c, prof_tree.c,
// prof_file.c, prof_init.c; src/lib/krb5/os/init_os_ctx.c); they are described
// where they are implemented. Differences from MIT, all deliberate:
//   - includes nest at most [MaxIncludeDepth] deep and an include loop is an
//     error (MIT recurses until it runs out of file descriptors);
//   - a "module" directive (a profile plugin that MIT loads instead of the file)
//     is always an error: see [ErrModule];
//   - an included name that is neither a regular file nor a directory (a FIFO,
//     a device) is an error instead of being read.
package krb5conf

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/user"
	"slices"
	"strings"
)

// DefaultPath is the profile MIT reads when KRB5_CONFIG is not set
// (DEFAULT_PROFILE_PATH of a build with sysconfdir /etc).
const DefaultPath = "/etc/krb5.conf"

// MaxIncludeDepth is how deep include and includedir may nest: a file read
// through more than this many include or includedir lines is an error. MIT has
// no limit.
const MaxIncludeDepth = 16

// lineMax is the longest line MIT's parser sees: it reads with fgets into a
// 2048-byte buffer (BUF_SIZE in prof_parse.c), so a longer line is parsed as
// several lines of at most 2047 bytes.
const lineMax = 2047

// maxFileSize bounds one file: a krb5.conf is a few kilobytes.
const maxFileSize = 16 << 20

// ErrModule is the error for a "module" line. MIT loads the named plugin
// instead of the file when the line comes before any section of the first file
// it opens (prof_init.c profile_init_flags, PROFILE_INIT_ALLOW_MODULE), and
// fails with PROF_MODULE ("Unexpected module declaration in profile") for one in
// an included file or a later file. Plugins cannot be loaded here, so every
// module line is this error rather than a profile that silently lacks the
// plugin's settings.
var ErrModule = errors.New("module declaration (a profile plugin) is not supported")

// Errors of the syntax, as MIT names them (prof_err.et). A *ParseError wraps one
// of them, or the error of opening an included file or directory.
var (
	ErrSectionNotTop   = errors.New("section header not at top level (PROF_SECTION_NOTOP)")
	ErrSectionSyntax   = errors.New("syntax error in section header (PROF_SECTION_SYNTAX)")
	ErrRelationSyntax  = errors.New("syntax error in relation (PROF_RELATION_SYNTAX)")
	ErrExtraCloseBrace = errors.New("extra closing brace (PROF_EXTRA_CBRACE)")
	ErrMissingOBrace   = errors.New("missing open brace (PROF_MISSING_OBRACE)")
	ErrIncludeFile     = errors.New("included profile file could not be read (PROF_FAIL_INCLUDE_FILE)")
	ErrIncludeDir      = errors.New("included profile directory could not be read (PROF_FAIL_INCLUDE_DIR)")
	ErrIncludeDepth    = fmt.Errorf("includes nest deeper than %d", MaxIncludeDepth)
	ErrIncludeLoop     = errors.New("include loop")
)

// ParseError is an error at one line of one file. Err is one of the Err*
// variables of this package, possibly joined with the operating system's error.
type ParseError struct {
	File string // as named (in KRB5_CONFIG, or on an include line)
	Line int    // 1-based
	Err  error
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("krb5conf: %s:%d: %v", e.File, e.Line, e.Err)
}

func (e *ParseError) Unwrap() error { return e.Err }

// node is a profile tree node (prof_tree.c struct profile_node): a section when
// value is nil, else a relation.
type node struct {
	name     string
	value    *string
	final    bool
	parent   *node
	children []*node // sorted by name (strcmp); equal names in read order
}

func (n *node) isSection() bool { return n.value == nil }

// add is profile_add_node (prof_tree.c): a section merges with an existing
// section of that name; a relation goes after the last node of its name, unless
// checkFinal and a node of that name is final, in which case nothing is added
// and add returns nil.
func (n *node) add(name string, value *string, checkFinal bool) *node {
	i := 0
	for ; i < len(n.children); i++ {
		p := n.children[i]
		if p.name > name {
			break
		}
		if p.name == name {
			if value == nil && p.isSection() {
				return p
			}
			if checkFinal && p.final {
				return nil
			}
		}
	}
	c := &node{name: name, value: value, parent: n}
	n.children = slices.Insert(n.children, i, c)
	return c
}

// section returns the child section called name, or nil.
func (n *node) section(name string) *node {
	for _, c := range n.children {
		if c.name == name && c.isSection() {
			return c
		}
	}
	return nil
}

// Profile is the parsed configuration: one tree per file or directory of the
// KRB5_CONFIG list that could be read, in list order (includes are merged into
// the tree of the file that includes them). The zero Profile is empty. A
// Profile is immutable and safe for concurrent use.
type Profile struct {
	trees []*node
	files []string // every file read, in read order
}

// Files returns the files read (the listed ones and those included), in the
// order they were read.
func (p *Profile) Files() []string { return slices.Clone(p.files) }

// SplitPaths splits a KRB5_CONFIG value into its paths at every colon, as MIT
// does (os_get_default_config_files in init_os_ctx.c): empty elements stay (and
// name no file).
func SplitPaths(krb5Config string) []string {
	return strings.Split(krb5Config, ":")
}

// EnvPaths returns the profile paths MIT reads: KRB5_CONFIG's list if the
// variable is set, even to the empty string (which names no file, so the
// profile is empty), else [DefaultPath].
func EnvPaths() []string {
	if v, ok := os.LookupEnv("KRB5_CONFIG"); ok {
		return SplitPaths(v)
	}
	return []string{DefaultPath}
}

// LoadEnv is Load(EnvPaths()).
func LoadEnv() (*Profile, error) { return Load(EnvPaths()) }

// Load reads the profile from paths, in order, as MIT's profile_init_flags
// (prof_init.c) and profile_update_file_data (prof_file.c) do:
//   - a path starting "~/" is taken relative to $HOME (else the user's home
//     directory from the password database);
//   - a path that does not exist (ENOENT, including the empty path) is skipped;
//     one that cannot be read for lack of permission (EACCES, EPERM) is skipped
//     too, but if no path could be read and one was refused, Load returns that
//     error; if none exists the profile is empty and the error nil;
//   - a directory is read like an includedir line (MIT 1.14 and later);
//   - any other error (syntax, a missing include, a module line) fails the
//     whole load with a *ParseError naming the file and line.
func Load(paths []string) (*Profile, error) {
	p := &Profile{}
	var denied error
	for _, name := range paths {
		path := expandHome(name)
		st, err := os.Stat(path)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) { // ENOENT only: ENOTDIR fails, as in MIT
				continue
			}
			if errors.Is(err, fs.ErrPermission) {
				denied = err
				continue
			}
			return nil, fmt.Errorf("krb5conf: %w", err)
		}
		l := &loader{p: p}
		root := &node{name: "(root)"}
		if st.IsDir() {
			err = l.includeDir(path, root, nil)
		} else {
			err = l.topFile(name, path, root)
			if errors.Is(err, fs.ErrPermission) {
				denied = err
				continue
			}
		}
		if err != nil {
			return nil, err
		}
		p.trees = append(p.trees, root)
	}
	if len(p.trees) == 0 && denied != nil {
		return nil, fmt.Errorf("krb5conf: %w", denied)
	}
	return p, nil
}

func expandHome(path string) string {
	rest, ok := strings.CutPrefix(path, "~/")
	if !ok {
		return path
	}
	home, ok := os.LookupEnv("HOME")
	if !ok {
		u, err := user.Current()
		if err != nil {
			return path
		}
		home = u.HomeDir
	}
	return home + "/" + rest
}

// loader reads one tree: a listed file or directory and everything it includes.
type loader struct {
	p     *Profile
	stack []fileID // the files being read, outermost first
	names []string
}

type fileID struct{ dev, ino uint64 }

// topFile reads a file of the KRB5_CONFIG list. Unlike an included file, one
// that cannot be opened for lack of permission is returned as the bare
// *fs.PathError so that Load can skip it.
func (l *loader) topFile(name, path string, root *node) error {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrPermission) {
			return err
		}
		return fmt.Errorf("krb5conf: %w", err)
	}
	defer f.Close()
	return l.parseOpen(name, f, root, true)
}

// includeFile is parse_include_file (prof_parse.c): a fresh parse state over
// the shared root, so text before the file's first section is ignored.
func (l *loader) includeFile(path string, root *node, from *ParseError) error {
	if len(l.stack) >= MaxIncludeDepth {
		return withErr(from, fmt.Errorf("%w: include %s", ErrIncludeDepth, path))
	}
	f, err := os.Open(path)
	if err != nil {
		return withErr(from, fmt.Errorf("%w: %w", ErrIncludeFile, err))
	}
	defer f.Close()
	return l.parseOpen(path, f, root, false)
}

func withErr(at *ParseError, err error) error {
	if at == nil {
		return fmt.Errorf("krb5conf: %w", err)
	}
	return &ParseError{File: at.File, Line: at.Line, Err: err}
}

func (l *loader) parseOpen(name string, f *os.File, root *node, first bool) error {
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("krb5conf: %s: %w", name, err)
	}
	switch {
	case st.IsDir():
		// fopen of a directory succeeds on Linux and the first read fails,
		// which MIT's fgets loop takes for the end of the file: nothing is
		// included, and that is no error.
		return nil
	case !st.Mode().IsRegular():
		return fmt.Errorf("krb5conf: %s: not a regular file", name)
	}
	id := fileIDOf(st)
	if i := slices.Index(l.stack, id); i >= 0 && id != (fileID{}) {
		chain := append(slices.Clone(l.names[i:]), name)
		return fmt.Errorf("krb5conf: %w: %s", ErrIncludeLoop, strings.Join(chain, " -> "))
	}
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return fmt.Errorf("krb5conf: %s: %w", name, err)
	}
	if len(data) > maxFileSize {
		return fmt.Errorf("krb5conf: %s: larger than %d bytes", name, maxFileSize)
	}
	l.p.files = append(l.p.files, name)
	l.stack = append(l.stack, id)
	l.names = append(l.names, name)
	defer func() {
		l.stack = l.stack[:len(l.stack)-1]
		l.names = l.names[:len(l.names)-1]
	}()
	ps := &parseState{l: l, file: name, root: root, moduleAllowed: first && len(l.p.trees) == 0}
	return ps.parse(data)
}

// includeDir is parse_include_dir (prof_parse.c) with k5_dir_filenames
// (util/support/dir_filenames.c): the directory's entries in strcmp order
// (sorted since MIT 1.17), each read by includeFile if validName accepts it. A
// directory that cannot be opened is an error.
func (l *loader) includeDir(dir string, root *node, from *ParseError) error {
	if len(l.stack) >= MaxIncludeDepth {
		return withErr(from, fmt.Errorf("%w: includedir %s", ErrIncludeDepth, dir))
	}
	ents, err := os.ReadDir(dir) // sorted by name, byte order
	if err != nil {
		return withErr(from, fmt.Errorf("%w: %w", ErrIncludeDir, err))
	}
	for _, e := range ents {
		if !validName(e.Name()) {
			continue
		}
		// MIT joins with "/" as is: "dir/" gives "dir//name".
		if err := l.includeFile(dir+"/"+e.Name(), root, from); err != nil {
			return err
		}
	}
	return nil
}

// validName is valid_name (prof_parse.c): not a dotfile, and either ending in
// ".conf" (MIT 1.15 and later) or made only of ASCII letters, digits, '-' and
// '_'. Editor backups ("x~") and package leftovers ("x.rpmsave") are skipped.
func validName(name string) bool {
	if name == "" || name[0] == '.' {
		return false
	}
	if strings.HasSuffix(name, ".conf") {
		return true
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
