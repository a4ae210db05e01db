package ccache

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jcmturner/gokrb5/v8/credentials"
)

// KCM: a credential cache held by a daemon (Heimdal's kcm, sssd_kcm) and reached over a Unix
// socket, [libdefaults] kcm_socket (MIT src/lib/krb5/ccache/cc_kcm.c, src/include/kcm.h).
//
// Wire format (big-endian), as cc_kcm.c speaks it:
//
//	request: u32 length of the rest, u8 major 2, u8 minor 0, u16 opcode, arguments
//	reply:   u32 length L, u32 outer code, L bytes = u32 op status + result
//
// Arguments: cache names NUL-terminated, UUIDs 16 bytes. MIT reads the L bytes only when the
// outer code is 0 and then returns the op status (kcmio_unix_socket_read, kcmio_call); sssd
// reports unsupported operations and transport failures in the outer code with L = 0, Heimdal
// always inside. Replies over 10 MiB are refused (MAX_REPLY_SIZE).
//
// A request sequence (one Load, one Stamp: the connect and every request and reply) has one
// deadline on the socket, shared by all its exchanges: KCMTimeout from the start of the
// sequence, or the caller's context's deadline when that comes first; a context canceled ends
// the exchange at once. A daemon that answers each request just in time cannot stretch a
// sequence past it. One connection per Cache is kept open and reused, reopened once when a
// reused one fails (cc_kcm.c reconnects once on EPIPE; the daemon may have been restarted or
// have closed an idle connection), and closed by Close.
//
// The daemon is untrusted input: every reply's length prefix is checked against kcmMaxReply
// and against what is left of kcmMaxLoad before anything is allocated for it, the number of
// credentials against kcmMaxCreds, and each credential record is checked as it arrives and
// only its own bytes kept (never the reply it came in). MIT reads the credentials one at a
// time too (kcm_next_cred) but sets no bound but MAX_REPLY_SIZE on each reply.

// KCM opcodes (kcm.h).
const (
	kcmOpGetPrincipal    = 8
	kcmOpGetCredUUIDList = 9
	kcmOpGetCredByUUID   = 10
	kcmOpGetDefaultCache = 20
	kcmOpGetCredList     = 13001 // MIT extension, also in sssd; not in Heimdal
)

// Error codes of MIT's krb5_err.et that KCM daemons return.
const (
	codeCCNotFound  int32 = -1765328243 // KRB5_CC_NOTFOUND
	codeCCEnd       int32 = -1765328242 // KRB5_CC_END
	codeCCIO        int32 = -1765328191 // KRB5_CC_IO
	codeFCCNoFile   int32 = -1765328189 // KRB5_FCC_NOFILE
	codeFCCInternal int32 = -1765328188 // KRB5_FCC_INTERNAL
	codeCCNoSupp    int32 = -1765328137 // KRB5_CC_NOSUPP
)

// Bounds on what one request sequence (a Load, a Stamp) takes from a daemon. An exceeded bound
// is an error that names it; nothing is allocated for a reply before its length passed them.
const (
	// kcmMaxReply is the longest reply accepted, in bytes (the u32 length L of the reply
	// header), as MAX_REPLY_SIZE in cc_kcm.c.
	kcmMaxReply = 10 << 20
	// kcmMaxLoad is the most bytes (reply headers and bodies together) one request sequence
	// reads from the daemon: a cache of ordinary tickets (1-2 KiB each, tens of KiB with a
	// large PAC) is far below it; a daemon that answers with ever more large credentials
	// meets it after a few replies, not after gigabytes.
	kcmMaxLoad = 16 << 20
	// kcmMaxCreds bounds the credentials of one cache: the count of a GET_CRED_LIST reply,
	// the UUIDs of a GET_CRED_UUID_LIST reply (16 bytes each).
	kcmMaxCreds = 1 << 16
)

// KCMTimeout bounds each request sequence with a KCM daemon as a whole (a Load, a Stamp: the
// connect and every request and reply, one deadline shared by all): a daemon that has not
// answered the last request within it (or before the caller's context ends, when that comes
// first) gives an error that wraps os.ErrDeadlineExceeded (context.DeadlineExceeded for the
// context's), and its connection is closed. The daemon is local and answers from memory in
// well under a millisecond; sssd_kcm may take longer on its first request after a start on
// demand by systemd.
var KCMTimeout = 5 * time.Second

