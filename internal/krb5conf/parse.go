package krb5conf

import (
	"bytes"
	"fmt"
	"strings"
)

// Parser states (prof_parse.c).
const (
	stateInitComment = iota // before the file's first section: lines ignored
	stateStdLine
	stateGetOBrace // after "tag =" with nothing after it: the next line must open with '{'
)

// parseState is struct parse_state of prof_parse.c, for one file.
type parseState struct {
	l             *loader
	file          string
	line          int
	root          *node
	state         int
	groupLevel    int // 1 inside a top-level section, +1 per open subsection
	discard       int // group level of a section being discarded (final seen before), 0: none
	current       *node
	moduleAllowed bool
}

// isSpace is C's isspace in the C locale.
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

func skipBlanks(s string) string {
	i := 0
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	return s[i:]
}

// stripLine is strip_line: only trailing CR and LF go.
func stripLine(s string) string { return strings.TrimRight(s, "\r\n") }

// parse feeds data to parseLine as MIT's fgets loop does (parse_file): lines
// end after '\n' or after lineMax bytes, and a NUL byte ends what the parser
// sees of a line.
func (ps *parseState) parse(data []byte) error {
	ps.line = 1
	for len(data) > 0 {
		n := bytes.IndexByte(data, '\n') + 1
		if n == 0 || n > lineMax {
			n = min(len(data), lineMax)
		}
		chunk := data[:n]
		data = data[n:]
		text := chunk
		if i := bytes.IndexByte(text, 0); i >= 0 {
			text = text[:i]
		}
		if err := ps.parseLine(string(text)); err != nil {
			return err
		}
		if chunk[len(chunk)-1] == '\n' {
			ps.line++
		}
	}
	return nil
}

func (ps *parseState) errorf(err error, format string, args ...any) error {
	if format != "" {
		err = fmt.Errorf("%w: "+format, append([]any{err}, args...)...)
	}
	return &ParseError{File: ps.file, Line: ps.line, Err: err}
}

// hasDirective reports whether line starts with word followed by a blank
// (strncmp and isspace in parse_line; the '\n' counts as a blank).
func hasDirective(line, word string) bool {
	return len(line) > len(word) && strings.HasPrefix(line, word) && isSpace(line[len(word)])
}

// parseLine is parse_line (prof_parse.c). "include" and "includedir" count
// only at the start of the line (column 0), in any state, even inside a
// subsection; the path is the rest of the line after the blanks that follow
// the keyword, with only CR and LF stripped, so trailing blanks are part of it.
// A relative path is taken from the process's working directory.
func (ps *parseState) parseLine(line string) error {
	if hasDirective(line, "include") {
		at := &ParseError{File: ps.file, Line: ps.line}
		return ps.l.includeFile(stripLine(skipBlanks(line[len("include"):])), ps.root, at)
	}
	if hasDirective(line, "includedir") {
		at := &ParseError{File: ps.file, Line: ps.line}
		return ps.l.includeDir(stripLine(skipBlanks(line[len("includedir"):])), ps.root, at)
	}
	switch ps.state {
	case stateInitComment:
		if hasDirective(line, "module") {
			if ps.moduleAllowed {
				return ps.errorf(ErrModule, "%s", stripLine(skipBlanks(line[len("module"):])))
			}
			return ps.errorf(ErrModule, "%s (and MIT accepts one only before the first section of the first file: PROF_MODULE)",
				stripLine(skipBlanks(line[len("module"):])))
		}
		// Until the first line that starts with '[' in column 0, nothing counts.
		if line == "" || line[0] != '[' {
			return nil
		}
		ps.state = stateStdLine
		return ps.parseStdLine(line)
	case stateStdLine:
		return ps.parseStdLine(line)
	default: // stateGetOBrace: the rest of the line after '{' is ignored
		if cp := skipBlanks(line); cp == "" || cp[0] != '{' {
			return ps.errorf(ErrMissingOBrace, "")
		}
		ps.state = stateStdLine
		return nil
	}
}

