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
//   - a name that is neither a regular file nor a directory (a FIFO, a socket, a
//     device), listed or included, is an error and is never opened: MIT opens
//     it with fopen, and a FIFO without a writer blocks the program for good.
//     The null device (/dev/null: on Linux the character device 1,3) is the
//     exception: it reads as an empty file, as in MIT, since reading it never
//     waits ("KRB5_CONFIG=/dev/null" is the usual way to say "no krb5.conf");
//   - one load reads at most [MaxFiles] files and [MaxBytes] bytes in all, and
//     an includedir directory may hold at most [MaxDirEntries] names: MIT reads
//     whatever it is given, and a file included several times (files that each
//     include the same four others, eleven levels deep) is read each time.
//
// Reading takes time proportional to the bytes read (see the node type).
package krb5conf

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/user"
	"slices"
	"strings"

	"github.com/pgconnector/pgconnector/internal/localfile"
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

// Bounds of one load (Load, LoadContext), over all the files of the
// KRB5_CONFIG list and everything they include. A file included twice counts
// twice, since it is read twice. A Debian or Fedora krb5.conf with its
// krb5.conf.d is a few files and a few kilobytes. MIT has no such bounds
// (prof_file.c profile_update_file_data reads the whole of each file,
// prof_parse.c parse_include_file and parse_include_dir every include).
const (
	MaxFiles      = 256     // files read
	MaxBytes      = 4 << 20 // bytes read, all files together
	MaxDirEntries = 4096    // names in one directory read as includedir (or listed), valid or not
)

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
	ErrNotRegular      = errors.New("not a regular file or directory, so not opened")
	ErrTooManyFiles    = fmt.Errorf("more than %d files to read (MaxFiles)", MaxFiles)
	ErrTooLarge        = fmt.Errorf("more than %d bytes to read in all (MaxBytes)", MaxBytes)
	ErrTooManyEntries  = fmt.Errorf("directory holds more than %d names (MaxDirEntries)", MaxDirEntries)
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
//
// MIT keeps a section's children in one list sorted by name (strcmp), equal
// names in read order, and scans it from the start for every node it adds
// (profile_add_node) and every lookup: a section of n relations costs n²/2
// comparisons to build. Here a section indexes its children by name, so adding
// and looking up a name cost one map access and a file of n relations is read
// in time proportional to n; the order MIT lists names in is restored by
// sorting names once the load ends (sortNames).
type node struct {
	name   string
	value  *string
	final  bool
	parent *node
	byName map[string]*entry // a section's children by name; nil for a relation or an empty section
	names  []string          // the keys of byName: in first-read order, sorted (strcmp) by sortNames
}

// entry is what a section holds under one name: in MIT's list, the run of
// nodes of that name.
type entry struct {
	sec      *node   // the subsection of that name (MIT merges sections of one name), or nil
	rels     []*node // the relations of that name, in read order
	relFinal bool    // one of rels is final
}

func (n *node) isSection() bool { return n.value == nil }

func (n *node) entry(name string) *entry {
	e := n.byName[name]
	if e == nil {
		if n.byName == nil {
			n.byName = map[string]*entry{}
		}
		e = &entry{}
		n.byName[name] = e
		n.names = append(n.names, name)
	}
	return e
}

// addSection is profile_add_node (prof_tree.c) for a section: one of that name
// already there is returned, else a new one is added.
func (n *node) addSection(name string) *node {
	e := n.entry(name)
	if e.sec == nil {
		e.sec = &node{name: name, parent: n}
	}
	return e.sec
}

// addRelation is profile_add_node (prof_tree.c) for a relation, with
// check_final as the parser sets it: nothing is added when a node of that name
// (a relation, or the section) is final already.
func (n *node) addRelation(name, value string, final bool) {
	e := n.entry(name)
	if e.relFinal || e.sec != nil && e.sec.final {
		return
	}
	e.rels = append(e.rels, &node{name: name, value: &value, final: final, parent: n})
	e.relFinal = e.relFinal || final
}