// kcmCache is KCM: (the default cache of the daemon, GET_DEFAULT_CACHE) or KCM:name.
//
// Load: [GET_DEFAULT_CACHE], GET_PRINCIPAL, then GET_CRED_LIST, or, where the daemon does not
// support it (Heimdal), GET_CRED_UUID_LIST and GET_CRED_BY_UUID for each (cc_kcm.c
// kcm_start_seq_get).
//
// Stamp: no KCM daemon has a change time or version; the stamp is [GET_DEFAULT_CACHE] +
// GET_CRED_UUID_LIST, the name and the UUID list hashed. Both Heimdal and sssd mint a random
// UUID for every credential stored (Heimdal kcm/cache.c, sssd kcmsrv_ccache.c), kinit stores
// afresh (REPLACE, or INITIALIZE + STORE), kdestroy removes the cache (the list fails with a
// no-cache code: Present false), kswitch changes the default name, and a new service ticket
// adds a UUID.
//
// Concurrent Stamp calls share sequences, but a call never takes the answer of a sequence that
// began before it: one sequence runs at a time, and the calls that come while it runs wait for
// it to end and then share the next one (at most one running, one batch waiting). A call waits
// until its context ends at most; the sequence it leaves goes on, bounded by KCMTimeout and the
// latest deadline among the callers that share it.
type kcmCache struct {
	residual string // "" = the default cache
	socket   string

	// seq is held (a value in it) by the one request sequence that uses the connection and
	// the buffers below; a channel, so that waiting for it can end with a context.
	seq  chan struct{}
	req  []byte  // request buffer, reused
	rep  []byte  // reply buffer, reused
	hdr  [8]byte // reply header
	name []byte  // the cache name of the current sequence, reused

	connMu sync.Mutex // guards conn and closed; never held across I/O
	conn   net.Conn
	closed bool

	stampMu  sync.Mutex
	stopped  bool           // Close was called: no more Stamp sequences start
	running  *stampBatch    // the Stamp sequence running, nil if none
	waiting  *stampBatch    // the callers that came while it runs, nil if none
	stampers sync.WaitGroup // the goroutines running Stamp sequences
}

// stampBatch is one Stamp sequence and the callers that share it.
type stampBatch struct {
	done  chan struct{} // closed when st and err are set
	st    Stamp
	err   error
	limit time.Time // the latest deadline among the callers; zero: one had none
}

func newKCM(residual string, opts Options) (Cache, error) {
	if strings.IndexByte(residual, 0) >= 0 {
		return nil, errors.New("credential cache KCM: the name contains a NUL byte")
	}
	socket := opts.KCMSocket
	switch socket {
	case "":
		socket = DefaultKCMSocket
	case "-":
		return nil, fmt.Errorf("credential cache KCM:%s: KCM is disabled (kcm_socket = -)", residual)
	}
	return &kcmCache{residual: residual, socket: socket, seq: make(chan struct{}, 1)}, nil
}

func (c *kcmCache) Name() string { return "KCM:" + c.residual }

// kcmStatusError is an error code from a KCM daemon, outer or op status.
type kcmStatusError struct {
	op    uint16
	code  int32
	outer bool
}

func (e *kcmStatusError) Error() string {
	where := ""
	if e.outer {
		where = " (outer code)"
	}
	return fmt.Sprintf("%s: %s%s", kcmOpName(e.op), kcmCodeName(e.code), where)
}

// noCache reports a code that means the cache does not exist (destroyed, never made, or gone
// while being read).
func (e *kcmStatusError) noCache() bool {
	return e.code == codeCCNotFound || e.code == codeFCCNoFile || e.code == codeCCEnd
}

// unsupported reports a code a daemon gives for an operation it does not implement: Heimdal
// and older sssd KRB5_FCC_INTERNAL, sssd 2.4+ KRB5_CC_NOSUPP or KRB5_CC_IO.
func (e *kcmStatusError) unsupported() bool {
	return e.code == codeFCCInternal || e.code == codeCCNoSupp || e.code == codeCCIO
}

