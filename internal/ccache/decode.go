package ccache

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/jcmturner/gokrb5/v8/credentials"
	"github.com/jcmturner/gokrb5/v8/types"
)

// decoder reads the principal and credential records of MIT's ccache formats (ccmarshal.c
// k5_unmarshal_princ, k5_unmarshal_cred; the FILE layout of cc_file.c) into gokrb5's types,
// bounded by its input: every count and length is checked against the bytes that remain before
// anything is allocated, so that decoding b allocates at most decodeAllocFactor*len(b) +
// decodeAllocConst bytes, whatever b holds (FuzzFileCache checks it).
//
// It replaces gokrb5's credentials.CCache.Unmarshal, which sizes slices from the counts it
// reads (2^31-1 addresses: a 64 GiB make, a fatal out-of-memory that recover cannot catch) and
// indexes past the end of short input. It fills the same fields with the same values as
// Unmarshal does for well-formed input (TestFileCacheVersions with caches MIT's kinit writes in
// each format version; FuzzFileCache and FuzzRecords with any input both accept), except the
// v4 header, which gokrb5 keeps unexported and nothing reads.
type decoder struct {
	b       []byte // what remains
	order   binary.ByteOrder
	version byte // 1 to 4: version 1 principals have no name type and count the realm
	err     error
}

// The allocation bound of decoder, in bytes. The costliest inputs are many empty principal
// components (4 input bytes, a 16-byte string header each: 4.0 bytes per input byte, measured),
// addresses or authorization data entries (6 input bytes, a 32-byte entry each: 5.3), and
// minimal credentials (59 bytes in version 1, each a gokrb5 Credential and its pointer: 7.1).
// gokrb5's Unmarshal, for comparison, allocates 24 to 47 bytes per input byte on the same
// inputs, when their counts do not make it fail first.
const (
	decodeAllocFactor = 16
	decodeAllocConst  = 64 << 10
)

var errShort = errors.New("cut short")

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf(format, args...)
	}
}

func (d *decoder) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n > len(d.b) {
		d.err = errShort
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) u8() byte {
	if v := d.take(1); v != nil {
		return v[0]
	}
	return 0
}

func (d *decoder) u16() uint16 {
	if v := d.take(2); v != nil {
		return d.order.Uint16(v)
	}
	return 0
}

func (d *decoder) u32() uint32 {
	if v := d.take(4); v != nil {
		return d.order.Uint32(v)
	}
	return 0
}

// count reads a u32 count of items of at least min bytes each and checks that they can fit in
// what remains, before anything is sized by it.
func (d *decoder) count(what string, min int) int {
	n := d.u32()
	if d.err == nil && uint64(n) > uint64(len(d.b))/uint64(min) {
		d.fail("%d %s in %d bytes", n, what, len(d.b))
		return 0
	}
	return int(n)
}

// data is a u32 length and that many bytes, copied: never nil, as gokrb5 makes it.
func (d *decoder) data() []byte {
	n := d.u32()
	if d.err == nil && uint64(n) > uint64(len(d.b)) {
		d.fail("data of %d bytes in %d", n, len(d.b))
	}
	v := d.take(int(n))
	if d.err != nil {
		return nil
	}
	return append(make([]byte, 0, len(v)), v...)
}

// str is data as a string.
func (d *decoder) str() string {
	n := d.u32()
	if d.err == nil && uint64(n) > uint64(len(d.b)) {
		d.fail("data of %d bytes in %d", n, len(d.b))
	}
	return string(d.take(int(n)))
}

// principal reads a principal record: u32 name type (not in version 1), u32 component count
// (version 1: counting the realm), the realm, the components; each u32 length + bytes.
func (d *decoder) principal() (realm string, name types.PrincipalName) {
	if d.version != 1 {
		name.NameType = int32(d.u32())
	}
	n := d.count("principal components", 4)
	if d.version == 1 {
		if n == 0 && d.err == nil {
			d.fail("principal with no realm")
		}
		n--
	}
	realm = d.str()
	if n > 0 && d.err == nil {
		name.NameString = make([]string, n)
		for i := range name.NameString {
			name.NameString[i] = d.str()
		}
	}
	if d.err != nil {
		return "", types.PrincipalName{}
	}
	return realm, name
}

