package connstring

import "bytes"

// The password file's entries, read as libpq reads them (fe-connect.c, passwordFromFile and
// pwdfMatchesString; libpq-pgpass.html), on the bytes of a file already read (readPassfile):
//
//	hostname:port:database:username:password
//
// Lines end at "\n"; carriage returns and newlines at the end of a line are dropped; a line
// whose first byte is "#" is a comment (white space before it makes it an entry). Nothing is
// trimmed. In the first four fields a backslash takes the next byte literally ("\:" and "\\",
// but also "\a", which is "a"), and a field that is exactly "*" matches anything ("\*" is a
// star). The first line whose four fields match gives the password: the rest of the line up to
// the first colon that no backslash escapes, a backslash dropped before any byte but the
// line's last. So a line with more than five fields gives its fifth ("h:p:d:u:pass:x" is
// "pass"), and "p\ass" is "pass". A line of four fields gives nothing, "h:p:d:u:" the empty
// password (no password).
//
// libpq reads the file with fgets into a buffer that grows (PQExpBuffer, 256 bytes, doubled
// as needed, 128 free bytes asked for before each read), which has two consequences that
// passfileLines keeps: a NUL byte ends what is kept of the piece read with it (the rest of that
// piece is lost and the line goes on with what is read next), and a last line without a
// newline that exactly fills the buffer is never looked at. libpq reads lines of any length;
// the file itself is bounded (maxPassfileSize).

// passfileLookup returns the password of the first entry of data that matches host, port,
// dbname and user, and whether one matched. host is as libpq looks it up (passfileHost).
func passfileLookup(data []byte, host, port, dbname, user string) (password string, ok bool) {
	passfileLines(data, func(line []byte) bool {
		rest := line
		for _, token := range [...]string{host, port, dbname, user} {
			if rest, ok = passfileField(rest, token); !ok {
				return false
			}
		}
		password = passfilePassword(rest)
		return true
	})
	return password, ok
}

// passfileLines calls entry with each line of data that libpq would match against (a copy,
// without its trailing carriage returns and newlines; comments and empty lines left out), in
// order, until entry returns true. It reproduces libpq's read loop (see above): fgets into a
// buffer of maxlen bytes that reads at most maxlen-len-1 bytes, up to and with a newline, and
// strlen for what was read.
func passfileLines(data []byte, entry func(line []byte) bool) {
	const initial, free = 256, 128 // INITIAL_EXPBUFFER_SIZE; enlargePQExpBuffer(&buf, 128)
	maxlen := initial
	buf := make([]byte, 0, initial)
	defer func() { clear(buf[:cap(buf)]) }()
	pos, eof := 0, false
	for !eof {
		if needed := free + len(buf) + 1; needed > maxlen {
			for maxlen < needed {
				maxlen *= 2
			}
		}
		if pos >= len(data) {
			return // fgets reads nothing at the end of the file: NULL
		}
		n := maxlen - len(buf) - 1
		piece := data[pos:min(pos+n, len(data))]
		if i := bytes.IndexByte(piece, '\n'); i >= 0 {
			piece = piece[:i+1]
		}
		pos += len(piece)
		// fgets met the end of the file when it stopped short of n bytes without a newline.
		eof = len(piece) < n && piece[len(piece)-1] != '\n'
		if i := bytes.IndexByte(piece, 0); i >= 0 {
			piece = piece[:i] // strlen
		}
		buf = append(buf, piece...)
		if !(len(buf) > 0 && buf[len(buf)-1] == '\n') && !eof {
			continue
		}
		if len(buf) == 0 || buf[0] != '#' {
			line := buf
			for len(line) > 0 && (line[len(line)-1] == '\n' || line[len(line)-1] == '\r') {
				line = line[:len(line)-1] // pg_strip_crlf
			}
			if len(line) > 0 && entry(line) {
				return
			}
		}
		clear(buf)
		buf = buf[:0]
	}
}

// passfileField matches the field at the start of line against token as pwdfMatchesString
// does and returns what follows the field's colon: "*" and a colon match anything; otherwise
// the field, a backslash taking the next byte literally, must equal token and be followed by a
// colon no backslash escapes.
func passfileField(line []byte, token string) (rest []byte, ok bool) {
	if len(line) >= 2 && line[0] == '*' && line[1] == ':' {
		return line[2:], true
	}
	t := 0
	for i := 0; i < len(line); i++ {
		escaped := false
		if line[i] == '\\' {
			escaped = true
			if i++; i >= len(line) {
				return nil, false // a backslash at the end of the line: no colon follows
			}
		}
		if line[i] == ':' && !escaped && t == len(token) {
			return line[i+1:], true
		}
		if t == len(token) || line[i] != token[t] {
			return nil, false
		}
		t++
	}
	return nil, false
}

// passfilePassword is the password of a matching line, rest being what follows the user's
// field: up to the first colon no backslash escapes, a backslash dropped before any byte (a
// backslash that ends the line is kept).
func passfilePassword(rest []byte) string {
	var b []byte
	for i := 0; i < len(rest) && rest[i] != ':'; i++ {
		if rest[i] == '\\' && i+1 < len(rest) {
			i++
		}
		b = append(b, rest[i])
	}
	return string(b)
}
