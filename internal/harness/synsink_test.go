//go:build unix

package harness

import (
	"errors"
	"net"
	"testing"
	"time"
)

// A connect to the sink times out: its SYN is dropped, not refused.
func TestSYNSinkDropsSYNs(t *testing.T) {
	s := SYNSinkT(t, "127.0.0.1")
	start := time.Now()
	c, err := net.DialTimeout("tcp", s.Addr(), 300*time.Millisecond)
	if err == nil {
		c.Close()
		t.Fatal("a connect to the SYN sink succeeded")
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("connect: %v, want a timeout", err)
	}
	if took := time.Since(start); took < 250*time.Millisecond {
		t.Errorf("the connect failed after %v, before its timeout: refused, not dropped", took)
	}
}