func kcmCodeName(code int32) string {
	switch code {
	case codeCCNotFound:
		return "KRB5_CC_NOTFOUND"
	case codeCCEnd:
		return "KRB5_CC_END"
	case codeCCIO:
		return "KRB5_CC_IO"
	case codeFCCNoFile:
		return "KRB5_FCC_NOFILE"
	case codeFCCInternal:
		return "KRB5_FCC_INTERNAL"
	case codeCCNoSupp:
		return "KRB5_CC_NOSUPP"
	}
	return fmt.Sprintf("error code %d", code)
}

func kcmOpName(op uint16) string {
	switch op {
	case kcmOpGetPrincipal:
		return "GET_PRINCIPAL"
	case kcmOpGetCredUUIDList:
		return "GET_CRED_UUID_LIST"
	case kcmOpGetCredByUUID:
		return "GET_CRED_BY_UUID"
	case kcmOpGetDefaultCache:
		return "GET_DEFAULT_CACHE"
	case kcmOpGetCredList:
		return "GET_CRED_LIST"
	}
	return fmt.Sprintf("opcode %d", op)
}

// errNoDaemon marks a socket nobody listens on.
type errNoDaemon struct{ err error }

func (e *errNoDaemon) Error() string { return e.err.Error() }
func (e *errNoDaemon) Unwrap() error { return e.err }

// errMalformed marks a reply that does not parse.
var errMalformed = errors.New("malformed reply")

// errTooLarge marks a cache over one of the bounds of a request sequence (kcmMaxLoad,
// kcmMaxCreds).
var errTooLarge = errors.New("credential cache too large")

// kcmSeq is one request sequence: its context, the deadline that context sets (zero: none),
// the end KCMTimeout sets, and the bytes read so far (bounded by kcmMaxLoad).
type kcmSeq struct {
	ctx   context.Context
	limit time.Time
	end   time.Time
	read  int
}

// newSeq starts a request sequence now, bounded by KCMTimeout and limit (zero: none).
func newSeq(ctx context.Context, limit time.Time) *kcmSeq {
	return &kcmSeq{ctx: ctx, limit: limit, end: time.Now().Add(KCMTimeout)}
}

// deadline is the deadline of every exchange of the sequence: its end, or its limit when that
// comes first (fromLimit).
func (s *kcmSeq) deadline() (d time.Time, fromLimit bool) {
	if !s.limit.IsZero() && !s.end.Before(s.limit) {
		return s.limit, true
	}
	return s.end, false
}

// dial opens the connection. A missing socket or one nobody listens on is errNoDaemon.
func (c *kcmCache) dial(s *kcmSeq) (net.Conn, error) {
	d, _ := s.deadline()
	conn, err := (&net.Dialer{Deadline: d}).DialContext(s.ctx, "unix", c.socket)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOTDIR) {
			return nil, &errNoDaemon{err}
		}
		return nil, err
	}
	c.connMu.Lock()
	defer c.connMu.Unlock()
	if c.closed {
		_ = conn.Close()
		return nil, ErrClosed
	}
	c.conn = conn
	return conn, nil
}

// connection returns the open connection, or nil.
func (c *kcmCache) connection() (net.Conn, error) {
	c.connMu.Lock()
	defer c.connMu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	return c.conn, nil
}

// dropConn closes conn, and forgets it if it is still the open one.
func (c *kcmCache) dropConn(conn net.Conn) {
	_ = conn.Close()
	c.connMu.Lock()
	if c.conn == conn {
		c.conn = nil
	}
	c.connMu.Unlock()
}

// Close closes the connection to the daemon, interrupting an exchange in progress, and waits
// for the request sequences running to end (at once: their connection is gone). Stamp and
// Load fail afterwards with an error that wraps ErrClosed; nothing opens a connection again.
func (c *kcmCache) Close() error {
	c.connMu.Lock()
	c.closed = true
	conn := c.conn
	c.conn = nil
	c.connMu.Unlock()
	if conn != nil {
		_ = conn.Close()
	}
	c.stampMu.Lock()
	c.stopped = true
	c.stampMu.Unlock()
	c.seq <- struct{}{} // a Load in progress ends
	<-c.seq
	c.stampers.Wait()
	return nil
}

