//go:build unix

package harness

import (
	"errors"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// SYNSink is a TCP listener on loopback whose SYNs are dropped, as a host that is down behind a
// firewall, or a server whose accept queue is full: a connect to it hangs until its deadline.
// It listens with a backlog of zero and never accepts, and its accept queue is filled at once;
// Linux drops a SYN to a listener whose accept queue is full (tcp_conn_request).
type SYNSink struct {
	fd     int
	filler []net.Conn
	addr   string
}

// Addr is the sink's "ip:port".
func (s *SYNSink) Addr() string { return s.addr }

// Close closes the listener and the connections that fill its queue.
func (s *SYNSink) Close() error {
	for _, c := range s.filler {
		c.Close()
	}
	return syscall.Close(s.fd)
}

// NewSYNSink opens a SYN sink on ip (an IPv4 loopback address, "127.0.0.1" for example).
func NewSYNSink(ip string) (*SYNSink, error) {
	a := net.ParseIP(ip).To4()
	if a == nil {
		return nil, errors.New("harness: SYN sink: not an IPv4 address: " + ip)
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	sa := &syscall.SockaddrInet4{}
	copy(sa.Addr[:], a)
	if err := syscall.Bind(fd, sa); err != nil {
		syscall.Close(fd)
		return nil, err
	}
	if err := syscall.Listen(fd, 0); err != nil {
		syscall.Close(fd)
		return nil, err
	}
	bound, err := syscall.Getsockname(fd)
	if err != nil {
		syscall.Close(fd)
		return nil, err
	}
	s := &SYNSink{fd: fd, addr: net.JoinHostPort(ip, strconv.Itoa(bound.(*syscall.SockaddrInet4).Port))}
	// Fill the accept queue: connects complete until it is full, then hang.
	for range 8 {
		c, err := net.DialTimeout("tcp", s.addr, 200*time.Millisecond)
		if err != nil {
			return s, nil // full: this SYN was dropped
		}
		s.filler = append(s.filler, c)
	}
	s.Close()
	return nil, errors.New("harness: SYN sink: the accept queue did not fill")
}

// SYNSinkT is NewSYNSink for a test, closed when the test ends.
func SYNSinkT(t testing.TB, ip string) *SYNSink {
	t.Helper()
	s, err := NewSYNSink(ip)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
