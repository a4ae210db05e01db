//go:build unix

package tlspolicy

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// A FIFO is not written to and does not hold the handshake, with or without a reader.
func TestKeyLogFileFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "keys.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	write := func() {
		done := make(chan struct{})
		go func() {
			_, _ = KeyLogFile(fifo).Write([]byte("CLIENT_RANDOM 01 02\n"))
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("Write to a FIFO blocked")
		}
	}
	write() // no reader: the open fails with ENXIO
	r, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	write() // a reader: opened, not written
	buf := make([]byte, 64)
	if n, _ := r.Read(buf); n != 0 {
		t.Errorf("the FIFO got %q", buf[:n])
	}
}