// lock takes c.seq, waiting until ctx ends at most.
func (c *kcmCache) lock(ctx context.Context) error {
	select {
	case c.seq <- struct{}{}:
		return nil
	default:
	}
	select {
	case c.seq <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *kcmCache) unlock() { <-c.seq }

// call sends one request (opcode, the cache name NUL-terminated unless name is nil, then
// extra) and returns the result after the op status. The result is in c.rep: valid until the
// next call. c.seq must be held.
func (c *kcmCache) call(s *kcmSeq, op uint16, name, extra []byte) ([]byte, error) {
	for attempt := 0; ; attempt++ {
		if err := s.ctx.Err(); err != nil {
			return nil, fmt.Errorf("%s: %w", kcmOpName(op), err)
		}
		conn, err := c.connection()
		if err != nil {
			return nil, err
		}
		fresh := conn == nil
		if fresh {
			if conn, err = c.dial(s); err != nil {
				if cerr := s.ctx.Err(); cerr != nil {
					return nil, fmt.Errorf("connecting: %w", cerr)
				}
				return nil, err
			}
		}
		res, fromLimit, err := c.exchange(s, conn, op, name, extra)
		var se *kcmStatusError
		if err == nil || errors.As(err, &se) {
			return res, err // an answer: the connection is in step
		}
		c.dropConn(conn)
		var ne net.Error
		timeout := errors.As(err, &ne) && ne.Timeout()
		if cerr := s.ctx.Err(); cerr != nil {
			return nil, fmt.Errorf("%s: %w", kcmOpName(op), cerr)
		}
		if _, cerr := c.connection(); cerr != nil {
			return nil, cerr // closed meanwhile
		}
		if timeout && fromLimit {
			return nil, fmt.Errorf("%s: no answer before the deadline: %w", kcmOpName(op), context.DeadlineExceeded)
		}
		if fresh || attempt > 0 || errors.Is(err, errMalformed) || errors.Is(err, errTooLarge) || timeout || errors.Is(err, net.ErrClosed) {
			return nil, err
		}
		// A reused connection failed in transport: once more on a new one.
	}
}

func (c *kcmCache) exchange(s *kcmSeq, conn net.Conn, op uint16, name, extra []byte) (res []byte, fromLimit bool, err error) {
	req := append(c.req[:0], 0, 0, 0, 0, 2, 0, byte(op>>8), byte(op))
	if name != nil {
		req = append(req, name...)
		req = append(req, 0)
	}
	req = append(req, extra...)
	binary.BigEndian.PutUint32(req, uint32(len(req)-4))
	c.req = req

	d, fromLimit := s.deadline()
	if err := conn.SetDeadline(d); err != nil {
		return nil, fromLimit, err
	}
	// After the deadline is set: a cancel that came before it is seen here, one that comes
	// after it moves the deadline to the past (see Load).
	if err := s.ctx.Err(); err != nil {
		return nil, fromLimit, err
	}
	if _, err := conn.Write(req); err != nil {
		return nil, fromLimit, c.ioError(op, err)
	}
	if _, err := io.ReadFull(conn, c.hdr[:]); err != nil {
		return nil, fromLimit, c.ioError(op, err)
	}
	n := binary.BigEndian.Uint32(c.hdr[0:4])
	outer := int32(binary.BigEndian.Uint32(c.hdr[4:8]))
	if n > kcmMaxReply {
		return nil, fromLimit, fmt.Errorf("%s: %w: %d bytes, over the limit of %d bytes for one reply", kcmOpName(op), errMalformed, n, kcmMaxReply)
	}
	s.read += len(c.hdr)
	if uint64(s.read)+uint64(n) > kcmMaxLoad {
		return nil, fromLimit, fmt.Errorf("%s: %w: a reply of %d bytes after %d read, over the limit of %d bytes for one read of the cache",
			kcmOpName(op), errTooLarge, n, s.read, kcmMaxLoad)
	}
	s.read += int(n)
	if cap(c.rep) < int(n) {
		c.rep = make([]byte, n)
	}
	rep := c.rep[:n]
	if _, err := io.ReadFull(conn, rep); err != nil {
		return nil, fromLimit, c.ioError(op, err)
	}
	if outer != 0 {
		return nil, fromLimit, &kcmStatusError{op: op, code: outer, outer: true}
	}
	if n < 4 {
		return nil, fromLimit, fmt.Errorf("%s: %w: %d bytes, no status", kcmOpName(op), errMalformed, n)
	}
	if status := int32(binary.BigEndian.Uint32(rep)); status != 0 {
		return nil, fromLimit, &kcmStatusError{op: op, code: status}
	}
	return rep[4:], fromLimit, nil
}

func (c *kcmCache) ioError(op uint16, err error) error {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("%s: no answer within %v (KCMTimeout, for the whole request sequence): %w", kcmOpName(op), KCMTimeout, err)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%s: reply cut short: %w", kcmOpName(op), err)
	}
	return fmt.Errorf("%s: %w", kcmOpName(op), err)
}

