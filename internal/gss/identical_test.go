package gss

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/jcmturner/gokrb5/v8/crypto/common"
	"github.com/jcmturner/gokrb5/v8/crypto/rfc8009"
	"github.com/jcmturner/gokrb5/v8/iana/keyusage"
)

// identicalSizes: the block-boundary cases and random sizes up to 70000
// bytes (more than four 16 KiB packets).
func identicalSizes() []int {
	sizes := []int{0, 1, 15, 16, 17, 31, 32, 33, 47, 48, 63, 64, 65, 127, 128, 129, 16320, 65536}
	for range 25 {
		sizes = append(sizes, rand.IntN(70001))
	}
	return sizes
}

// TestWrapTokenIdenticalToGokrb5: for every enctype and random sizes from
// 0 to 70000 bytes, Wrap's token is byte for byte the token that gokrb5's
// primitives build from the same confounder: Ke and Ki from gokrb5's
// DeriveKey, AES-CTS from its EncryptData (jcmturner/aescts), the checksum
// from common.GetIntegrityHash (RFC 3962) or rfc8009.GetIntegityHash. The
// confounder is read back by decrypting Wrap's token with gokrb5.
func TestWrapTokenIdenticalToGokrb5(t *testing.T) {
	for _, enctype := range allEnctypes {
		t.Run(EnctypeName(enctype), func(t *testing.T) {
			key := randomKey(t, enctype)
			et, _, err := checkKey(key)
			if err != nil {
				t.Fatal(err)
			}
			usage := uint32(keyusage.GSSAPI_INITIATOR_SEAL)
			ke, err := et.DeriveKey(key.KeyValue, common.GetUsageKe(usage))
			if err != nil {
				t.Fatal(err)
			}
			ini, acc := pair(t, key, true, 7, 7)
			for i, n := range identicalSizes() {
				pt := randomBytes(t, n)
				tok, err := ini.Wrap(nil, pt)
				if err != nil {
					t.Fatal(err)
				}
				hdr := tok[:wrapHeaderLen]
				ct := tok[wrapHeaderLen : len(tok)-ini.hmacLen]
				dec, err := et.DecryptData(ke, ct)
				if err != nil {
					t.Fatalf("n=%d: gokrb5 DecryptData: %v", n, err)
				}
				plain := append(append(append([]byte{}, dec[:ini.confLen]...), pt...), hdr...)
				_, wantCT, err := et.EncryptData(ke, plain)
				if err != nil {
					t.Fatal(err)
				}
				var sum []byte
				if isRFC8009(enctype) {
					sum, err = rfc8009.GetIntegityHash(make([]byte, 16), wantCT, key.KeyValue, usage, et)
				} else {
					sum, err = common.GetIntegrityHash(plain, key.KeyValue, usage, et)
				}
				if err != nil {
					t.Fatal(err)
				}
				want := append(append(bytes.Clone(hdr), wantCT...), sum...)
				if want := wrapHeader(FlagSealed|FlagAcceptorSubkey, 0, 0, uint64(7+i)); !bytes.Equal(hdr, want[:]) {
					t.Fatalf("n=%d: header %x, want %x", n, hdr, want)
				}
				if !bytes.Equal(tok, want) {
					t.Fatalf("n=%d: Wrap's token differs from gokrb5's for the same confounder", n)
				}
				got, err := acc.Unwrap(nil, tok)
				if err != nil || !bytes.Equal(got, pt) {
					t.Fatalf("n=%d: Unwrap: %v", n, err)
				}
			}
		})
	}
}

// rotate returns tok with the part after the header rotated right by rrc
// (modulo its length) and RRC set in the header, as RFC 4121 §4.2.5 senders
// that choose a non-zero RRC do. tok is not modified.
func rotate(tok []byte, rrc uint16) []byte {
	out := bytes.Clone(tok)
	body := tok[wrapHeaderLen:]
	r := int(rrc) % len(body)
	copy(out[wrapHeaderLen:], body[len(body)-r:])
	copy(out[wrapHeaderLen+r:], body[:len(body)-r])
	binary.BigEndian.PutUint16(out[6:8], rrc)
	return out
}

// TestUnwrapAnyRRC: a Wrap token rotated by any RRC (random values over the
// whole 16-bit range, and every rotation of a short token) unwraps to the
// plaintext, on the fast and the reference path; the same rotation with
// the header's RRC left at 0 fails the integrity check.
func TestUnwrapAnyRRC(t *testing.T) {
	for _, enctype := range allEnctypes {
		t.Run(EnctypeName(enctype), func(t *testing.T) {
			key := randomKey(t, enctype)
			ini, acc := pair(t, key, true, 0, 0)
			_, ref := pair(t, key, true, 0, 0)
			check := func(pt, tok []byte, rrc uint16) {
				t.Helper()
				rot := rotate(tok, rrc)
				got, err := acc.Unwrap([]byte("x"), rot)
				if err != nil || !bytes.Equal(got, append([]byte("x"), pt...)) {
					t.Fatalf("n=%d RRC=%d: Unwrap: %v", len(pt), rrc, err)
				}
				got, err = ref.unwrapReference(nil, rot)
				if err != nil || !bytes.Equal(got, pt) {
					t.Fatalf("n=%d RRC=%d: reference Unwrap: %v", len(pt), rrc, err)
				}
				// in place: dst aliases the rotated token
				_, acc2 := pair(t, key, true, acc.recvSeq-1, acc.recvSeq-1)
				rot2 := bytes.Clone(rot)
				got, err = acc2.Unwrap(rot2[:0], rot2)
				if err != nil || !bytes.Equal(got, pt) {
					t.Fatalf("n=%d RRC=%d: in-place Unwrap: %v", len(pt), rrc, err)
				}
				if r := int(rrc) % (len(tok) - wrapHeaderLen); r != 0 {
					binary.BigEndian.PutUint16(rot[6:8], 0)
					_, acc3 := pair(t, key, true, acc.recvSeq-1, acc.recvSeq-1)
					if _, err := acc3.Unwrap(nil, rot); err == nil {
						t.Fatalf("n=%d RRC=%d: rotated token with RRC 0 accepted", len(pt), rrc)
					}
				}
			}
			for _, n := range identicalSizes() {
				pt := randomBytes(t, n)
				for range 4 {
					tok := mustWrap(t, ini, pt)
					check(pt, tok, uint16(rand.IntN(1<<16)))
				}
			}
			pt := randomBytes(t, 5)
			tok := mustWrap(t, ini, pt)
			for rrc := range len(tok) + 2 {
				if rrc > 0 {
					tok = mustWrap(t, ini, pt)
				}
				check(pt, tok, uint16(rrc))
			}
		})
	}
}
