package gss

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"strings"
	"testing"

	"github.com/jcmturner/gokrb5/v8/crypto"
	"github.com/jcmturner/gokrb5/v8/crypto/common"
	"github.com/jcmturner/gokrb5/v8/gssapi"
	"github.com/jcmturner/gokrb5/v8/iana/etypeID"
	"github.com/jcmturner/gokrb5/v8/iana/keyusage"
	"github.com/jcmturner/gokrb5/v8/types"
)

var allEnctypes = []int32{
	etypeID.AES128_CTS_HMAC_SHA1_96,
	etypeID.AES256_CTS_HMAC_SHA1_96,
	etypeID.AES128_CTS_HMAC_SHA256_128,
	etypeID.AES256_CTS_HMAC_SHA384_192,
}

// randomKey returns a random key of the enctype's RFC key length.
func randomKey(t testing.TB, enctype int32) types.EncryptionKey {
	t.Helper()
	n := map[int32]int{17: 16, 18: 32, 19: 16, 20: 32}[enctype]
	if n == 0 {
		t.Fatalf("no key length for enctype %d", enctype)
	}
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return types.EncryptionKey{KeyType: enctype, KeyValue: b}
}

func randomBytes(t testing.TB, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// pair returns an initiator and an acceptor Wrapper sharing key, with
// initiator sequence numbers starting at iseq and acceptor's at aseq.
func pair(t testing.TB, key types.EncryptionKey, subkey bool, iseq, aseq uint64) (ini, acc *Wrapper) {
	t.Helper()
	ini, err := NewWrapper(key, true, subkey, iseq, aseq)
	if err != nil {
		t.Fatal(err)
	}
	acc, err = NewWrapper(key, false, subkey, aseq, iseq)
	if err != nil {
		t.Fatal(err)
	}
	return ini, acc
}

func mustWrap(t testing.TB, w *Wrapper, pt []byte) []byte {
	t.Helper()
	tok, err := w.Wrap(nil, pt)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// refSeal builds a sealed RFC 4121 wrap token independently of Wrapper: it
// puts ec filler bytes between the plaintext and the header copy, as RFC
// 4121 §4.2.4 allows, and rotates the encrypted part right by rrc (§4.2.5),
// as Heimdal (RRC = 28 for AES-SHA1) and Windows do.
func refSeal(t testing.TB, key types.EncryptionKey, usage uint32, flags byte, ec, rrc uint16, seq uint64, pt []byte) []byte {
	t.Helper()
	hdr := make([]byte, 16)
	hdr[0], hdr[1], hdr[2], hdr[3] = 0x05, 0x04, flags, 0xFF
	binary.BigEndian.PutUint16(hdr[4:], ec)
	binary.BigEndian.PutUint64(hdr[8:], seq)
	msg := append(append(append([]byte{}, pt...), bytes.Repeat([]byte{'x'}, int(ec))...), hdr...)
	et, err := crypto.GetEtype(key.KeyType)
	if err != nil {
		t.Fatal(err)
	}
	_, ct, err := et.EncryptMessage(key.KeyValue, msg, usage)
	if err != nil {
		t.Fatal(err)
	}
	if n := int(rrc) % len(ct); n != 0 {
		ct = append(ct[len(ct)-n:], ct[:len(ct)-n]...)
	}
	binary.BigEndian.PutUint16(hdr[6:], rrc)
	return append(hdr, ct...)
}

func TestWrapRoundTrip(t *testing.T) {
	sizes := []int{0, 1, 15, 16, 17, 16320, 1 << 20}
	for _, enctype := range allEnctypes {
		for _, subkey := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/subkey=%t", EnctypeName(enctype), subkey), func(t *testing.T) {
				key := randomKey(t, enctype)
				const iseq, aseq = 0x3fff_fff0, 7
				ini, acc := pair(t, key, subkey, iseq, aseq)
				for i, n := range sizes {
					pt := randomBytes(t, n)
					for _, dir := range []struct {
						name      string
						from, to  *Wrapper
						flags     byte
						seq       uint64
						ownReject bool
					}{
						{"initiator->acceptor", ini, acc, FlagSealed, iseq + uint64(i), true},
						{"acceptor->initiator", acc, ini, FlagSealed | FlagSentByAcceptor, aseq + uint64(i), true},
					} {
						flags := dir.flags
						if subkey {
							flags |= FlagAcceptorSubkey
						}
						prefix := []byte("prefix")
						tok, err := dir.from.Wrap(bytes.Clone(prefix), pt)
						if err != nil {
							t.Fatalf("%s %d: Wrap: %v", dir.name, n, err)
						}
						if !bytes.HasPrefix(tok, prefix) {
							t.Fatalf("%s: Wrap did not append to dst", dir.name)
						}
						tok = tok[len(prefix):]
						if len(tok) != n+dir.from.Overhead() {
							t.Errorf("%s %d: token %d bytes, want %d", dir.name, n, len(tok), n+dir.from.Overhead())
						}
						want := []byte{0x05, 0x04, flags, 0xFF, 0, 0, 0, 0}
						want = binary.BigEndian.AppendUint64(want, dir.seq)
						if !bytes.Equal(tok[:16], want) {
							t.Errorf("%s %d: header % x, want % x", dir.name, n, tok[:16], want)
						}
						if n >= 16 && bytes.Contains(tok, pt) {
							t.Errorf("%s %d: plaintext visible in the token", dir.name, n)
						}
						got, err := dir.to.Unwrap([]byte("x"), tok)
						if err != nil {
							t.Fatalf("%s %d: Unwrap: %v", dir.name, n, err)
						}
						if got[0] != 'x' || !bytes.Equal(got[1:], pt) {
							t.Fatalf("%s %d: round trip mismatch", dir.name, n)
						}
					}
				}
			})
		}
	}
}