// fail turns an error of a request sequence into the error of the cache: ErrNoCache wrapped for
// a missing daemon or cache.
func (c *kcmCache) fail(err error) error {
	var nd *errNoDaemon
	if errors.As(err, &nd) {
		return fmt.Errorf("credential cache %s: %w: no KCM daemon at %s (%w)", c.Name(), ErrNoCache, c.socket, nd.err)
	}
	var se *kcmStatusError
	if errors.As(err, &se) && se.noCache() {
		return fmt.Errorf("credential cache %s: %w (KCM daemon at %s: %w)", c.displayName(), ErrNoCache, c.socket, err)
	}
	return fmt.Errorf("credential cache %s: KCM daemon at %s: %w", c.displayName(), c.socket, err)
}

// displayName is the name with the default cache's name filled in once known, as klist shows
// it (KCM:0 for KCM:).
func (c *kcmCache) displayName() string {
	if c.residual == "" && len(c.name) > 0 {
		return "KCM:" + string(c.name)
	}
	return c.Name()
}

// cacheName sets c.name to the residual, or to the daemon's default cache name
// (GET_DEFAULT_CACHE: a NUL-terminated name). c.seq must be held.
func (c *kcmCache) cacheName(s *kcmSeq) error {
	c.name = c.name[:0]
	if c.residual != "" {
		c.name = append(c.name, c.residual...)
		return nil
	}
	res, err := c.call(s, kcmOpGetDefaultCache, nil, nil)
	if err != nil {
		return err
	}
	end := bytes.IndexByte(res, 0)
	if end <= 0 {
		return fmt.Errorf("GET_DEFAULT_CACHE: %w: no NUL-terminated name", errMalformed)
	}
	c.name = append(c.name, res[:end]...)
	return nil
}

// Load reads the cache: its principal and every credential, configuration entries included
// (gokrb5's GetEntries leaves those out). It waits for a request sequence in progress (another
// Load, a Stamp) and for the daemon until ctx ends at most: then an error that wraps ctx's.
// The sequence itself is bounded by KCMTimeout as a whole, and what it reads by kcmMaxReply,
// kcmMaxLoad and kcmMaxCreds (see kcmCache): a bound exceeded is an error naming it.
func (c *kcmCache) Load(ctx context.Context) (*credentials.CCache, error) {
	if err := c.lock(ctx); err != nil {
		return nil, fmt.Errorf("credential cache %s: waiting for the KCM connection: %w", c.Name(), err)
	}
	defer c.unlock()
	defer c.trim()
	limit, _ := ctx.Deadline()
	s := newSeq(ctx, limit)
	// A cancel (not a deadline) ends the exchange in progress: its deadline moves to the past.
	stop := context.AfterFunc(ctx, func() {
		c.connMu.Lock()
		if c.conn != nil {
			_ = c.conn.SetDeadline(time.Unix(1, 0))
		}
		c.connMu.Unlock()
	})
	defer stop()
	// The credential records, each checked as it arrives and copied out of the reply (a copy
	// of its own size: together bounded by kcmMaxLoad, as everything read).
	var creds [][]byte
	principal, err := c.load(s, func(cred []byte) error {
		if err := checkCredential(cred); err != nil {
			return fmt.Errorf("credential record %d: %w", len(creds), err)
		}
		creds = append(creds, bytes.Clone(cred))
		return nil
	})
	if err != nil {
		return nil, c.fail(err)
	}
	cc, err := fromRecords(principal, creds)
	if err != nil {
		return nil, fmt.Errorf("credential cache %s: KCM daemon at %s: %w", c.displayName(), c.socket, err)
	}
	return cc, nil
}

