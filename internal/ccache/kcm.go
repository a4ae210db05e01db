package ccache

import (
	"bytes"
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
	"golang.org/x/sync/singleflight"
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
// Every exchange has a deadline of KCMTimeout on the socket; one connection per Cache is kept
// open and reused, and reopened once when a reused one fails (cc_kcm.c reconnects once on
// EPIPE; the daemon may have been restarted or have closed an idle connection).

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

const (
	// kcmMaxReply is the longest reply accepted, as MAX_REPLY_SIZE in cc_kcm.c.
	kcmMaxReply = 10 << 20
	// kcmMaxCreds bounds the credentials of one cache read one by one by UUID.
	kcmMaxCreds = 1 << 16
)

// KCMTimeout bounds each request and reply exchanged with a KCM daemon (and the connect): a
// daemon that does not answer within it gives an error, and its connection is closed. The
// daemon is local and answers from memory in well under a millisecond; sssd_kcm may take
// longer on its first request after a start on demand by systemd.
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
// adds a UUID. Concurrent Stamp calls share one such sequence (singleflight): a call may get
// the answer of a sequence that began just before it.
type kcmCache struct {
	residual string // "" = the default cache
	socket   string

	flight singleflight.Group

	mu   sync.Mutex // guards what follows, and one request sequence at a time
	conn net.Conn
	req  []byte  // request buffer, reused
	rep  []byte  // reply buffer, reused
	hdr  [8]byte // reply header
	name []byte  // the cache name of the current sequence, reused
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
	return &kcmCache{residual: residual, socket: socket}, nil
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

// dial opens the connection. A missing socket or one nobody listens on is errNoDaemon.
func (c *kcmCache) dial() error {
	conn, err := net.DialTimeout("unix", c.socket, KCMTimeout)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOTDIR) {
			return &errNoDaemon{err}
		}
		return err
	}
	c.conn = conn
	return nil
}

func (c *kcmCache) closeConn() {
	if c.conn != nil {
		_ = c.conn.Close()
		c.conn = nil
	}
}

// call sends one request (opcode, the cache name NUL-terminated unless name is nil, then
// extra) and returns the result after the op status. The result is in c.rep: valid until the
// next call. c.mu must be held.
func (c *kcmCache) call(op uint16, name, extra []byte) ([]byte, error) {
	for attempt := 0; ; attempt++ {
		fresh := c.conn == nil
		if fresh {
			if err := c.dial(); err != nil {
				return nil, err
			}
		}
		res, err := c.exchange(op, name, extra)
		var se *kcmStatusError
		if err == nil || errors.As(err, &se) {
			return res, err // an answer: the connection is in step
		}
		c.closeConn()
		var ne net.Error
		if fresh || attempt > 0 || errors.Is(err, errMalformed) || errors.As(err, &ne) && ne.Timeout() {
			return nil, err
		}
		// A reused connection failed in transport: once more on a new one.
	}
}

func (c *kcmCache) exchange(op uint16, name, extra []byte) ([]byte, error) {
	req := append(c.req[:0], 0, 0, 0, 0, 2, 0, byte(op>>8), byte(op))
	if name != nil {
		req = append(req, name...)
		req = append(req, 0)
	}
	req = append(req, extra...)
	binary.BigEndian.PutUint32(req, uint32(len(req)-4))
	c.req = req

	if err := c.conn.SetDeadline(time.Now().Add(KCMTimeout)); err != nil {
		return nil, err
	}
	if _, err := c.conn.Write(req); err != nil {
		return nil, c.ioError(op, err)
	}
	if _, err := io.ReadFull(c.conn, c.hdr[:]); err != nil {
		return nil, c.ioError(op, err)
	}
	n := binary.BigEndian.Uint32(c.hdr[0:4])
	outer := int32(binary.BigEndian.Uint32(c.hdr[4:8]))
	if n > kcmMaxReply {
		return nil, fmt.Errorf("%s: %w: %d bytes, over the limit of %d", kcmOpName(op), errMalformed, n, kcmMaxReply)
	}
	if cap(c.rep) < int(n) {
		c.rep = make([]byte, n)
	}
	rep := c.rep[:n]
	if _, err := io.ReadFull(c.conn, rep); err != nil {
		return nil, c.ioError(op, err)
	}
	if outer != 0 {
		return nil, &kcmStatusError{op: op, code: outer, outer: true}
	}
	if n < 4 {
		return nil, fmt.Errorf("%s: %w: %d bytes, no status", kcmOpName(op), errMalformed, n)
	}
	if status := int32(binary.BigEndian.Uint32(rep)); status != 0 {
		return nil, &kcmStatusError{op: op, code: status}
	}
	return rep[4:], nil
}