// TestWrapTokenLayout takes Wrap's output apart with the standard library's
// HMAC and gokrb5's key derivation and raw AES-CTS only, so a wrong key
// usage, a missing header copy or a wrong checksum input would show.
func TestWrapTokenLayout(t *testing.T) {
	hashes := map[int32]func() hash.Hash{17: sha1.New, 18: sha1.New, 19: sha256.New, 20: sha512.New384}
	for _, enctype := range allEnctypes {
		for _, initiator := range []bool{true, false} {
			key := randomKey(t, enctype)
			w, err := NewWrapper(key, initiator, true, 42, 0)
			if err != nil {
				t.Fatal(err)
			}
			usage := uint32(22)
			if initiator {
				usage = 24
			}
			pt := []byte("SELECT 1; -- a plaintext longer than one AES block")
			tok := mustWrap(t, w, pt)
			et, _ := crypto.GetEtype(enctype)
			hl := et.GetHMACBitLength() / 8
			body := tok[16:]
			ct, mac := body[:len(body)-hl], body[len(body)-hl:]
			ke, err := et.DeriveKey(key.KeyValue, common.GetUsageKe(usage))
			if err != nil {
				t.Fatal(err)
			}
			ki, err := et.DeriveKey(key.KeyValue, common.GetUsageKi(usage))
			if err != nil {
				t.Fatal(err)
			}
			raw, err := et.DecryptData(ke, ct)
			if err != nil {
				t.Fatal(err)
			}
			// confounder(16) | plaintext | header copy (EC = 0, RRC = 0)
			if len(raw) != 16+len(pt)+16 {
				t.Fatalf("%s: decrypted %d bytes, want %d", EnctypeName(enctype), len(raw), 16+len(pt)+16)
			}
			if !bytes.Equal(raw[16:16+len(pt)], pt) {
				t.Errorf("%s: plaintext not after the confounder", EnctypeName(enctype))
			}
			if !bytes.Equal(raw[16+len(pt):], tok[:16]) {
				t.Errorf("%s: header copy % x, want % x", EnctypeName(enctype), raw[16+len(pt):], tok[:16])
			}
			m := hmac.New(hashes[enctype], ki)
			if enctype == 17 || enctype == 18 {
				m.Write(raw) // RFC 3961 simplified profile: HMAC(Ki, confounder | plaintext)
			} else {
				m.Write(make([]byte, 16)) // RFC 8009: HMAC(Ki, IV | ciphertext)
				m.Write(ct)
			}
			if want := m.Sum(nil)[:hl]; !bytes.Equal(mac, want) {
				t.Errorf("%s initiator=%t: checksum %x, want %x", EnctypeName(enctype), initiator, mac, want)
			}
		}
	}
}