// section returns the child section called name, or nil.
func (n *node) section(name string) *node {
	if e := n.byName[name]; e != nil {
		return e.sec
	}
	return nil
}

// sortNames sorts the names of every section of the tree root, as MIT's list
// is sorted. It walks the tree without recursion: subsections may nest as deep
// as the file has lines.
func sortNames(root *node) {
	stack := []*node{root}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		slices.Sort(n.names)
		for _, e := range n.byName {
			if e.sec != nil {
				stack = append(stack, e.sec)
			}
		}
	}
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

// Load is LoadContext with a context that never ends.
func Load(paths []string) (*Profile, error) { return LoadContext(context.Background(), paths) }

// LoadContext reads the profile from paths, in order, as MIT's profile_init_flags
// (prof_init.c) and profile_update_file_data (prof_file.c) do:
//   - a path starting "~/" is taken relative to $HOME (else the user's home
//     directory from the password database);
//   - a path that does not exist (ENOENT, including the empty path) is skipped;
//     one that cannot be read for lack of permission (EACCES, EPERM) is skipped
//     too, but if no path could be read and one was refused, Load returns that
//     error; if none exists the profile is empty and the error nil;
//   - a directory is read like an includedir line (MIT 1.14 and later);
//   - any other error (syntax, a missing include, a module line) fails the
//     whole load with a *ParseError naming the file and line;
//   - a FIFO, socket or device, listed or included, fails the load with
//     [ErrNotRegular] (it is never opened, so reading never waits on it), except
//     the null device (/dev/null), which is read as an empty file; going
//     past [MaxFiles], [MaxBytes] or [MaxDirEntries] fails it with
//     [ErrTooManyFiles], [ErrTooLarge] or [ErrTooManyEntries], naming the file.
//
// ctx is checked before each file is opened: once it is done LoadContext
// returns its error. Nothing else waits: files are opened non-blocking and
// only regular files and directories are read.
func LoadContext(ctx context.Context, paths []string) (*Profile, error) {
	p := &Profile{}
	var denied error
	budget := &budget{ctx: ctx, files: MaxFiles, bytes: MaxBytes}
	for _, name := range paths {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("krb5conf: %w", err)
		}
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
		l := &loader{p: p, budget: budget}
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
		sortNames(root)
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
	p      *Profile
	budget *budget  // shared by the loaders of one LoadContext
	stack  []fileID // the files being read, outermost first
	names  []string
}

// budget is what one LoadContext may still read.
type budget struct {
	ctx   context.Context
	files int   // files
	bytes int64 // bytes
}

type fileID struct{ dev, ino uint64 }

// topFile reads a file of the KRB5_CONFIG list. Unlike an included file, one
// that cannot be opened for lack of permission is returned as the bare
// *fs.PathError so that Load can skip it.
func (l *loader) topFile(name, path string, root *node) error {
	f, data, err := l.read(name, path)
	if err != nil {
		if errors.Is(err, fs.ErrPermission) {
			return err
		}
		return fmt.Errorf("krb5conf: %w", err)
	}
	return l.parseOpen(name, f, data, root, true)
}

// includeFile is parse_include_file (prof_parse.c): a fresh parse state over
// the shared root, so text before the file's first section is ignored.
func (l *loader) includeFile(path string, root *node, from *ParseError) error {
	if len(l.stack) >= MaxIncludeDepth {
		return withErr(from, fmt.Errorf("%w: include %s", ErrIncludeDepth, path))
	}
	f, data, err := l.read(path, path)
	if err != nil {
		if errors.Is(err, ErrTooManyFiles) || errors.Is(err, ErrTooLarge) || errors.Is(err, context.Canceled) ||
			errors.Is(err, context.DeadlineExceeded) {
			return withErr(from, err)
		}
		return withErr(from, fmt.Errorf("%w: %w", ErrIncludeFile, err))
	}
	return l.parseOpen(path, f, data, root, false)
}

func withErr(at *ParseError, err error) error {
	if at == nil {
		return fmt.Errorf("krb5conf: %w", err)
	}
	return &ParseError{File: at.File, Line: at.Line, Err: err}
}

