//go:build unix

package connstring

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// CRL files are local files too: a FIFO as sslcrl fails the check, without a wait.
func TestCRLFileFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := (&crlCheck{file: fifo}).load()
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("FIFO as sslcrl: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a FIFO as sslcrl blocks")
	}
}
