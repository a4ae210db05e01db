package gss

import (
	"bytes"
	"crypto/aes"
	"encoding/binary"
	"fmt"
	"github.com/jcmturner/gokrb5/v8/crypto/common"
	"github.com/jcmturner/gokrb5/v8/iana/etypeID"
	"math/rand/v2"
	"testing"
)

// wrapReference is the previous, gokrb5-based Wrap (gokrb5's EncryptMessage,
// which derives Ke and Ki on every call). It is kept, for tests and
// benchmarks only, as a reference for the fast path. It uses and advances
// the same send sequence number as Wrap.
func (w *Wrapper) wrapReference(dst, plaintext []byte) ([]byte, error) {
	w.sendMu.Lock()
	defer w.sendMu.Unlock()
	hdr := wrapHeader(w.sendFlags, 0, 0, w.sendSeq)
	msg := make([]byte, 0, len(plaintext)+wrapHeaderLen)
	msg = append(msg, plaintext...)
	msg = append(msg, hdr[:]...)
	_, ct, err := w.et.EncryptMessage(w.keyValue, msg, w.sendUsage)
	if err != nil {
		return dst, fmt.Errorf("gss: sealing wrap token: %v", err)
	}
	dst = append(dst, hdr[:]...)
	dst = append(dst, ct...)
	w.sendSeq++
	return dst, nil
}

// unwrapReference is the previous, gokrb5-based Unwrap (gokrb5's
// DecryptMessage), kept for tests only. It uses and advances the same
// receive sequence number as Unwrap.
func (w *Wrapper) unwrapReference(dst, token []byte) ([]byte, error) {
	if len(token) < wrapHeaderLen {
		return dst, fmt.Errorf("%w: short", ErrMalformedToken)
	}
	if token[0] != wrapTokID0 || token[1] != wrapTokID1 || token[3] != wrapFiller {
		return dst, fmt.Errorf("%w: bad header", ErrMalformedToken)
	}
	flags := token[2]
	if flags&FlagSentByAcceptor != w.recvFlags&FlagSentByAcceptor {
		return dst, ErrDirection
	}
	if flags&FlagSealed == 0 {
		return dst, ErrNotSealed
	}
	if flags&FlagAcceptorSubkey != w.recvFlags&FlagAcceptorSubkey {
		return dst, ErrSubkeyFlag
	}
	ec := int(binary.BigEndian.Uint16(token[4:6]))
	rrc := int(binary.BigEndian.Uint16(token[6:8]))
	seq := binary.BigEndian.Uint64(token[8:16])
	body := token[wrapHeaderLen:]
	if minBody := w.confLen + ec + wrapHeaderLen + w.hmacLen; len(body) < minBody {
		return dst, fmt.Errorf("%w: too short", ErrMalformedToken)
	}
	if r := rrc % len(body); r != 0 {
		rotated := make([]byte, len(body))
		n := copy(rotated, body[r:])
		copy(rotated[n:], body[:r])
		body = rotated
	}
	pt, err := w.et.DecryptMessage(w.keyValue, body, w.recvUsage)
	if err != nil {
		return dst, fmt.Errorf("%w: %v", ErrIntegrity, err)
	}
	if len(pt) < ec+wrapHeaderLen {
		return dst, fmt.Errorf("%w: decrypted payload too short", ErrIntegrity)
	}
	want := wrapHeader(flags, uint16(ec), 0, seq)
	if !bytes.Equal(pt[len(pt)-wrapHeaderLen:], want[:]) {
		return dst, fmt.Errorf("%w: header copy", ErrIntegrity)
	}
	w.recvMu.Lock()
	defer w.recvMu.Unlock()
	if seq != w.recvSeq {
		return dst, ErrSequence
	}
	w.recvSeq++
	return append(dst, pt[:len(pt)-wrapHeaderLen-ec]...), nil
}

func crossSizes() []int {
	sizes := []int{0, 1, 15, 16, 17, 31, 32, 33, 16320}
	for range 40 {
		sizes = append(sizes, rand.IntN(20000))
	}
	for range 10 {
		sizes = append(sizes, rand.IntN(100))
	}
	return sizes
}