// read reads the file at path (named name in errors) within the budget, as
// MIT's fopen and fgets loop would, without waiting on anything: it looks at
// what path names first (stat, following symbolic links as fopen does) and
// refuses anything but a regular file or a directory; it opens with O_NONBLOCK
// (and O_CLOEXEC, as Go always does), and looks again at what it opened
// (fstat), so that a FIFO put in place between the two is not read either. A
// directory gives nil data and no error: fopen of a directory succeeds on Linux
// and the first read fails, which MIT's fgets loop takes for the end of the
// file. The returned FileInfo is the opened file's.
func (l *loader) read(name, path string) (fs.FileInfo, []byte, error) {
	if err := l.budget.ctx.Err(); err != nil {
		return nil, nil, err
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, nil, err
	}
	if err := l.check(name, st); err != nil {
		return nil, nil, err
	}
	f, err := openNonblock(path, false)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	if st, err = f.Stat(); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	if err := l.check(name, st); err != nil || st.IsDir() {
		return st, nil, err
	}
	// The size seen is checked before anything is allocated; a file that grows
	// meanwhile is cut at one byte past the budget and refused.
	data, err := io.ReadAll(io.LimitReader(f, l.budget.bytes+1))
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	if int64(len(data)) > l.budget.bytes {
		return nil, nil, fmt.Errorf("%w: %s", ErrTooLarge, name)
	}
	l.budget.bytes -= int64(len(data))
	l.budget.files--
	return st, data, nil
}

// check refuses what read must not read: a file that is neither regular nor
// the null device (isDevNull), one past the budget's files or bytes.
func (l *loader) check(name string, st fs.FileInfo) error {
	switch {
	case st.IsDir():
		return nil
	case !st.Mode().IsRegular() && !isDevNull(st):
		return fmt.Errorf("%s: %w: it is %s", name, ErrNotRegular, localfile.TypeName(st.Mode()))
	case l.budget.files <= 0:
		return fmt.Errorf("%w: %s", ErrTooManyFiles, name)
	case st.Size() > l.budget.bytes:
		return fmt.Errorf("%w: %s is %d bytes, %d left", ErrTooLarge, name, st.Size(), l.budget.bytes)
	}
	return nil
}

// parseOpen parses data, the contents of the file name whose FileInfo is st.
func (l *loader) parseOpen(name string, st fs.FileInfo, data []byte, root *node, first bool) error {
	if st.IsDir() {
		return nil // included as an empty file: see read
	}
	id := fileIDOf(st)
	if i := slices.Index(l.stack, id); i >= 0 && id != (fileID{}) {
		chain := append(slices.Clone(l.names[i:]), name)
		return fmt.Errorf("krb5conf: %w: %s", ErrIncludeLoop, strings.Join(chain, " -> "))
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
	names, err := l.readDir(dir)
	if err != nil {
		if errors.Is(err, ErrTooManyEntries) {
			return withErr(from, err)
		}
		return withErr(from, fmt.Errorf("%w: %w", ErrIncludeDir, err))
	}
	for _, name := range names {
		if !validName(name) {
			continue
		}
		// MIT joins with "/" as is: "dir/" gives "dir//name".
		if err := l.includeFile(dir+"/"+name, root, from); err != nil {
			return err
		}
	}
	return nil
}

// readDir returns the names in dir, sorted byte-wise, at most MaxDirEntries of
// them. dir is opened as a directory only (O_DIRECTORY) and non-blocking: a
// FIFO is refused by open(2) without waiting.
func (l *loader) readDir(dir string) ([]string, error) {
	if err := l.budget.ctx.Err(); err != nil {
		return nil, err
	}
	f, err := openNonblock(dir, true)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(MaxDirEntries + 1)
	if err != nil && err != io.EOF {
		return nil, err
	}
	if len(names) > MaxDirEntries {
		return nil, fmt.Errorf("%w: %s", ErrTooManyEntries, dir)
	}
	slices.Sort(names)
	return names, nil
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
