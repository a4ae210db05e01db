// Package keytabfile reads a client keytab (KRB5_CLIENT_KTNAME, pgconnector.Kerberos
// ClientKeytab) as untrusted input, for gokrb5.
//
// gokrb5's keytab.Load reads the path with os.ReadFile, which waits forever on a FIFO, reads a
// device without end and sizes its buffer by the file's size (a sparse file of a terabyte
// takes a few kilobytes of disk); its Unmarshal allocates about 90 bytes per byte of a file of
// empty principal components, and its errors quote the keytab's bytes, keys included. Load
// here opens only a regular file of at most MaxSize bytes, checks every length and count of
// MIT's format against the bytes left before gokrb5 sees them, and hands gokrb5 only the
// entries of the principal asked for. Its errors name the file and the problem, never its
// contents.
//
// The format is MIT's (https://web.mit.edu/kerberos/krb5-latest/doc/formats/keytab_file_format.html,
// lib/krb5/keytab/kt_file.c): 05 01 (integers in the host's byte order) or 05 02 (big-endian),
// then records of a signed 32-bit length (negative: a hole of that many bytes, skipped; zero or
// fewer than 4 bytes left: the end) followed by: a 16-bit component count (in version 1
// counting the realm too), the realm and each component as a 16-bit length and bytes, a 32-bit
// name type (version 2 only), a 32-bit timestamp, an 8-bit key version, a 16-bit enctype, the
// key as a 16-bit length and bytes, and an optional 32-bit key version. Bytes of a record past
// these are ignored, as MIT ignores them. A count or length that is zero or negative, or that
// goes past the record, makes the whole keytab unusable: MIT's kt_file.c stops reading at
// such an entry (KRB5_KT_END), using the entries before it; refusing says what is wrong.
package keytabfile

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/jcmturner/gokrb5/v8/keytab"

	"github.com/pgconnector/pgconnector/internal/localfile"
)

// MaxSize is the largest keytab read, in bytes: 16 MiB. MIT sets no limit; a client keytab
// holds a few keys of one principal, about a hundred bytes each.
const MaxSize = 16 << 20

// UnusableError is a keytab that exists but cannot be read as one: not a regular file (a FIFO,
// a device, a directory), over MaxSize, or not in MIT's format. The message names the file and
// the problem, never the file's contents.
type UnusableError struct {
	Path   string // the file
	Reason string // what is wrong, e.g. "a named pipe (FIFO), not a regular file"
}

func (e *UnusableError) Error() string { return "client keytab " + e.Path + ": " + e.Reason }

// Load reads the keytab at path (symbolic links followed, as MIT follows them) and returns its
// entries of the principal user@realm, user's components separated by "/" (none if no entry
// is of it), or, when user is "", those of the principal of its first entry. A file that does
// not exist is an error that wraps fs.ErrNotExist; one that is not a regular file, is over
// MaxSize or is malformed is an *UnusableError. Load does not wait: the type is checked with
// stat before a non-blocking open and with fstat after it, so a FIFO or a device is refused
// before any read.
func Load(path, user, realm string) (*keytab.Keytab, error) {
	b, err := readRegular(path)
	if err != nil {
		return nil, err
	}
	kt, err := Parse(b, user, realm)
	if err != nil {
		return nil, &UnusableError{Path: path, Reason: err.Error()}
	}
	return kt, nil
}

// Parse decodes the keytab image b as Load does, with the same choice of entries: over
// MaxEntries bytes of them is an error. It allocates for the entries it keeps only, at most
// AllocFactor*min(len(b), MaxEntries) + allocConst bytes, and its errors quote no byte of b.
func Parse(b []byte, user, realm string) (*keytab.Keytab, error) {
	if len(b) < 2 || b[0] != 5 || (b[1] != 1 && b[1] != 2) {
		return nil, fmt.Errorf("not a keytab: it does not begin with 05 01 or 05 02 (%d bytes)", len(b))
	}
	v1 := b[1] == 1
	var order byteOrder = binary.BigEndian
	if v1 {
		order = binary.NativeEndian // kt_file.c: version 1 is in the host's byte order
	}
	var want []byte // the principal's encoding, as in a record: count, realm, components
	if user != "" {
		var ok bool
		if want, ok = encodePrincipal(user, realm, v1, order); !ok {
			return keytab.New(), nil // no record can hold it
		}
	}
	img := []byte{5, b[1]}
	for p := 2; len(b)-p >= 4; {
		start := p
		l := int64(int32(order.Uint32(b[p:])))
		p += 4
		if l == 0 {
			break
		}
		if l < 0 { // a hole: skipped
			if -l > int64(len(b)-p) {
				break
			}
			p += int(-l)
			continue
		}
		if l > int64(len(b)-p) {
			return nil, fmt.Errorf("the entry at byte %d claims %d bytes, %d are left", start, l, len(b)-p)
		}
		rec := b[p : p+int(l)]
		p += int(l)
		princ, err := checkEntry(rec, v1, order)
		if err != nil {
			return nil, fmt.Errorf("the entry at byte %d: %w", start, err)
		}
		if want == nil {
			want = princ
		}
		if string(princ) == string(want) {
			if len(img)-2+p-start > MaxEntries {
				return nil, fmt.Errorf("the entries of the principal take over %d KiB", MaxEntries>>10)
			}
			img = append(img, b[start:p]...)
		}
	}
	if len(img) == 2 {
		return keytab.New(), nil
	}
	kt := new(keytab.Keytab)
	if err := kt.Unmarshal(img); err != nil { // its message quotes the bytes: not kept
		return nil, errors.New("gokrb5 could not decode the entries")
	}
	return kt, nil
}

