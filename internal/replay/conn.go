package replay

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// maxStartup is PostgreSQL's MAX_STARTUP_PACKET_LENGTH (pqcomm.h).
	maxStartup = 10000
	// cancelRequestCode is CancelRequest's request code (1234 << 16 | 5678).
	cancelRequestCode = 80877102
	// maxCancel is the longest CancelRequest: 12 bytes and a key of up to 256 (protocol 3.2).
	maxCancel = 12 + 256
)

// Conn is an established PostgreSQL connection for a client that starts it again: the first
// message written, the StartupMessage, is read and dropped, and the first bytes read are the
// greeting given to NewConn; every other byte passes to and from the established connection.
// Its other methods are the established connection's. It is safe for the concurrent use pgx
// makes of a net.Conn (a read on its background reader while a write is in progress, deadlines
// set from a context watcher).
type Conn struct {
	net.Conn // the established connection

	swallowed   atomic.Bool   // the StartupMessage has been read
	startupDone chan struct{} // closed with swallowed
	replayed    atomic.Bool   // the greeting has been read
	closed      chan struct{}
	closeOnce   sync.Once

	wmu  sync.Mutex // the StartupMessage's state, until swallowed
	hdr  [8]byte    // its length and protocol version
	have int        // bytes of hdr received
	left int        // bytes of its parameters still to drop
	werr error      // what was written instead of a StartupMessage

	rmu      sync.Mutex
	greeting []byte // what is still to be read of it
}

// NewConn returns conn as a connection that the client can start again, hearing greeting (see
// Greeting.Encode) in answer to its StartupMessage.
func NewConn(conn net.Conn, greeting []byte) *Conn {
	return &Conn{Conn: conn, greeting: greeting, startupDone: make(chan struct{}), closed: make(chan struct{})}
}

// NetConn returns the established connection, as tls.Conn's NetConn does.
func (c *Conn) NetConn() net.Conn { return c.Conn }

// Closed reports whether Close was called.
func (c *Conn) Closed() bool {
	select {
	case <-c.closed:
		return true
	default:
		return false
	}
}

// Close closes the established connection.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// Write drops the StartupMessage and writes everything after it to the established connection.
// Anything else than a StartupMessage of protocol 3 first is an error (the client would be
// asking for what the established connection cannot give: an SSLRequest, a GSSENCRequest).
func (c *Conn) Write(b []byte) (int, error) {
	if c.swallowed.Load() {
		return c.Conn.Write(b)
	}
	c.wmu.Lock()
	n, err := c.swallow(b)
	c.wmu.Unlock()
	if err != nil || n == len(b) {
		return n, err
	}
	m, err := c.Conn.Write(b[n:])
	return n + m, err
}

// swallow takes the bytes of b that belong to the StartupMessage; under wmu.
func (c *Conn) swallow(b []byte) (int, error) {
	if c.werr != nil {
		return 0, c.werr
	}
	n := 0
	for n < len(b) && !c.swallowed.Load() {
		if c.have < len(c.hdr) {
			k := copy(c.hdr[c.have:], b[n:])
			c.have += k
			n += k
			if c.have < len(c.hdr) {
				break
			}
			length := binary.BigEndian.Uint32(c.hdr[:4])
			version := binary.BigEndian.Uint32(c.hdr[4:])
			if version>>16 != 3 || length < 8 || length > maxStartup {
				c.werr = fmt.Errorf("replay: the client wrote %d bytes with code %d where a StartupMessage of protocol 3 was expected", length, version)
				return n, c.werr
			}
			c.left = int(length) - len(c.hdr)
		}
		k := min(c.left, len(b)-n)
		c.left -= k
		n += k
		if c.left == 0 {
			c.swallowed.Store(true)
			close(c.startupDone)
		}
	}
	return n, nil
}

// Read returns the greeting, once the StartupMessage has been written, then what the
// established connection reads. A read of the greeting never returns bytes of the connection
// with it.
func (c *Conn) Read(p []byte) (int, error) {
	if c.replayed.Load() {
		return c.Conn.Read(p)
	}
	select {
	case <-c.startupDone:
	case <-c.closed:
		return 0, net.ErrClosed
	}
	c.rmu.Lock()
	if len(c.greeting) == 0 {
		c.replayed.Store(true)
		c.rmu.Unlock()
		return c.Conn.Read(p)
	}
	n := copy(p, c.greeting)
	c.greeting = c.greeting[n:]
	if len(c.greeting) == 0 {
		c.replayed.Store(true)
	}
	c.rmu.Unlock()
	return n, nil
}

// CancelFunc sends a CancelRequest for the backend pid with key: on a socket of its own, to the
// server of the established connection, protected as that connection is.
type CancelFunc func(ctx context.Context, pid uint32, key []byte) error

// CancelConn is what a client's dial for a CancelRequest gets instead of a socket: the
// CancelRequest written to it is handed to a CancelFunc, run with the dial's context, whose
// error the Write returns; then reads return io.EOF, as the server's close after a cancel.
// Deadlines are ignored (the CancelFunc is bound by the context).
type CancelConn struct {
	ctx           context.Context
	send          CancelFunc
	local, remote net.Addr

	mu   sync.Mutex
	buf  []byte
	sent bool
	err  error
}

// NewCancelConn returns a CancelConn whose CancelRequest goes to send with ctx. local and remote
// are what its LocalAddr and RemoteAddr report (the established connection's).
func NewCancelConn(ctx context.Context, local, remote net.Addr, send CancelFunc) *CancelConn {
	return &CancelConn{ctx: ctx, send: send, local: local, remote: remote}
}

// Write collects the CancelRequest and, once it is whole, sends it.
func (c *CancelConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sent || c.err != nil {
		return 0, errors.Join(errors.New("replay: a write after the CancelRequest"), c.err)
	}
	c.buf = append(c.buf, b...)
	if len(c.buf) < 8 {
		return len(b), nil
	}
	length := int(binary.BigEndian.Uint32(c.buf[:4]))
	if code := binary.BigEndian.Uint32(c.buf[4:8]); code != cancelRequestCode || length < 16 || length > maxCancel {
		c.err = fmt.Errorf("replay: the client wrote %d bytes with code %d where a CancelRequest was expected", length, code)
		return 0, c.err
	}
	if len(c.buf) < length {
		return len(b), nil
	}
	if len(c.buf) > length {
		c.err = errors.New("replay: bytes after the CancelRequest")
		return 0, c.err
	}
	c.sent = true
	pid := binary.BigEndian.Uint32(c.buf[8:12])
	if err := c.send(c.ctx, pid, c.buf[12:length]); err != nil {
		c.err = err
		return 0, err
	}
	return len(b), nil
}

// Read returns io.EOF once the CancelRequest has been sent.
func (c *CancelConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.sent {
		return 0, errors.New("replay: a read before the CancelRequest was written")
	}
	return 0, io.EOF
}

func (c *CancelConn) Close() error                     { return nil }
func (c *CancelConn) LocalAddr() net.Addr              { return c.local }
func (c *CancelConn) RemoteAddr() net.Addr             { return c.remote }
func (c *CancelConn) SetDeadline(time.Time) error      { return nil }
func (c *CancelConn) SetReadDeadline(time.Time) error  { return nil }
func (c *CancelConn) SetWriteDeadline(time.Time) error { return nil }

var (
	_ net.Conn = (*Conn)(nil)
	_ net.Conn = (*CancelConn)(nil)
)
