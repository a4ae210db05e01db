//go:build !unix

package negotiation

import "net"

// pending is not implemented on this system: only the bytes that arrive with an answer are
// checked (parseAnswer).
func pending(conn net.Conn) int { return 0 }

// canPeek is false: a socket left open after 'N' is never given to the next method here.
func canPeek(conn net.Conn) bool { return false }
