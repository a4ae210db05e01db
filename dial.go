package pgconnector

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// Keepalives are libpq's TCP socket options (libpq-connect.html, keepalives to
// tcp_user_timeout). Durations of zero leave the operating system's default, as libpq does when
// the key is not given.
type Keepalives struct {
	Off      bool          // keepalives=0
	Idle     time.Duration // keepalives_idle, seconds: TCP_KEEPIDLE
	Interval time.Duration // keepalives_interval, seconds: TCP_KEEPINTVL
	Count    int           // keepalives_count: TCP_KEEPCNT
	// UserTimeout is tcp_user_timeout, milliseconds: TCP_USER_TIMEOUT (Linux), how long sent
	// data may stay unacknowledged before the connection is dropped.
	UserTimeout time.Duration
}

// parseKeepalives reads the keys; nil when none is given. Values are integers as libpq parses
// them (fe-connect.c, parse_int_param: white space around is allowed); a negative duration means
// the operating system's default, as 0 does.
func parseKeepalives(kv *keyValues) (*Keepalives, error) {
	var ka Keepalives
	given := false
	num := func(key string) (int, bool, error) {
		v, src, ok := kv.get(key, "")
		if !ok {
			return 0, false, nil
		}
		given = true
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			return 0, false, invalid(key, src, "an integer")
		}
		return n, true, nil
	}
	if n, ok, err := num("keepalives"); err != nil {
		return nil, err
	} else if ok {
		ka.Off = n == 0
	}
	for _, f := range []struct {
		key  string
		unit time.Duration
		dst  *time.Duration
	}{
		{"keepalives_idle", time.Second, &ka.Idle},
		{"keepalives_interval", time.Second, &ka.Interval},
		{"tcp_user_timeout", time.Millisecond, &ka.UserTimeout},
	} {
		n, ok, err := num(f.key)
		if err != nil {
			return nil, err
		}
		if ok && n > 0 {
			*f.dst = time.Duration(n) * f.unit
		}
	}
	n, ok, err := num("keepalives_count")
	if err != nil {
		return nil, err
	}
	if ok && n > 0 {
		ka.Count = n
	}
	if !given {
		return nil, nil
	}
	return &ka, nil
}

// dialer is a net.Dialer with the options set: keepalives on TCP sockets (Unix-domain sockets
// have none, as in libpq).
func (ka *Keepalives) dialer() *net.Dialer {
	d := &net.Dialer{}
	if ka.Off {
		d.KeepAlive = -1
		d.KeepAliveConfig = net.KeepAliveConfig{Enable: false}
	} else {
		d.KeepAliveConfig = net.KeepAliveConfig{Enable: true, Idle: -1, Interval: -1, Count: -1}
		if ka.Idle > 0 {
			d.KeepAliveConfig.Idle = ka.Idle
		}
		if ka.Interval > 0 {
			d.KeepAliveConfig.Interval = ka.Interval
		}
		if ka.Count > 0 {
			d.KeepAliveConfig.Count = ka.Count
		}
	}
	if ka.UserTimeout > 0 {
		d.Control = userTimeout(int(ka.UserTimeout / time.Millisecond))
	}
	return d
}

// dialWith returns the application's dial function (WithDialFunc) with the connection string's
// keepalive keys applied to what it returns when that is a *net.TCPConn (a socket to the
// server or to a forwarder in front of it): SO_KEEPALIVE, TCP_KEEPIDLE, TCP_KEEPINTVL,
// TCP_KEEPCNT and TCP_USER_TIMEOUT, as the connector's own dialer sets them. Any other
// connection (an SSH channel, a tunnel of the application's) is returned as it is: its
// liveness is the dial function's business. ka nil: f itself.
func dialWith(f func(ctx context.Context, network, address string) (net.Conn, error), ka *Keepalives) func(ctx context.Context, network, address string) (net.Conn, error) {
	if ka == nil {
		return f
	}
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		c, err := f(ctx, network, address)
		if err != nil {
			return nil, err
		}
		if tc, ok := c.(*net.TCPConn); ok {
			if err := ka.apply(tc); err != nil {
				c.Close()
				return nil, fmt.Errorf("setting the keepalive keys on the connection WithDialFunc returned: %w", err)
			}
		}
		return c, nil
	}
}

// apply sets the options on an open TCP socket, as dialer sets them on the sockets it opens.
func (ka *Keepalives) apply(c *net.TCPConn) error {
	if ka.Off {
		if err := c.SetKeepAlive(false); err != nil {
			return err
		}
	} else {
		kc := net.KeepAliveConfig{Enable: true, Idle: -1, Interval: -1, Count: -1}
		if ka.Idle > 0 {
			kc.Idle = ka.Idle
		}
		if ka.Interval > 0 {
			kc.Interval = ka.Interval
		}
		if ka.Count > 0 {
			kc.Count = ka.Count
		}
		if err := c.SetKeepAliveConfig(kc); err != nil {
			return err
		}
	}
	if ka.UserTimeout > 0 {
		if set := userTimeout(int(ka.UserTimeout / time.Millisecond)); set != nil {
			raw, err := c.SyscallConn()
			if err != nil {
				return err
			}
			return set("tcp", "", raw)
		}
	}
	return nil
}
