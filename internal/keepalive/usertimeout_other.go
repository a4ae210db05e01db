//go:build !linux

package keepalive

import "syscall"

// userTimeout: TCP_USER_TIMEOUT is a Linux option; libpq ignores tcp_user_timeout where the
// platform lacks it, and so does the connector.
func userTimeout(int) func(network, address string, c syscall.RawConn) error { return nil }
