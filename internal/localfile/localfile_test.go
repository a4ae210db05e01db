//go:build unix

package localfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Each kind of path: a regular file is read, within the limit or cut with ReadPrefix; a FIFO
// (with no writer: a blocking open would never return), a directory, a device and a symbolic
// link to a FIFO are refused at once, naming the type; a missing file is fs.ErrNotExist.
func TestRead(t *testing.T) {
	dir := t.TempDir()
	regular := filepath.Join(dir, "regular")
	if err := os.WriteFile(regular, []byte("0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(fifo, link); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, path string
		limit      int64
		prefix     bool
		want       string
		wantErr    func(error) bool
	}{
		{"regular", regular, 10, false, "0123456789", nil},
		{"regular over the limit", regular, 9, false, "", func(err error) bool {
			var tl *TooLargeError
			return errors.As(err, &tl) && tl.Limit == 9
		}},
		{"prefix of a larger file", regular, 4, true, "0123", nil},
		{"FIFO", fifo, 10, false, "", isType("a named pipe (FIFO)")},
		{"symbolic link to a FIFO", link, 10, false, "", isType("a named pipe (FIFO)")},
		{"directory", dir, 10, false, "", isType("a directory")},
		{"character device", os.DevNull, 10, false, "", isType("a character device")},
		{"missing", filepath.Join(dir, "missing"), 10, false, "", func(err error) bool { return errors.Is(err, fs.ErrNotExist) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			read := Read
			if tt.prefix {
				read = ReadPrefix
			}
			done := make(chan struct{})
			var b []byte
			var err error
			go func() { b, err = read(tt.path, tt.limit); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatalf("%s: not returned after 10 s: waited on the file", tt.path)
			}
			if tt.wantErr == nil {
				if err != nil || string(b) != tt.want {
					t.Fatalf("read %q, %v; want %q", b, err, tt.want)
				}
				return
			}
			if !tt.wantErr(err) {
				t.Fatalf("error %v, not the one expected", err)
			}
		})
	}
}

func isType(name string) func(error) bool {
	return func(err error) bool {
		var nr *NotRegularError
		return errors.As(err, &nr) && TypeName(nr.Mode) == name
	}
}