// TestFastPathMatchesReference checks, for every enctype and both
// directions, that tokens from the fast Wrap unwrap with the gokrb5-based
// reference path and vice versa, and that both unwrap paths agree.
func TestFastPathMatchesReference(t *testing.T) {
	for _, enctype := range allEnctypes {
		for _, subkey := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/subkey=%t", EnctypeName(enctype), subkey), func(t *testing.T) {
				key := randomKey(t, enctype)
				ini, acc := pair(t, key, subkey, 100, 5000)
				for _, n := range crossSizes() {
					pt := randomBytes(t, n)
					for _, d := range []struct{ from, to *Wrapper }{{ini, acc}, {acc, ini}} {
						// fast -> reference
						tok, err := d.from.Wrap([]byte("pre"), pt)
						if err != nil {
							t.Fatal(err)
						}
						tok = tok[3:]
						if len(tok) != n+d.from.Overhead() {
							t.Fatalf("%d: fast token %d bytes, want %d", n, len(tok), n+d.from.Overhead())
						}
						got, err := d.to.unwrapReference(nil, tok)
						if err != nil || !bytes.Equal(got, pt) {
							t.Fatalf("%d: fast token via reference Unwrap: %v", n, err)
						}
						// reference -> fast
						tok2, err := d.from.wrapReference(nil, pt)
						if err != nil {
							t.Fatal(err)
						}
						if len(tok2) != len(tok) {
							t.Fatalf("%d: reference token %d bytes, fast %d", n, len(tok2), len(tok))
						}
						got, err = d.to.Unwrap([]byte("x"), tok2)
						if err != nil || !bytes.Equal(got, append([]byte("x"), pt...)) {
							t.Fatalf("%d: reference token via fast Unwrap: %v", n, err)
						}
						// fast -> fast, in place (dst aliases the token)
						tok3, err := d.from.Wrap(nil, pt)
						if err != nil {
							t.Fatal(err)
						}
						got, err = d.to.Unwrap(tok3[:0], tok3)
						if err != nil || !bytes.Equal(got, pt) {
							t.Fatalf("%d: in-place Unwrap: %v", n, err)
						}
					}
				}
			})
		}
	}
}

// TestFastPathRRCAndECMatchesReference: tokens with filler and rotation
// (built by refSeal with gokrb5) unwrap identically on both paths.
func TestFastPathRRCAndECMatchesReference(t *testing.T) {
	for _, enctype := range allEnctypes {
		key := randomKey(t, enctype)
		for _, n := range []int{0, 1, 15, 16, 17, 33, 1000} {
			for _, ec := range []uint16{0, 1, 16, 17} {
				for _, rrc := range []uint16{0, 1, 12, 16, 28, 60, 1000} {
					pt := randomBytes(t, n)
					tok := refSeal(t, key, 24, FlagSealed|FlagAcceptorSubkey, ec, rrc, 9, pt)
					_, a1 := pair(t, key, true, 9, 0)
					_, a2 := pair(t, key, true, 9, 0)
					g1, err1 := a1.Unwrap(nil, tok)
					g2, err2 := a2.unwrapReference(nil, tok)
					if err1 != nil || err2 != nil || !bytes.Equal(g1, pt) || !bytes.Equal(g2, pt) {
						t.Fatalf("%s n=%d ec=%d rrc=%d: fast %v, reference %v", EnctypeName(enctype), n, ec, rrc, err1, err2)
					}
				}
			}
		}
	}
}

// TestCTSMatchesGokrb5 compares ctsEncrypt/ctsDecrypt with gokrb5's AES-CTS
// (the aescts package behind EncryptData/DecryptData) for all lengths from
// one block to a few blocks and some larger ones.
func TestCTSMatchesGokrb5(t *testing.T) {
	for _, enctype := range allEnctypes {
		key := randomKey(t, enctype)
		et, _, err := checkEnctype(enctype)
		if err != nil {
			t.Fatal(err)
		}
		block, err := aes.NewCipher(key.KeyValue)
		if err != nil {
			t.Fatal(err)
		}
		lengths := []int{}
		for n := 16; n <= 80; n++ {
			lengths = append(lengths, n)
		}
		lengths = append(lengths, 1000, 16336, 16352, 16353)
		for _, n := range lengths {
			pt := randomBytes(t, n)
			_, want, err := et.EncryptData(key.KeyValue, pt)
			if err != nil {
				t.Fatal(err)
			}
			got := bytes.Clone(pt)
			ctsEncrypt(block, got)
			if !bytes.Equal(got, want) {
				t.Fatalf("%s n=%d: ctsEncrypt differs from gokrb5", EnctypeName(enctype), n)
			}
			var first [16]byte
			rest := make([]byte, n-16)
			ctsDecrypt(block, &first, rest, got)
			if !bytes.Equal(append(first[:], rest...), pt) {
				t.Fatalf("%s n=%d: ctsDecrypt does not invert", EnctypeName(enctype), n)
			}
		}
	}
}

// BenchmarkWrapReference and BenchmarkUnwrapReference are BenchmarkWrap and
// BenchmarkUnwrap on the gokrb5-based reference path, for a side-by-side ratio.
func BenchmarkWrapReference(b *testing.B) { benchWrap(b, (*Wrapper).wrapReference) }