// credential reads one credential record (k5_unmarshal_cred; version 3 writes the enctype
// twice).
func (d *decoder) credential() *credentials.Credential {
	c := new(credentials.Credential)
	c.Client.Realm, c.Client.PrincipalName = d.principal()
	c.Server.Realm, c.Server.PrincipalName = d.principal()
	c.Key.KeyType = int32(int16(d.u16()))
	if d.version == 3 {
		c.Key.KeyType = int32(int16(d.u16()))
	}
	c.Key.KeyValue = d.data()
	// gokrb5 reads the times as signed 32-bit seconds.
	c.AuthTime = time.Unix(int64(int32(d.u32())), 0)
	c.StartTime = time.Unix(int64(int32(d.u32())), 0)
	c.EndTime = time.Unix(int64(int32(d.u32())), 0)
	c.RenewTill = time.Unix(int64(int32(d.u32())), 0)
	c.IsSKey = d.u8() != 0
	c.TicketFlags = types.NewKrbFlags()
	if f := d.take(4); f != nil {
		copy(c.TicketFlags.Bytes, f)
	}
	if n := d.count("addresses", 6); d.err == nil {
		c.Addresses = make([]types.HostAddress, n)
		for i := range c.Addresses {
			c.Addresses[i].AddrType = int32(int16(d.u16()))
			c.Addresses[i].Address = d.data()
		}
	}
	if n := d.count("authorization data entries", 6); d.err == nil {
		c.AuthData = make([]types.AuthorizationDataEntry, n)
		for i := range c.AuthData {
			c.AuthData[i].ADType = int32(int16(d.u16()))
			c.AuthData[i].ADData = d.data()
		}
	}
	c.Ticket = d.data()
	c.SecondTicket = d.data()
	if d.err != nil {
		return nil
	}
	return c
}

// parseFile decodes a FILE cache image (cc_file.c): 0x05, the version (1 to 4; 1 and 2 in host
// byte order, 3 and 4 big-endian), for version 4 a u16 header length and that many bytes of
// {u16 tag, u16 length, value} fields (tag 1, the KDC time offset, is 8 bytes), the default
// principal, then credential records to the end of the file. Anything else is an error that
// says what and where; it never holds the file's bytes. It allocates at most
// decodeAllocFactor*len(b) + decodeAllocConst bytes.
func parseFile(b []byte) (*credentials.CCache, error) {
	if len(b) < 2 || b[0] != 5 {
		if len(b) == 0 {
			return nil, errors.New("empty file")
		}
		return nil, fmt.Errorf("not a credential cache: first byte 0x%02x, want 0x05", b[0])
	}
	v := b[1]
	if v < 1 || v > 4 {
		return nil, fmt.Errorf("not a credential cache: format version %d, want 1 to 4", v)
	}
	d := &decoder{b: b[2:], order: binary.BigEndian, version: v}
	if v <= 2 {
		d.order = binary.NativeEndian // written in host byte order (cc_file.c)
	}
	if v == 4 {
		h := &decoder{b: d.take(int(d.u16())), order: binary.BigEndian}
		if d.err != nil {
			return nil, errors.New("malformed header: cut short")
		}
		for len(h.b) > 0 && h.err == nil {
			tag, n := h.u16(), h.u16()
			h.take(int(n))
			if h.err == nil && tag == 1 && n != 8 {
				h.fail("KDC time offset of %d bytes, want 8", n)
			}
		}
		if h.err != nil {
			return nil, fmt.Errorf("malformed header: %w", h.err)
		}
	}
	cc := &credentials.CCache{Version: v}
	cc.DefaultPrincipal.Realm, cc.DefaultPrincipal.PrincipalName = d.principal()
	if d.err != nil {
		return nil, fmt.Errorf("malformed default principal: %w", d.err)
	}
	for i := 0; len(d.b) > 0; i++ {
		start := len(b) - len(d.b)
		c := d.credential()
		if d.err != nil {
			return nil, fmt.Errorf("malformed credential %d at byte %d: %w", i, start, d.err)
		}
		cc.Credentials = append(cc.Credentials, c)
	}
	return cc, nil
}
