//go:build !unix

package negotiation

import "net"

// pending is not implemented on this system: only the bytes that arrive with an answer are
// checked (parseAnswer).
func pending(conn net.Conn) int { return 0 }
