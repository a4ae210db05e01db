//go:build linux

package keepalive

import (
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// userTimeout sets TCP_USER_TIMEOUT (milliseconds) on TCP sockets, as libpq's
// setTCPUserTimeout does.
func userTimeout(ms int) func(network, address string, c syscall.RawConn) error {
	return func(network, address string, c syscall.RawConn) error {
		if !strings.HasPrefix(network, "tcp") {
			return nil
		}
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, ms)
		}); err != nil {
			return err
		}
		return serr
	}
}
