//go:build !linux

package negotiation

import (
	"errors"
	"net"
)

// peerUser is not implemented off Linux: requirepeer fails, as libpq does where getpeereid is
// missing ("requirepeer parameter is not supported on this platform").
func peerUser(net.Conn) (string, error) {
	return "", errors.New("requirepeer parameter is not supported on this platform")
}
