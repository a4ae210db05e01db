package harness

import (
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
)

// Servers of the harness listen below 32768: Linux hands out the ports of client sockets from
// 32768-60999 (net.ipv4.ip_local_port_range), and a port of that range chosen for a server can be
// held by a client socket in TIME-WAIT when the server binds it, or taken by a client between
// the choice and the bind. A connection storm (a benchmark, pgbouncer in front of a cluster)
// leaves thousands of such sockets.
const (
	lowPortMin = 10000
	lowPortMax = 32768 // exclusive
)

// listenLow listens on a free TCP port of 127.0.0.1 below 32768.
func listenLow() (net.Listener, error) {
	var lastErr error
	for range 200 {
		port := lowPortMin + rand.IntN(lowPortMax-lowPortMin)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err == nil {
			return l, nil
		}
		lastErr = err
	}
	return nil, fmt.Errorf("no free port below %d on 127.0.0.1: %w", lowPortMax, lastErr)
}

// Listen listens on a free TCP port of 127.0.0.1 below 32768, for a test's own server (a fake
// or misbehaving peer): see listenLow.
func Listen() (net.Listener, error) { return listenLow() }