func BenchmarkUnwrapReference(b *testing.B) { benchUnwrap(b, (*Wrapper).unwrapReference) }

// TestDeriveKeyMatchesGokrb5: deriveKey (n-fold cached, DR with the
// standard library's AES) gives gokrb5's DeriveKey for every enctype, the
// usages a connection uses and a few others, and Ke, Ki and Kc constants.
func TestDeriveKeyMatchesGokrb5(t *testing.T) {
	for _, enctype := range allEnctypes {
		et, _, err := checkEnctype(enctype)
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			key := randomKey(t, enctype).KeyValue
			for _, usage := range []uint32{1, 7, 11, 12, 22, 23, 24, 25, 1 << 20} {
				for _, constant := range [][]byte{common.GetUsageKe(usage), common.GetUsageKi(usage), common.GetUsageKc(usage)} {
					want, err := et.DeriveKey(key, constant)
					if err != nil {
						t.Fatal(err)
					}
					got, err := deriveKey(et, key, constant)
					if err != nil || !bytes.Equal(got, want) {
						t.Fatalf("%s usage %d constant %x: deriveKey = %x, %v; gokrb5 %x", EnctypeName(enctype), usage, constant, got, err, want)
					}
				}
			}
		}
		if _, err := deriveKey(et, []byte("short"), common.GetUsageKe(11)); err == nil && !isRFC8009(enctype) {
			t.Errorf("%s: deriveKey with a 5-byte key: no error", EnctypeName(enctype))
		}
	}
}

// TestMessageEncryptionMatchesGokrb5: what encryptMessage produces, gokrb5's
// DecryptMessage opens, and what gokrb5's EncryptMessage produces,
// decryptMessage opens; a flipped bit or a wrong usage is refused.
func TestMessageEncryptionMatchesGokrb5(t *testing.T) {
	for _, enctype := range allEnctypes {
		et, _, err := checkEnctype(enctype)
		if err != nil {
			t.Fatal(err)
		}
		key := randomKey(t, enctype).KeyValue
		for _, n := range []int{0, 1, 15, 16, 17, 100, 1000} {
			msg := randomBytes(t, n)
			ct, err := encryptMessage(et, key, 11, msg)
			if err != nil {
				t.Fatal(err)
			}
			pt, err := et.DecryptMessage(key, ct, 11)
			if err != nil || !bytes.Equal(pt, msg) {
				t.Fatalf("%s n=%d: encryptMessage -> gokrb5 DecryptMessage: %v", EnctypeName(enctype), n, err)
			}
			_, ct2, err := et.EncryptMessage(key, msg, 12)
			if err != nil {
				t.Fatal(err)
			}
			pt, err = decryptMessage(et, key, 12, ct2)
			if err != nil || !bytes.Equal(pt, msg) {
				t.Fatalf("%s n=%d: gokrb5 EncryptMessage -> decryptMessage: %v", EnctypeName(enctype), n, err)
			}
			if _, err := decryptMessage(et, key, 11, ct2); err == nil {
				t.Fatalf("%s n=%d: decrypted with the wrong usage", EnctypeName(enctype), n)
			}
			ct2[len(ct2)/2] ^= 1
			if _, err := decryptMessage(et, key, 12, ct2); err == nil {
				t.Fatalf("%s n=%d: decrypted a tampered message", EnctypeName(enctype), n)
			}
			if _, err := decryptMessage(et, key, 12, ct2[:10]); err == nil {
				t.Fatalf("%s: decrypted a 10-byte message", EnctypeName(enctype))
			}
		}
	}
}

// isRFC8009 reports whether enctype is one of the RFC 8009 (SHA-2) enctypes.
func isRFC8009(enctype int32) bool {
	return enctype == etypeID.AES128_CTS_HMAC_SHA256_128 || enctype == etypeID.AES256_CTS_HMAC_SHA384_192
}

// BenchmarkDeriveKey is one key derivation (aes256-cts-hmac-sha1-96, Ke of
// usage 24) by deriveKey against gokrb5's DeriveKey; a GSS connect takes
// eight (AP-REQ, AP-REP, and the two directions of the wrap keys).
func BenchmarkDeriveKey(b *testing.B) {
	et, _, err := checkEnctype(etypeID.AES256_CTS_HMAC_SHA1_96)
	if err != nil {
		b.Fatal(err)
	}
	key := make([]byte, 32)
	constant := common.GetUsageKe(24)
	for _, v := range []struct {
		name   string
		derive func() ([]byte, error)
	}{
		{"cached-nfold", func() ([]byte, error) { return deriveKey(et, key, constant) }},
		{"gokrb5", func() ([]byte, error) { return et.DeriveKey(key, constant) }},
	} {
		b.Run(v.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := v.derive(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
