package gss

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// MaxPacket is the largest GSSAPI-encrypted packet PostgreSQL sends or
// accepts, including its 4-byte length word (PQ_GSS_MAX_PACKET_SIZE in
// fe-secure-gssapi.c and be-secure-gssapi.c: "effectively part of the
// protocol spec").
const MaxPacket = 16384

// MaxAuthPacket is the largest context-establishment packet PostgreSQL
// accepts, including its 4-byte length word (PQ_GSS_AUTH_BUFFER_SIZE in
// current releases; older servers accept MaxPacket only). ReadToken callers
// may pass MaxAuthPacket-4 as max.
const MaxAuthPacket = 65536

// ErrServerErrorResponse is returned by ReadToken when the server answered
// with a PostgreSQL ErrorResponse instead of a length word. Its text is not
// read: it is unauthenticated.
var ErrServerErrorResponse = errors.New("gss: server sent an ErrorResponse instead of a GSSAPI token")

// WriteToken writes one context-establishment token as PostgreSQL frames it:
// an Int32 length in network byte order, not counting itself, then the token,
// in a single Write.
func WriteToken(w io.Writer, tok []byte) error {
	if len(tok) == 0 {
		return errors.New("gss: refusing to send an empty GSSAPI token")
	}
	if len(tok) > MaxAuthPacket-4 {
		return fmt.Errorf("gss: GSSAPI token of %d bytes exceeds the %d-byte limit", len(tok), MaxAuthPacket-4)
	}
	buf := make([]byte, 4, 4+len(tok))
	binary.BigEndian.PutUint32(buf, uint32(len(tok)))
	buf = append(buf, tok...)
	_, err := w.Write(buf)
	return err
}

// ReadToken reads one context-establishment token framed as by WriteToken. A
// length of 0 or above max is an error (nothing more is read), as is a first
// byte 'E' (ErrServerErrorResponse).
func ReadToken(r io.Reader, max int) ([]byte, error) {
	if max <= 0 {
		return nil, fmt.Errorf("gss: ReadToken: invalid maximum %d", max)
	}
	var lb [4]byte
	if _, err := io.ReadFull(r, lb[:1]); err != nil {
		return nil, fmt.Errorf("gss: reading GSSAPI token length: %w", err)
	}
	if lb[0] == 'E' {
		return nil, ErrServerErrorResponse
	}
	if _, err := io.ReadFull(r, lb[1:]); err != nil {
		return nil, fmt.Errorf("gss: reading GSSAPI token length: %w", noEOF(err))
	}
	n := binary.BigEndian.Uint32(lb[:])
	if n == 0 || uint64(n) > uint64(max) {
		return nil, fmt.Errorf("gss: GSSAPI token length %d out of range (1..%d)", n, max)
	}
	tok := make([]byte, n)
	if _, err := io.ReadFull(r, tok); err != nil {
		return nil, fmt.Errorf("gss: reading %d-byte GSSAPI token: %w", n, noEOF(err))
	}
	return tok, nil
}

// noEOF turns io.EOF inside a frame into io.ErrUnexpectedEOF.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// readBuffer is the size of a conn's read buffer on the raw connection: two
// full packets, so that a bulk transfer (COPY out, large rows) costs one read
// system call per two packets instead of two per packet (header, body). A
// timeout or other error from raw leaves what was buffered in place.
const readBuffer = 2 * MaxPacket

// conn is PostgreSQL's GSSAPI-encrypted transport over a raw connection.
type conn struct {
	raw      net.Conn
	rd       *bufio.Reader // reads raw: a packet's header and body, and often the next packets, in one system call
	w        *Wrapper
	maxChunk int

	// Read side, under rmu.
	rmu    sync.Mutex
	rlen   [4]byte
	rlenN  int    // bytes of rlen read so far
	rpkt   []byte // packet being read; len(rpkt) is the packet length once known
	rpktN  int    // bytes of rpkt read so far
	rbuf   []byte // reused backing buffer for rpkt (MaxPacket-4 bytes)
	plain  []byte // decrypted bytes not yet returned
	plainB []byte // backing buffer for plain
	rerr   error  // sticky: the stream can no longer be trusted

	// Write side, under wmu.
	wmu  sync.Mutex
	wbuf []byte
	werr error // sticky: a packet may have been cut, as in crypto/tls
}