// trim drops a large reply buffer rather than keep it for the life of the Cache.
func (c *kcmCache) trim() {
	if cap(c.rep) > 64<<10 {
		c.rep = nil
	}
}

// load reads the principal (returned, a copy) and hands each credential record to each, one
// at a time as it arrives: the record is valid only during the call. An error of each ends the
// sequence with it.
func (c *kcmCache) load(s *kcmSeq, each func(cred []byte) error) (principal []byte, err error) {
	if err := c.cacheName(s); err != nil {
		return nil, err
	}
	res, err := c.call(s, kcmOpGetPrincipal, c.name, nil)
	if err != nil {
		return nil, err
	}
	if len(res) == 0 { // an initialized-but-empty answer: no cache (cc_kcm.c kcm_get_princ)
		return nil, &kcmStatusError{op: kcmOpGetPrincipal, code: codeCCNotFound}
	}
	principal = bytes.Clone(res)
	n, err := c.credList(s, each)
	if err != nil {
		var se *kcmStatusError
		if n > 0 || !errors.As(err, &se) || !se.unsupported() {
			return nil, err
		}
		if err := c.credsByUUID(s, each); err != nil {
			return nil, err
		}
	}
	return principal, nil
}

// credList is GET_CRED_LIST: u32 count (at most kcmMaxCreds), then count x {u32 length,
// credential record}; each record is handed to each in turn. n is the number handed.
func (c *kcmCache) credList(s *kcmSeq, each func([]byte) error) (n int, err error) {
	res, err := c.call(s, kcmOpGetCredList, c.name, nil)
	if err != nil {
		return 0, err
	}
	if len(res) < 4 {
		return 0, fmt.Errorf("GET_CRED_LIST: %w: no count", errMalformed)
	}
	count := binary.BigEndian.Uint32(res)
	if uint64(count) > uint64(len(res)-4)/4 {
		return 0, fmt.Errorf("GET_CRED_LIST: %w: %d credentials in %d bytes", errMalformed, count, len(res))
	}
	if count > kcmMaxCreds {
		return 0, fmt.Errorf("GET_CRED_LIST: %w: %d credentials, over the limit of %d", errTooLarge, count, kcmMaxCreds)
	}
	p := 4
	for i := uint32(0); i < count; i++ {
		if len(res)-p < 4 {
			return n, fmt.Errorf("GET_CRED_LIST: %w: credential %d cut short", errMalformed, i)
		}
		l := binary.BigEndian.Uint32(res[p:])
		p += 4
		if uint64(l) > uint64(len(res)-p) {
			return n, fmt.Errorf("GET_CRED_LIST: %w: credential %d cut short", errMalformed, i)
		}
		n++
		if err := each(res[p : p+int(l)]); err != nil {
			return n, err
		}
		p += int(l)
	}
	return n, nil
}

// credsByUUID is GET_CRED_UUID_LIST (16-byte UUIDs to the end of the reply, at most
// kcmMaxCreds), then GET_CRED_BY_UUID for each, handed to each as it arrives. A credential
// removed in between (KRB5_CC_END) is left out.
func (c *kcmCache) credsByUUID(s *kcmSeq, each func([]byte) error) error {
	res, err := c.call(s, kcmOpGetCredUUIDList, c.name, nil)
	if err != nil {
		return err
	}
	if len(res)%16 != 0 {
		return fmt.Errorf("GET_CRED_UUID_LIST: %w: %d bytes, not whole UUIDs", errMalformed, len(res))
	}
	if len(res)/16 > kcmMaxCreds {
		return fmt.Errorf("GET_CRED_UUID_LIST: %w: %d credentials, over the limit of %d", errTooLarge, len(res)/16, kcmMaxCreds)
	}
	uuids := bytes.Clone(res)
	for i := 0; i < len(uuids); i += 16 {
		cred, err := c.call(s, kcmOpGetCredByUUID, c.name, uuids[i:i+16])
		if err != nil {
			var se *kcmStatusError
			if errors.As(err, &se) && se.code == codeCCEnd {
				continue
			}
			return err
		}
		if err := each(cred); err != nil {
			return err
		}
	}
	return nil
}