// MaxEntries is the most bytes the entries of the principal asked for may take: 64 KiB. MIT
// sets no limit; a principal has an entry of about a hundred bytes per enctype and key
// version. gokrb5's Unmarshal allocates up to about 60 bytes per byte it decodes (a buffer
// and a copy for every field; worst for entries of many one-byte components): this bounds it.
const MaxEntries = 64 << 10

// AllocFactor and allocConst bound what Parse allocates: AllocFactor*min(len(b), MaxEntries)
// + allocConst bytes (checked by FuzzKeytab).
const (
	AllocFactor = 100
	allocConst  = 4096
)

// checkEntry checks that the fields of the record rec fit in it, and returns its principal's
// encoding (count, realm, components: the name type is not part of it, as gokrb5's
// GetEncryptionKey does not compare it).
func checkEntry(rec []byte, v1 bool, order byteOrder) (princ []byte, err error) {
	p := 0
	// data skips a 16-bit length and its bytes: the realm (i 0) or component i.
	data := func(i int) error {
		if len(rec)-p < 2 {
			return fmt.Errorf("%s: no length (%d bytes left)", dataName(i), len(rec)-p)
		}
		n := int(int16(order.Uint16(rec[p:])))
		p += 2
		if n <= 0 || n > len(rec)-p { // kt_file.c reads no further at an empty one either
			return fmt.Errorf("%s of %d bytes, %d left", dataName(i), n, len(rec)-p)
		}
		p += n
		return nil
	}
	if len(rec) < 2 {
		return nil, fmt.Errorf("no component count (%d bytes)", len(rec))
	}
	count := int(int16(order.Uint16(rec)))
	p = 2
	if v1 {
		count-- // version 1 counts the realm
	}
	if count <= 0 { // as in kt_file.c
		return nil, fmt.Errorf("a principal of %d components", count)
	}
	for i := range count + 1 {
		if err := data(i); err != nil {
			return nil, err
		}
	}
	princ = rec[:p]
	fixed := 4 + 1 + 2 // timestamp, 8-bit key version, enctype
	if !v1 {
		fixed += 4 // name type
	}
	if len(rec)-p < fixed {
		return nil, fmt.Errorf("name type, timestamp, key version and enctype: %d bytes needed, %d left", fixed, len(rec)-p)
	}
	p += fixed
	if err := data(-1); err != nil {
		return nil, err
	}
	return princ, nil
}

// dataName names what data reads: the key (-1), the realm (0) or a component.
func dataName(i int) string {
	switch i {
	case -1:
		return "key"
	case 0:
		return "realm"
	}
	return fmt.Sprintf("component %d", i)
}

// byteOrder is binary.BigEndian or binary.NativeEndian.
type byteOrder interface {
	binary.ByteOrder
	binary.AppendByteOrder
}

// encodePrincipal encodes user@realm as checkEntry returns a principal; false if a record
// cannot hold it (a length over 32767).
func encodePrincipal(user, realm string, v1 bool, order byteOrder) ([]byte, bool) {
	comps := strings.Split(user, "/")
	count := len(comps)
	if v1 {
		count++
	}
	if count > math.MaxInt16 || len(realm) > math.MaxInt16 {
		return nil, false
	}
	b := order.AppendUint16(nil, uint16(count))
	b = order.AppendUint16(b, uint16(len(realm)))
	b = append(b, realm...)
	for _, c := range comps {
		if len(c) > math.MaxInt16 {
			return nil, false
		}
		b = order.AppendUint16(b, uint16(len(c)))
		b = append(b, c...)
	}
	return b, true
}

// readRegular reads the regular file at path, at most MaxSize bytes, with package localfile:
// anything but a regular file is an *UnusableError at once, never waited on (a FIFO, a device),
// and so is a larger file.
func readRegular(path string) ([]byte, error) {
	b, err := localfile.Read(path, MaxSize)
	if err == nil {
		return b, nil
	}
	if reason, ok := localfile.Problem(err, "a keytab"); ok {
		return nil, &UnusableError{Path: path, Reason: reason}
	}
	return nil, fmt.Errorf("reading the client keytab %s: %w", path, err)
}