func TestOverheadAndMaxPlaintext(t *testing.T) {
	for _, enctype := range allEnctypes {
		key := randomKey(t, enctype)
		ini, acc := pair(t, key, true, 0, 0)
		et, _ := crypto.GetEtype(enctype)
		if want := 16 + et.GetConfounderByteSize() + 16 + et.GetHMACBitLength()/8; ini.Overhead() != want {
			t.Errorf("%s: Overhead %d, want %d", EnctypeName(enctype), ini.Overhead(), want)
		}
		for _, maxTok := range []int{MaxPacket - 4, 1000, ini.Overhead() + 1} {
			n := ini.MaxPlaintext(maxTok)
			tok := mustWrap(t, ini, make([]byte, n))
			if len(tok) > maxTok {
				t.Errorf("%s: MaxPlaintext(%d) = %d gives a %d-byte token", EnctypeName(enctype), maxTok, n, len(tok))
			}
			tok = mustWrap(t, ini, make([]byte, n+1))
			if len(tok) <= maxTok {
				t.Errorf("%s: MaxPlaintext(%d) = %d is not the largest", EnctypeName(enctype), maxTok, n)
			}
		}
		if got := ini.MaxPlaintext(ini.Overhead()); got != 0 {
			t.Errorf("MaxPlaintext(overhead) = %d, want 0", got)
		}
		if got := ini.MaxPlaintext(3); got != 0 {
			t.Errorf("MaxPlaintext(3) = %d, want 0", got)
		}
		_ = acc
	}
	// What MIT's gss_wrap_size_limit gives libpq for aes256-cts-hmac-sha1-96
	// (shared notes: 16320 bytes of plaintext per 16384-byte packet).
	w, _ := NewWrapper(randomKey(t, 18), true, true, 0, 0)
	if got := w.MaxPlaintext(MaxPacket - 4); got != 16320 {
		t.Errorf("aes256-sha1 MaxPlaintext(16380) = %d, MIT says 16320", got)
	}
}

func TestNewWrapperRejects(t *testing.T) {
	cases := []struct {
		key  types.EncryptionKey
		want []string
	}{
		{types.EncryptionKey{KeyType: etypeID.RC4_HMAC, KeyValue: make([]byte, 16)}, []string{"rc4-hmac", "23"}},
		{types.EncryptionKey{KeyType: etypeID.DES3_CBC_SHA1_KD, KeyValue: make([]byte, 24)}, []string{"des3-cbc-sha1", "16"}},
		{types.EncryptionKey{KeyType: 0}, []string{"enctype 0"}},
		{types.EncryptionKey{KeyType: 99, KeyValue: make([]byte, 16)}, []string{"enctype 99"}},
		{types.EncryptionKey{KeyType: 18, KeyValue: make([]byte, 16)}, []string{"aes256-cts-hmac-sha1-96", "16 bytes", "want 32"}},
		{types.EncryptionKey{KeyType: 20, KeyValue: make([]byte, 24)}, []string{"aes256-cts-hmac-sha384-192", "24 bytes", "want 32"}},
		{types.EncryptionKey{KeyType: 17, KeyValue: nil}, []string{"aes128-cts-hmac-sha1-96", "0 bytes"}},
	}
	for _, c := range cases {
		w, err := NewWrapper(c.key, true, false, 0, 0)
		if err == nil || w != nil {
			t.Errorf("NewWrapper(%d, %d bytes) = %v, %v; want an error", c.key.KeyType, len(c.key.KeyValue), w, err)
			continue
		}
		for _, s := range c.want {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("error %q does not mention %q", err, s)
			}
		}
	}
}