func (c *kcmCache) ioError(op uint16, err error) error {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("%s: no answer within %v: %w", kcmOpName(op), KCMTimeout, err)
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
// (GET_DEFAULT_CACHE: a NUL-terminated name). c.mu must be held.
func (c *kcmCache) cacheName() error {
	c.name = c.name[:0]
	if c.residual != "" {
		c.name = append(c.name, c.residual...)
		return nil
	}
	res, err := c.call(kcmOpGetDefaultCache, nil, nil)
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
// (gokrb5's GetEntries leaves those out).
func (c *kcmCache) Load() (*credentials.CCache, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.trim()
	principal, creds, err := c.load()
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

func (c *kcmCache) load() (principal []byte, creds [][]byte, err error) {
	if err := c.cacheName(); err != nil {
		return nil, nil, err
	}
	res, err := c.call(kcmOpGetPrincipal, c.name, nil)
	if err != nil {
		return nil, nil, err
	}
	if len(res) == 0 { // an initialized-but-empty answer: no cache (cc_kcm.c kcm_get_princ)
		return nil, nil, &kcmStatusError{op: kcmOpGetPrincipal, code: codeCCNotFound}
	}
	principal = bytes.Clone(res)
	creds, err = c.credList()
	if err != nil {
		var se *kcmStatusError
		if !errors.As(err, &se) || !se.unsupported() {
			return nil, nil, err
		}
		creds, err = c.credsByUUID()
		if err != nil {
			return nil, nil, err
		}
	}
	return principal, creds, nil
}

// credList is GET_CRED_LIST: u32 count, then count x {u32 length, credential record}.
func (c *kcmCache) credList() ([][]byte, error) {
	res, err := c.call(kcmOpGetCredList, c.name, nil)
	if err != nil {
		return nil, err
	}
	if len(res) < 4 {
		return nil, fmt.Errorf("GET_CRED_LIST: %w: no count", errMalformed)
	}
	count := binary.BigEndian.Uint32(res)
	if uint64(count) > uint64(len(res)-4)/4 {
		return nil, fmt.Errorf("GET_CRED_LIST: %w: %d credentials in %d bytes", errMalformed, count, len(res))
	}
	creds := make([][]byte, 0, count)
	p := 4
	for i := uint32(0); i < count; i++ {
		if len(res)-p < 4 {
			return nil, fmt.Errorf("GET_CRED_LIST: %w: credential %d cut short", errMalformed, i)
		}
		l := binary.BigEndian.Uint32(res[p:])
		p += 4
		if uint64(l) > uint64(len(res)-p) {
			return nil, fmt.Errorf("GET_CRED_LIST: %w: credential %d cut short", errMalformed, i)
		}
		creds = append(creds, bytes.Clone(res[p:p+int(l)]))
		p += int(l)
	}
	return creds, nil
}

// credsByUUID is GET_CRED_UUID_LIST (16-byte UUIDs to the end of the reply), then
// GET_CRED_BY_UUID for each. A credential removed in between (KRB5_CC_END) is left out.
func (c *kcmCache) credsByUUID() ([][]byte, error) {
	res, err := c.call(kcmOpGetCredUUIDList, c.name, nil)
	if err != nil {
		return nil, err
	}
	if len(res)%16 != 0 {
		return nil, fmt.Errorf("GET_CRED_UUID_LIST: %w: %d bytes, not whole UUIDs", errMalformed, len(res))
	}
	if len(res)/16 > kcmMaxCreds {
		return nil, fmt.Errorf("GET_CRED_UUID_LIST: %d credentials, over the limit of %d", len(res)/16, kcmMaxCreds)
	}
	uuids := bytes.Clone(res)
	var creds [][]byte
	for i := 0; i < len(uuids); i += 16 {
		cred, err := c.call(kcmOpGetCredByUUID, c.name, uuids[i:i+16])
		if err != nil {
			var se *kcmStatusError
			if errors.As(err, &se) && se.code == codeCCEnd {
				continue
			}
			return nil, err
		}
		creds = append(creds, bytes.Clone(cred))
	}
	return creds, nil
}

// Stamp costs one request-reply exchange on the open connection for KCM:name, two for KCM:
// (see kcmCache); against Heimdal's kcm 7.8 on loopback that measured 65 µs and 115 µs, 5 and 6
// allocations (BenchmarkKCMStamp). A missing daemon, like a missing cache, gives Present false
// and no error.
func (c *kcmCache) Stamp() (Stamp, error) {
	v, err, _ := c.flight.Do("", func() (any, error) {
		s, err := c.stamp()
		return s, err
	})
	if err != nil {
		return Stamp{}, err
	}
	return v.(Stamp), nil
}

func (c *kcmCache) stamp() (Stamp, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	err := c.cacheName()
	var res []byte
	if err == nil {
		res, err = c.call(kcmOpGetCredUUIDList, c.name, nil)
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
		principal, creds, err := c.load()
		if err != nil {
			if errors.As(err, &se) && se.noCache() {
				return Stamp{}, nil
			}
			return Stamp{}, c.fail(err)
		}
		h := fnv64a(principal)
		for _, cr := range creds {
			h = fnv64aMore(h, cr)
		}
		return Stamp{Present: true, A: fnv64a(c.name), B: h, C: uint64(len(creds)), D: 1}, nil
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