// parseStdLine is parse_std_line (prof_parse.c).
func (ps *parseState) parseStdLine(line string) error {
	if line == "" {
		return nil
	}
	cp := skipBlanks(line)
	// Comments: ';' or '#' as the first non-blank; there are no trailing comments.
	if cp != "" && (cp[0] == ';' || cp[0] == '#') {
		return nil
	}
	cp = stripLine(cp)
	if cp == "" {
		return nil
	}
	switch cp[0] {
	case '[':
		// "[name]", optionally "*" (final), then only blanks.
		if ps.groupLevel > 1 {
			return ps.errorf(ErrSectionNotTop, "")
		}
		end := strings.IndexByte(cp, ']')
		if end < 0 {
			return ps.errorf(ErrSectionSyntax, "no ']'")
		}
		sec := ps.root.addSection(cp[1:end])
		ps.current = sec
		ps.groupLevel = 1
		// A section seen before with the final flag: its values are discarded
		// until the next top-level section (MIT 1.22).
		ps.discard = 0
		if sec.final {
			ps.discard = 1
		}
		rest := cp[end+1:]
		if rest != "" && rest[0] == '*' {
			sec.final = true
			rest = rest[1:]
		}
		if skipBlanks(rest) != "" {
			return ps.errorf(ErrSectionSyntax, "text after ']'")
		}
		return nil
	case '}':
		// "}" ends a subsection; "}*" also marks it final; the rest of the
		// line is ignored.
		if ps.groupLevel < 2 {
			return ps.errorf(ErrExtraCloseBrace, "")
		}
		if len(cp) > 1 && cp[1] == '*' {
			ps.current.final = true
		}
		ps.groupLevel--
		if ps.groupLevel < ps.discard {
			ps.discard = 0
		}
		if ps.discard == 0 {
			ps.current = ps.current.parent
		}
		return nil
	}
	// A relation: "tag = value", "tag = {", or "tag =" and '{' on the next line.
	eq := strings.IndexByte(cp, '=')
	if eq < 0 {
		return ps.errorf(ErrRelationSyntax, "no '='")
	}
	if eq == 0 {
		return ps.errorf(ErrRelationSyntax, "no tag before '='")
	}
	tag := cp[:eq]
	for i := 0; i < len(tag); i++ {
		if isSpace(tag[i]) {
			if skipBlanks(tag[i:]) != "" {
				return ps.errorf(ErrRelationSyntax, "blank inside the tag")
			}
			tag = tag[:i]
			break
		}
	}
	value := skipBlanks(cp[eq+1:])
	subsection := false
	switch {
	case value != "" && value[0] == '"':
		value = parseQuoted(value[1:])
	case value == "":
		subsection = true
		ps.state = stateGetOBrace
	case value[0] == '{' && skipBlanks(value[1:]) == "":
		subsection = true
	default:
		value = strings.TrimRightFunc(value, func(r rune) bool { return r < 0x80 && isSpace(byte(r)) })
	}
	// A '*' in the tag ends it and marks the relation or subsection final.
	final := false
	if i := strings.IndexByte(tag, '*'); i >= 0 {
		tag, final = tag[:i], true
	}
	if subsection {
		ps.groupLevel++
		if ps.discard == 0 {
			sub := ps.current.addSection(tag)
			if sub.final {
				ps.discard = ps.groupLevel
			}
			if final {
				sub.final = true
			}
			ps.current = sub
		}
		return nil
	}
	if ps.discard == 0 {
		// A relation whose tag is final already in this tree is not added.
		ps.current.addRelation(tag, value, final)
	}
	return nil
}

// parseQuoted is parse_quoted_string (prof_parse.c): the value ends at the next
// unescaped '"' or the end of the line; \n, \t and \b are control characters,
// a backslash before any other character (or a final one) stands for itself.
func parseQuoted(s string) string {
	var b strings.Builder
	for i := 0; i < len(s) && s[i] != '"'; i++ {
		c := s[i]
		if c == '\\' && i+1 < len(s) {
			i++
			switch s[i] {
			case 'n':
				c = '\n'
			case 't':
				c = '\t'
			case 'b':
				c = '\b'
			default:
				c = s[i]
			}
		}
		b.WriteByte(c)
	}
	return b.String()
}
