//go:build linux

package pgconnector_test

import (
	"context"
	"database/sql/driver"
	"net"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
)

// keepaliveCase is a connection string's keepalive keys and the socket options they should
// give: -1 for an option left as the system has it.
type keepaliveCase struct {
	extra                         string
	keepalive                     bool
	idle, interval, count, userTO int
}

// TestKeepaliveSocketOptions reads back the TCP options of a connection made with libpq's
// keepalive keys.
func TestKeepaliveSocketOptions(t *testing.T) {
	srv := harness.StartT(t, harness.Options{})
	for _, tc := range []keepaliveCase{
		{"keepalives_idle=37 keepalives_interval=7 keepalives_count=3 tcp_user_timeout=4321", true, 37, 7, 3, 4321},
		{"keepalives=0", false, -1, -1, -1, 0},
	} {
		c := newConnector(t, srv.DSN("sslmode=disable "+tc.extra))
		dc, err := c.Connect(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		checkSocketOptions(t, dc, tc)
		dc.Close()
	}
}

// With WithDialFunc, the keepalive keys are set on the *net.TCPConn the function returns
// (here one dialed with keep-alive off), and left alone when none is given.
func TestKeepalivesOnWithDialFunc(t *testing.T) {
	srv := harness.StartT(t, harness.Options{})
	noKeepalive := func(ctx context.Context, network, address string) (net.Conn, error) {
		return (&net.Dialer{KeepAlive: -1}).DialContext(ctx, network, address)
	}
	for _, tc := range []keepaliveCase{
		{"keepalives_idle=41 keepalives_interval=9 keepalives_count=4 tcp_user_timeout=1234", true, 41, 9, 4, 1234},
		{"", false, -1, -1, -1, 0},
	} {
		c := newConnector(t, srv.DSN("sslmode=disable "+tc.extra), pgconnector.WithDialFunc(noKeepalive))
		dc, err := c.Connect(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		checkSocketOptions(t, dc, tc)
		dc.Close()
	}
}

// checkSocketOptions reads the keepalive options of dc's socket back and compares them with tc.
func checkSocketOptions(t *testing.T, dc driver.Conn, tc keepaliveCase) {
	t.Helper()
	tcp, ok := pgconnector.PgxConnOf(dc).PgConn().Conn().(*net.TCPConn)
	if !ok {
		t.Fatalf("%q: the connection is a %T", tc.extra, pgconnector.PgxConnOf(dc).PgConn().Conn())
	}
	raw, err := tcp.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	get := func(level, opt int) int {
		var v int
		var gerr error
		if err := raw.Control(func(fd uintptr) { v, gerr = unix.GetsockoptInt(int(fd), level, opt) }); err != nil || gerr != nil {
			t.Fatalf("getsockopt: %v %v", err, gerr)
		}
		return v
	}
	if ka := get(unix.SOL_SOCKET, unix.SO_KEEPALIVE) != 0; ka != tc.keepalive {
		t.Errorf("%q: SO_KEEPALIVE %v, want %v", tc.extra, ka, tc.keepalive)
	}
	for _, o := range []struct {
		name      string
		opt, want int
	}{
		{"TCP_KEEPIDLE", unix.TCP_KEEPIDLE, tc.idle},
		{"TCP_KEEPINTVL", unix.TCP_KEEPINTVL, tc.interval},
		{"TCP_KEEPCNT", unix.TCP_KEEPCNT, tc.count},
		{"TCP_USER_TIMEOUT", unix.TCP_USER_TIMEOUT, tc.userTO},
	} {
		if o.want < 0 {
			continue
		}
		if got := get(unix.IPPROTO_TCP, o.opt); got != o.want {
			t.Errorf("%q: %s = %d, want %d", tc.extra, o.name, got, o.want)
		}
	}
}
