// Package keepalive applies libpq's TCP keepalive keys (libpq-connect.html, keepalives,
// keepalives_idle, keepalives_interval, keepalives_count and tcp_user_timeout) to the sockets the
// connector opens or is given, as libpq's connectNoDelay/setKeepalives* (fe-connect.c) set them.
// The keys are read by internal/connstring.
package keepalive

import (
	"context"
	"fmt"
	"net"
	"time"
)

// Options are libpq's TCP socket options (libpq-connect.html, keepalives to
// tcp_user_timeout). Durations of zero leave the operating system's default, as libpq does when
// the key is not given.
type Options struct {
	Off      bool          // keepalives=0
	Idle     time.Duration // keepalives_idle, seconds: TCP_KEEPIDLE
	Interval time.Duration // keepalives_interval, seconds: TCP_KEEPINTVL
	Count    int           // keepalives_count: TCP_KEEPCNT
	// UserTimeout is tcp_user_timeout, milliseconds: TCP_USER_TIMEOUT (Linux), how long sent
	// data may stay unacknowledged before the connection is dropped.
	UserTimeout time.Duration
}

// Dialer is a net.Dialer with the options set: keepalives on TCP sockets (Unix-domain sockets
// have none, as in libpq).
func Dialer(ka *Options) *net.Dialer {
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

// Wrap returns the application's dial function (WithDialFunc) with the connection string's
// keepalive keys applied to what it returns when that is a *net.TCPConn (a socket to the
// server or to a forwarder in front of it): SO_KEEPALIVE, TCP_KEEPIDLE, TCP_KEEPINTVL,
// TCP_KEEPCNT and TCP_USER_TIMEOUT, as the connector's own dialer sets them. Any other
// connection (an SSH channel, a tunnel of the application's) is returned as it is: its
// liveness is the dial function's business. ka nil: f itself.
func Wrap(f func(ctx context.Context, network, address string) (net.Conn, error), ka *Options) func(ctx context.Context, network, address string) (net.Conn, error) {
	if ka == nil {
		return f
	}
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		c, err := f(ctx, network, address)
		if err != nil {
			return nil, err
		}
		if tc, ok := c.(*net.TCPConn); ok {
			if err := Apply(ka, tc); err != nil {
				c.Close()
				return nil, fmt.Errorf("setting the keepalive keys on the connection WithDialFunc returned: %w", err)
			}
		}
		return c, nil
	}
}

// Apply sets the options on an open TCP socket, as Dialer sets them on the sockets it opens.
func Apply(ka *Options, c *net.TCPConn) error {
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
