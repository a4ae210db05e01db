//go:build unix

package negotiation

import (
	"net"
	"syscall"
)

// pending returns how many bytes (0 or 1: it looks no further) are waiting to be read on conn,
// without reading them and without blocking: recv(2) with MSG_PEEK|MSG_DONTWAIT on the socket's
// file descriptor. A connection without one (not a syscall.Conn) gives 0.
func pending(conn net.Conn) int {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return 0
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0
	}
	var n int
	var buf [1]byte
	_ = rc.Read(func(fd uintptr) bool {
		k, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		if err == nil && k > 0 {
			n = k
		}
		return true // never wait
	})
	return n
}

// canPeek reports whether pending can look at conn. A socket left open after 'N' is given to
// the next method only then: else bytes that arrive after the answer could not be seen, and the
// next method opens a new connection instead.
func canPeek(conn net.Conn) bool {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return false
	}
	_, err := sc.SyscallConn()
	return err == nil
}