// Stamp costs one request-reply exchange on the open connection for KCM:name, two for KCM:
// (see kcmCache); against Heimdal's kcm 7.8 on loopback that measured about 75 µs and 105 µs,
// 6 allocations, the goroutine and batch of the sequence included (BenchmarkKCMStamp). A missing daemon, like a missing cache, gives Present false
// and no error. The sequence runs in a goroutine of its own, shared by the callers of its batch
// (see kcmCache); a caller whose ctx ends returns at once with an error that wraps ctx's.
func (c *kcmCache) Stamp(ctx context.Context) (Stamp, error) {
	if err := ctx.Err(); err != nil {
		return Stamp{}, fmt.Errorf("credential cache %s: %w", c.Name(), err)
	}
	limit, bounded := ctx.Deadline()
	c.stampMu.Lock()
	var b *stampBatch
	switch {
	case c.stopped:
		c.stampMu.Unlock()
		return Stamp{}, fmt.Errorf("credential cache %s: %w", c.Name(), ErrClosed)
	case c.running == nil:
		b = &stampBatch{done: make(chan struct{}), limit: limit}
		c.running = b
		c.stampers.Add(1)
		go c.runStamps(b)
	case c.waiting == nil:
		b = &stampBatch{done: make(chan struct{}), limit: limit}
		c.waiting = b
	default:
		b = c.waiting
		if !bounded || !b.limit.IsZero() && limit.After(b.limit) {
			b.limit = limit // the latest; zero (none) stays
		}
	}
	c.stampMu.Unlock()
	select {
	case <-b.done:
		return b.st, b.err
	case <-ctx.Done():
		return Stamp{}, fmt.Errorf("credential cache %s: %w", c.Name(), ctx.Err())
	}
}

// runStamps runs the sequence of b, then that of the batch that waited meanwhile, if any, and
// so on.
func (c *kcmCache) runStamps(b *stampBatch) {
	defer c.stampers.Done()
	for b != nil {
		c.stampMu.Lock()
		limit := b.limit // fixed from here: later callers join the next batch
		c.stampMu.Unlock()
		b.st, b.err = c.stamp(limit)
		close(b.done)
		c.stampMu.Lock()
		b = c.waiting
		c.waiting, c.running = nil, b
		c.stampMu.Unlock()
	}
}

// stamp runs one Stamp sequence, bounded by KCMTimeout from its start and by limit (zero:
// none).
func (c *kcmCache) stamp(limit time.Time) (Stamp, error) {
	c.seq <- struct{}{} // a Load holds it until its own deadline or KCMTimeout at most
	defer c.unlock()
	s := newSeq(context.Background(), limit)
	err := c.cacheName(s)
	var res []byte
	if err == nil {
		res, err = c.call(s, kcmOpGetCredUUIDList, c.name, nil)
	}
	var se *kcmStatusError
	var nd *errNoDaemon
	switch {
	case err == nil:
		return Stamp{Present: true, A: fnv64a(c.name), B: fnv64a(res), C: uint64(len(res))}, nil
	case errors.As(err, &nd) || errors.As(err, &se) && se.noCache():
		return Stamp{}, nil
	case errors.As(err, &se) && se.unsupported():
		// No UUID list: fingerprint the whole cache instead.
		// Hashed one credential at a time; none kept.
		h, n := uint64(fnvOffset64), 0
		principal, err := c.load(s, func(cred []byte) error {
			h = fnv64aMore(h, cred)
			n++
			return nil
		})
		if err != nil {
			if errors.As(err, &se) && se.noCache() {
				return Stamp{}, nil
			}
			return Stamp{}, c.fail(err)
		}
		h = fnv64aMore(h, principal)
		return Stamp{Present: true, A: fnv64a(c.name), B: h, C: uint64(n), D: 1}, nil
	}
	return Stamp{}, c.fail(err)
}

const fnvOffset64, fnvPrime64 = 14695981039346656037, 1099511628211

func fnv64a(b []byte) uint64 { return fnv64aMore(fnvOffset64, b) }

func fnv64aMore(h uint64, b []byte) uint64 {
	for _, x := range b {
		h ^= uint64(x)
		h *= fnvPrime64
	}
	return h
}