func TestWrapperPrintsNoKey(t *testing.T) {
	key := randomKey(t, 18)
	w, err := NewWrapper(key, true, true, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	s := fmt.Sprintf("%v %+v %#v %s", w, w, w, w)
	if strings.Contains(s, hex.EncodeToString(key.KeyValue)) || strings.Contains(s, fmt.Sprint(key.KeyValue)) ||
		strings.Contains(s, fmt.Sprintf("%x", key.KeyValue[:8])) {
		t.Fatalf("key material printed: %s", s)
	}
	if !strings.Contains(s, "aes256-cts-hmac-sha1-96") {
		t.Errorf("String() = %q, want the enctype name", w.String())
	}
	// Changing the caller's key after NewWrapper must not affect the Wrapper.
	_, acc := pair(t, key, true, 0, 0)
	tok := mustWrap(t, w, []byte("hello"))
	for i := range key.KeyValue {
		key.KeyValue[i] = 0
	}
	if _, err := acc.Unwrap(nil, tok); err != nil {
		t.Fatalf("Wrapper kept a reference to the caller's key slice: %v", err)
	}
}

func TestUnwrapRejectsWrongKey(t *testing.T) {
	for _, enctype := range allEnctypes {
		ini, _ := pair(t, randomKey(t, enctype), true, 0, 0)
		_, other := pair(t, randomKey(t, enctype), true, 0, 0)
		tok := mustWrap(t, ini, []byte("secret"))
		if _, err := other.Unwrap(nil, tok); !errors.Is(err, ErrIntegrity) {
			t.Errorf("%s: Unwrap with the wrong key: %v, want ErrIntegrity", EnctypeName(enctype), err)
		}
		// The same bytes under another enctype of the same key length.
		k := randomKey(t, enctype)
		ini, _ = pair(t, k, true, 0, 0)
		tok = mustWrap(t, ini, []byte("secret"))
		swapped := map[int32]int32{17: 19, 19: 17, 18: 20, 20: 18}[enctype]
		_, acc2 := pair(t, types.EncryptionKey{KeyType: swapped, KeyValue: k.KeyValue}, true, 0, 0)
		if _, err := acc2.Unwrap(nil, tok); err == nil {
			t.Errorf("%s token unwrapped as %s", EnctypeName(enctype), EnctypeName(swapped))
		}
	}
}

func TestUnwrapRejectsTruncated(t *testing.T) {
	for _, enctype := range allEnctypes {
		for _, n := range []int{0, 21, 100} {
			ini, acc := pair(t, randomKey(t, enctype), true, 0, 0)
			tok := mustWrap(t, ini, randomBytes(t, n))
			for l := 0; l < len(tok); l++ {
				if out, err := acc.Unwrap(nil, tok[:l]); err == nil {
					t.Fatalf("%s: %d of %d bytes unwrapped to %d bytes", EnctypeName(enctype), l, len(tok), len(out))
				}
			}
			// The failures did not advance the sequence: the whole token still unwraps.
			if _, err := acc.Unwrap(nil, tok); err != nil {
				t.Fatalf("%s: full token after truncated ones: %v", EnctypeName(enctype), err)
			}
		}
	}
}

// Every single-bit flip is an error. The plaintext is 21 bytes so that the
// rotated part has an odd length: RRC is taken modulo that length, and an RRC
// that is a multiple of it is a no-op rotation (TestUnwrapRRCIdentity).
func TestUnwrapRejectsBitFlips(t *testing.T) {
	for _, enctype := range allEnctypes {
		ini, acc := pair(t, randomKey(t, enctype), true, 5, 9)
		tok := mustWrap(t, ini, randomBytes(t, 21))
		if (len(tok)-16)%2 == 0 {
			t.Fatalf("body length %d is even", len(tok)-16)
		}
		for bit := 0; bit < len(tok)*8; bit++ {
			bad := bytes.Clone(tok)
			bad[bit/8] ^= 1 << (bit % 8)
			if _, err := acc.Unwrap(nil, bad); err == nil {
				t.Fatalf("%s: token with bit %d flipped unwrapped", EnctypeName(enctype), bit)
			}
		}
		if _, err := acc.Unwrap(nil, tok); err != nil {
			t.Fatalf("%s: original after flips: %v", EnctypeName(enctype), err)
		}
	}
}

func TestUnwrapRejectsReplayAndReorder(t *testing.T) {
	for _, enctype := range allEnctypes {
		ini, acc := pair(t, randomKey(t, enctype), true, 100, 200)
		t1 := mustWrap(t, ini, []byte("one"))
		t2 := mustWrap(t, ini, []byte("two"))
		t3 := mustWrap(t, ini, []byte("three"))
		if _, err := acc.Unwrap(nil, t2); !errors.Is(err, ErrSequence) {
			t.Fatalf("token 2 before token 1: %v, want ErrSequence", err)
		}
		if got, err := acc.Unwrap(nil, t1); err != nil || string(got) != "one" {
			t.Fatalf("token 1: %q, %v", got, err)
		}
		if _, err := acc.Unwrap(nil, t1); !errors.Is(err, ErrSequence) {
			t.Fatalf("replayed token 1: %v, want ErrSequence", err)
		}
		if _, err := acc.Unwrap(nil, t3); !errors.Is(err, ErrSequence) {
			t.Fatalf("token 3 skipping token 2: %v, want ErrSequence", err)
		}
		if got, err := acc.Unwrap(nil, t2); err != nil || string(got) != "two" {
			t.Fatalf("token 2: %q, %v", got, err)
		}
		if got, err := acc.Unwrap(nil, t3); err != nil || string(got) != "three" {
			t.Fatalf("token 3: %q, %v", got, err)
		}
		if _, err := acc.Unwrap(nil, t2); !errors.Is(err, ErrSequence) {
			t.Fatalf("old token 2: %v, want ErrSequence", err)
		}
	}
}

func TestUnwrapRejectsIntegrityOnlyTokens(t *testing.T) {
	for _, enctype := range allEnctypes {
		key := randomKey(t, enctype)
		// gokrb5's own integrity-only initiator token (flags 0, seq 0).
		wt, err := gssapi.NewInitiatorWrapToken([]byte("not encrypted"), key)
		if err != nil {
			t.Fatal(err)
		}
		tok, err := wt.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		_, acc := pair(t, key, false, 0, 0)
		if _, err := acc.Unwrap(nil, tok); !errors.Is(err, ErrNotSealed) {
			t.Errorf("%s: gokrb5 integrity-only token: %v, want ErrNotSealed", EnctypeName(enctype), err)
		}
		// By hand: a correct RFC 4121 integrity-only wrap token with the
		// acceptor-subkey flag: plaintext | checksum(plaintext | header).
		hdr := []byte{0x05, 0x04, FlagAcceptorSubkey, 0xFF, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
		et, _ := crypto.GetEtype(enctype)
		pt := []byte("also not encrypted")
		sum, err := et.GetChecksumHash(key.KeyValue, append(append([]byte{}, pt...), hdr...), keyusage.GSSAPI_INITIATOR_SEAL)
		if err != nil {
			t.Fatal(err)
		}
		binary.BigEndian.PutUint16(hdr[4:], uint16(len(sum)))
		tok = append(append(hdr, pt...), sum...)
		_, acc = pair(t, key, true, 0, 0)
		if _, err := acc.Unwrap(nil, tok); !errors.Is(err, ErrNotSealed) {
			t.Errorf("%s: hand-made integrity-only token: %v, want ErrNotSealed", EnctypeName(enctype), err)
		}
	}
}

func TestUnwrapRejectsDirectionAndFlags(t *testing.T) {
	key := randomKey(t, 18)
	ini, acc := pair(t, key, true, 0, 0)
	fromIni := mustWrap(t, ini, []byte("x"))
	fromAcc := mustWrap(t, acc, []byte("y"))

	// Our own tokens reflected back.
	if _, err := ini.Unwrap(nil, fromIni); !errors.Is(err, ErrDirection) {
		t.Errorf("initiator unwrapping its own token: %v, want ErrDirection", err)
	}
	if _, err := acc.Unwrap(nil, fromAcc); !errors.Is(err, ErrDirection) {
		t.Errorf("acceptor unwrapping its own token: %v, want ErrDirection", err)
	}
	// A correctly sealed token whose direction flag lies (sealed with the
	// initiator's key usage but flagged as from the acceptor).
	lying := refSeal(t, key, keyusage.GSSAPI_INITIATOR_SEAL, FlagSentByAcceptor|FlagSealed|FlagAcceptorSubkey, 0, 0, 0, []byte("z"))
	if _, err := ini.Unwrap(nil, lying); !errors.Is(err, ErrIntegrity) {
		t.Errorf("token flagged acceptor but sealed with usage 24: %v, want ErrIntegrity", err)
	}
	// AcceptorSubkey flag mismatch, both ways.
	_, accNoSub := pair(t, key, false, 0, 0)
	if _, err := accNoSub.Unwrap(nil, fromIni); !errors.Is(err, ErrSubkeyFlag) {
		t.Errorf("subkey flag set, context without: %v, want ErrSubkeyFlag", err)
	}
	iniNoSub, _ := pair(t, key, false, 0, 0)
	if _, err := acc.Unwrap(nil, mustWrap(t, iniNoSub, []byte("x"))); !errors.Is(err, ErrSubkeyFlag) {
		t.Errorf("subkey flag clear, context with: %v, want ErrSubkeyFlag", err)
	}
	// Wrong TOK_IDs: MIC token, RFC 1964 wrap token, GSS framing, zeros.
	for _, id := range [][2]byte{{0x04, 0x04}, {0x02, 0x01}, {0x60, 0x2b}, {0x00, 0x00}, {0x04, 0x05}} {
		bad := bytes.Clone(fromIni)
		bad[0], bad[1] = id[0], id[1]
		if _, err := acc.Unwrap(nil, bad); !errors.Is(err, ErrMalformedToken) {
			t.Errorf("TOK_ID % x: %v, want ErrMalformedToken", id, err)
		}
	}
	// Bad filler byte.
	bad := bytes.Clone(fromIni)
	bad[3] = 0x00
	if _, err := acc.Unwrap(nil, bad); !errors.Is(err, ErrMalformedToken) {
		t.Errorf("filler 00: %v, want ErrMalformedToken", err)
	}
	// A reserved flag bit set after sealing: the header copy no longer matches.
	bad = bytes.Clone(fromIni)
	bad[2] |= 0x80
	if _, err := acc.Unwrap(nil, bad); !errors.Is(err, ErrIntegrity) {
		t.Errorf("reserved flag: %v, want ErrIntegrity", err)
	}
	// The genuine tokens still go through.
	if _, err := acc.Unwrap(nil, fromIni); err != nil {
		t.Fatal(err)
	}
	if _, err := ini.Unwrap(nil, fromAcc); err != nil {
		t.Fatal(err)
	}
}

// Tokens as other implementations send them: rotated right by RRC (Heimdal
// always rotates by 16 + checksum length, 28 for AES-SHA1) and with EC filler
// bytes, in any combination, for both directions.
func TestUnwrapRRCAndEC(t *testing.T) {
	for _, enctype := range allEnctypes {
		key := randomKey(t, enctype)
		et, _ := crypto.GetEtype(enctype)
		hl := uint16(et.GetHMACBitLength() / 8)
		for _, ec := range []uint16{0, 1, 15, 16, 17, 100} {
			for _, rrc := range []uint16{0, 1, 12, 16, 28, 16 + hl, 16 + hl + ec, 1000, 0xFFFF} {
				for _, n := range []int{0, 1, 21, 300} {
					pt := randomBytes(t, n)
					ini, acc := pair(t, key, true, 3, 1<<40)
					tok := refSeal(t, key, keyusage.GSSAPI_INITIATOR_SEAL, FlagSealed|FlagAcceptorSubkey, ec, rrc, 3, pt)
					got, err := acc.Unwrap(nil, tok)
					if err != nil {
						t.Fatalf("%s EC=%d RRC=%d n=%d: %v", EnctypeName(enctype), ec, rrc, n, err)
					}
					if !bytes.Equal(got, pt) {
						t.Fatalf("%s EC=%d RRC=%d n=%d: plaintext mismatch", EnctypeName(enctype), ec, rrc, n)
					}
					tok = refSeal(t, key, keyusage.GSSAPI_ACCEPTOR_SEAL, FlagSealed|FlagSentByAcceptor|FlagAcceptorSubkey, ec, rrc, 1<<40, pt)
					if got, err := ini.Unwrap(nil, tok); err != nil || !bytes.Equal(got, pt) {
						t.Fatalf("%s EC=%d RRC=%d n=%d acceptor->initiator: %v", EnctypeName(enctype), ec, rrc, n, err)
					}
				}
			}
		}
	}
}

func TestUnwrapRRC28Explicit(t *testing.T) {
	key := randomKey(t, 18)
	ini, acc := pair(t, key, true, 0, 0)
	pt := []byte("rotated by twenty-eight, as Heimdal sends it")
	tok := mustWrap(t, ini, pt)
	body := tok[16:]
	rot := append(append(bytes.Clone(tok[:16]), body[len(body)-28:]...), body[:len(body)-28]...)
	binary.BigEndian.PutUint16(rot[6:8], 28)
	got, err := acc.Unwrap(nil, rot)
	if err != nil || !bytes.Equal(got, pt) {
		t.Fatalf("RRC 28: %q, %v", got, err)
	}
	// The same rotation with RRC left at 0 is garbage.
	ini, acc = pair(t, key, true, 0, 0)
	tok = mustWrap(t, ini, pt)
	body = tok[16:]
	rot = append(append(bytes.Clone(tok[:16]), body[len(body)-28:]...), body[:len(body)-28]...)
	if _, err := acc.Unwrap(nil, rot); !errors.Is(err, ErrIntegrity) {
		t.Fatalf("rotated without RRC: %v, want ErrIntegrity", err)
	}
}

// An RRC that is a multiple of the rotated length rotates nothing: such a
// token is the same token, and unwraps (as with MIT's rotate_left).
func TestUnwrapRRCIdentity(t *testing.T) {
	key := randomKey(t, 17)
	ini, acc := pair(t, key, true, 0, 0)
	tok := mustWrap(t, ini, make([]byte, 20)) // body 20+16+16+12 = 64 bytes
	body := len(tok) - 16
	for _, mult := range []int{1, 2, 64} {
		bad := bytes.Clone(tok)
		binary.BigEndian.PutUint16(bad[6:8], uint16(body*mult))
		_, acc2 := pair(t, key, true, 0, 0)
		if _, err := acc2.Unwrap(nil, bad); err != nil {
			t.Errorf("RRC %d (body %d): %v", body*mult, body, err)
		}
	}
	if _, err := acc.Unwrap(nil, tok); err != nil {
		t.Fatal(err)
	}
}

// The encrypted header copy must carry RRC 0 (RFC 4121 §4.2.4), and must match
// EC and the sequence number of the outer header.
func TestUnwrapChecksHeaderCopy(t *testing.T) {
	key := randomKey(t, 18)
	et, _ := crypto.GetEtype(18)
	seal := func(outer, inner []byte, pt []byte) []byte {
		msg := append(append([]byte{}, pt...), inner...)
		_, ct, err := et.EncryptMessage(key.KeyValue, msg, keyusage.GSSAPI_INITIATOR_SEAL)
		if err != nil {
			t.Fatal(err)
		}
		return append(bytes.Clone(outer), ct...)
	}
	good := []byte{0x05, 0x04, 0x06, 0xFF, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	_, acc := pair(t, key, true, 0, 0)
	if _, err := acc.Unwrap(nil, seal(good, good, []byte("ok"))); err != nil {
		t.Fatalf("well-formed token: %v", err)
	}
	for _, c := range []struct {
		name string
		mod  func(h []byte)
	}{
		{"RRC in the copy", func(h []byte) { h[7] = 28 }},
		{"sequence number", func(h []byte) { h[15] = 1 }},
		{"EC", func(h []byte) { h[5] = 1 }},
		{"flags", func(h []byte) { h[2] = 0x02 }},
		{"filler", func(h []byte) { h[3] = 0 }},
		{"TOK_ID", func(h []byte) { h[1] = 0x05 }},
	} {
		inner := bytes.Clone(good)
		c.mod(inner)
		_, acc := pair(t, key, true, 0, 0)
		if _, err := acc.Unwrap(nil, seal(good, inner, []byte("ok"))); !errors.Is(err, ErrIntegrity) {
			t.Errorf("header copy with a different %s: %v, want ErrIntegrity", c.name, err)
		}
	}
	// A missing header copy.
	_, acc = pair(t, key, true, 0, 0)
	_, ct, _ := et.EncryptMessage(key.KeyValue, []byte("no header copy at all, just data"), keyusage.GSSAPI_INITIATOR_SEAL)
	if _, err := acc.Unwrap(nil, append(bytes.Clone(good), ct...)); !errors.Is(err, ErrIntegrity) {
		t.Errorf("no header copy: %v, want ErrIntegrity", err)
	}
}

// fuzzKey is a fixed aes256-cts-hmac-sha1-96 key for FuzzUnwrap (test data,
// not a secret).
var fuzzKey = types.EncryptionKey{KeyType: 18, KeyValue: []byte("0123456789abcdef0123456789abcdef")}

func FuzzUnwrap(f *testing.F) {
	ini, _ := pair(f, fuzzKey, true, 0, 0)
	for _, pt := range [][]byte{nil, []byte("a"), bytes.Repeat([]byte("b"), 100)} {
		tok := mustWrap(f, ini, pt)
		f.Add(tok)
		f.Add(tok[:len(tok)-1])
		f.Add(refSeal(f, fuzzKey, 24, FlagSealed|FlagAcceptorSubkey, 3, 28, 7, pt))
	}
	wt, _ := gssapi.NewInitiatorWrapToken([]byte("integrity only"), fuzzKey)
	if b, err := wt.Marshal(); err == nil {
		f.Add(b)
	}
	f.Add([]byte{0x05, 0x04, 0x06, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, tok []byte) {
		// Expect whatever sequence number the token claims, so that the
		// fuzzer gets past the sequence check.
		var seq uint64
		if len(tok) >= 16 {
			seq = binary.BigEndian.Uint64(tok[8:16])
		}
		_, acc := pair(t, fuzzKey, true, 0, seq)
		pt, err := acc.Unwrap(nil, tok)
		if err != nil {
			return
		}
		// It unwrapped: it is a sealed initiator token with our flags.
		if tok[2]&(FlagSentByAcceptor|FlagSealed|FlagAcceptorSubkey) != FlagSealed|FlagAcceptorSubkey {
			t.Fatalf("unwrapped a token with flags %02x", tok[2])
		}
		// Replaying it fails.
		if _, err := acc.Unwrap(nil, tok); !errors.Is(err, ErrSequence) {
			t.Fatalf("replay: %v", err)
		}
		// Re-wrapping the plaintext with the same sequence number gives a
		// token that unwraps to the same plaintext, with the same header
		// except EC and RRC, which Wrap sets to 0.
		w, err := NewWrapper(fuzzKey, true, true, seq, 0)
		if err != nil {
			t.Fatal(err)
		}
		re := mustWrap(t, w, pt)
		wantHdr := bytes.Clone(tok[:16])
		copy(wantHdr[4:8], []byte{0, 0, 0, 0})
		if !bytes.Equal(re[:16], wantHdr) {
			t.Fatalf("re-wrapped header % x, want % x", re[:16], wantHdr)
		}
		_, acc2 := pair(t, fuzzKey, true, 0, seq)
		pt2, err := acc2.Unwrap(nil, re)
		if err != nil || !bytes.Equal(pt2, pt) {
			t.Fatalf("re-wrapped token: %v", err)
		}
	})
}