// NewConn returns a net.Conn that carries its data over raw in PostgreSQL's
// GSSAPI encryption packets: each an Int32 length (network byte order, not
// counting itself) followed by one sealed wrap token, MaxPacket bytes at
// most. Reads are resumable after a timeout: a partly read packet is kept
// and completed on the next Read. A packet the real server cannot have sent
// (a length out of range, a wrap token failing one of Unwrap's checks) makes
// Read return an error that is negotiation.ErrGSSUnverified and the Unwrap
// error (ErrIntegrity, ErrSequence, ...) alike for errors.Is. After any
// other read failure, or any write failure (including a write timeout, since
// a packet may have been cut), the corresponding direction keeps returning
// that error. One Read and one Write may run concurrently. Close closes raw.
func NewConn(raw net.Conn, w *Wrapper) net.Conn {
	return &conn{raw: raw, rd: bufio.NewReaderSize(raw, readBuffer), w: w, maxChunk: w.MaxPlaintext(MaxPacket - 4)}
}

func (c *conn) Read(p []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	for len(c.plain) == 0 {
		if c.rerr != nil {
			return 0, c.rerr
		}
		if len(p) == 0 {
			return 0, nil
		}
		if err := c.readPacket(); err != nil {
			return 0, err
		}
	}
	n := copy(p, c.plain)
	c.plain = c.plain[n:]
	return n, nil
}

// readPacket reads (or goes on reading) one packet and decrypts it into
// c.plain. A timeout or other transient error leaves the partial state in
// place for the next call.
func (c *conn) readPacket() error {
	for c.rlenN < 4 {
		n, err := c.rd.Read(c.rlen[c.rlenN:])
		c.rlenN += n
		if c.rlenN == 4 {
			break
		}
		if err != nil {
			if err == io.EOF && c.rlenN > 0 {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
	}
	if c.rpkt == nil {
		size := binary.BigEndian.Uint32(c.rlen[:])
		if size == 0 || size > MaxPacket-4 {
			c.rerr = unverified(fmt.Errorf("gss: GSSAPI packet length %d out of range (1..%d)", size, MaxPacket-4))
			return c.rerr
		}
		if c.rbuf == nil {
			c.rbuf = make([]byte, MaxPacket-4)
		}
		c.rpkt = c.rbuf[:size]
		c.rpktN = 0
	}
	for c.rpktN < len(c.rpkt) {
		n, err := c.rd.Read(c.rpkt[c.rpktN:])
		c.rpktN += n
		if c.rpktN == len(c.rpkt) {
			break
		}
		if err != nil {
			return noEOF(err)
		}
	}
	out, err := c.w.Unwrap(c.plainB[:0], c.rpkt)
	c.rlenN, c.rpkt, c.rpktN = 0, nil, 0
	if err != nil {
		c.rerr = unverified(err)
		return c.rerr
	}
	c.plainB = out
	c.plain = out
	return nil
}

func (c *conn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.werr != nil {
		return 0, c.werr
	}
	if c.maxChunk <= 0 {
		c.werr = errors.New("gss: the wrap overhead leaves no room for data in a packet")
		return 0, c.werr
	}
	written := 0
	for written < len(p) {
		chunk := p[written:min(len(p), written+c.maxChunk)]
		if cap(c.wbuf) < 4 {
			c.wbuf = make([]byte, 4, MaxPacket)
		}
		buf, err := c.w.Wrap(c.wbuf[:4], chunk)
		if err != nil {
			c.werr = err
			return written, err
		}
		if len(buf)-4 > MaxPacket-4 {
			c.werr = fmt.Errorf("gss: wrap token of %d bytes does not fit in a packet", len(buf)-4)
			return written, c.werr
		}
		binary.BigEndian.PutUint32(buf[:4], uint32(len(buf)-4))
		c.wbuf = buf
		if _, err := c.raw.Write(buf); err != nil {
			c.werr = err
			return written, err
		}
		written += len(chunk)
	}
	return written, nil
}

func (c *conn) Close() error                       { return c.raw.Close() }
func (c *conn) LocalAddr() net.Addr                { return c.raw.LocalAddr() }
func (c *conn) RemoteAddr() net.Addr               { return c.raw.RemoteAddr() }
func (c *conn) SetDeadline(t time.Time) error      { return c.raw.SetDeadline(t) }
func (c *conn) SetReadDeadline(t time.Time) error  { return c.raw.SetReadDeadline(t) }
func (c *conn) SetWriteDeadline(t time.Time) error { return c.raw.SetWriteDeadline(t) }
