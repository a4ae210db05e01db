package gss

import (
	"bytes"
	"crypto/aes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/jcmturner/gokrb5/v8/crypto"
	"github.com/jcmturner/gokrb5/v8/crypto/etype"
	"github.com/jcmturner/gokrb5/v8/iana/etypeID"
	"github.com/jcmturner/gokrb5/v8/iana/keyusage"
	"github.com/jcmturner/gokrb5/v8/types"
)

// RFC 4121 §4.2.6.2 Wrap token layout.
const (
	wrapHeaderLen = 16

	// Flags, RFC 4121 §4.2.2.
	FlagSentByAcceptor byte = 0x01
	FlagSealed         byte = 0x02
	FlagAcceptorSubkey byte = 0x04

	wrapTokID0 = 0x05
	wrapTokID1 = 0x04
	wrapFiller = 0xFF
)

// Errors that Unwrap wraps, for errors.Is. The messages carry no key material.
var (
	// ErrMalformedToken: the token is not a well-formed RFC 4121 wrap token
	// (too short, wrong TOK_ID, bad filler, inconsistent EC).
	ErrMalformedToken = errors.New("gss: malformed wrap token")
	// ErrNotSealed: a wrap token without confidentiality (Sealed flag clear).
	ErrNotSealed = errors.New("gss: wrap token without confidentiality (Sealed flag not set) rejected")
	// ErrDirection: the token's SentByAcceptor flag says it was sent by our
	// own side (a reflected token).
	ErrDirection = errors.New("gss: wrap token has the wrong direction flag")
	// ErrSubkeyFlag: the AcceptorSubkey flag does not match the context.
	ErrSubkeyFlag = errors.New("gss: wrap token AcceptorSubkey flag does not match the context")
	// ErrIntegrity: decryption or the integrity check failed, or the
	// encrypted copy of the header does not match the header.
	ErrIntegrity = errors.New("gss: wrap token failed the integrity check")
	// ErrSequence: the token's sequence number is not the next expected one
	// (a replayed, reordered or missing token).
	ErrSequence = errors.New("gss: wrap token out of sequence")
)

// enctypeInfo holds what this package needs beyond gokrb5's etype.EType.
type enctypeInfo struct {
	name string
	// keyLen is the protocol key length in bytes (RFC 3962, RFC 8009).
	// gokrb5's GetKeyByteSize is not used for it: it says 24 for
	// aes256-cts-hmac-sha384-192, whose keys are 32 bytes.
	keyLen int
}

var supportedEnctypes = map[int32]enctypeInfo{
	etypeID.AES128_CTS_HMAC_SHA1_96:    {name: "aes128-cts-hmac-sha1-96", keyLen: 16},
	etypeID.AES256_CTS_HMAC_SHA1_96:    {name: "aes256-cts-hmac-sha1-96", keyLen: 32},
	etypeID.AES128_CTS_HMAC_SHA256_128: {name: "aes128-cts-hmac-sha256-128", keyLen: 16},
	etypeID.AES256_CTS_HMAC_SHA384_192: {name: "aes256-cts-hmac-sha384-192", keyLen: 32},
}

var otherEnctypeNames = map[int32]string{
	etypeID.DES_CBC_CRC:          "des-cbc-crc",
	etypeID.DES_CBC_MD4:          "des-cbc-md4",
	etypeID.DES_CBC_MD5:          "des-cbc-md5",
	etypeID.DES3_CBC_SHA1_KD:     "des3-cbc-sha1",
	etypeID.RC4_HMAC:             "rc4-hmac",
	etypeID.RC4_HMAC_EXP:         "rc4-hmac-exp",
	etypeID.CAMELLIA128_CTS_CMAC: "camellia128-cts-cmac",
	etypeID.CAMELLIA256_CTS_CMAC: "camellia256-cts-cmac",
}

// EnctypeName returns the name of a Kerberos enctype number, such as
// "aes256-cts-hmac-sha1-96" for 18, or "enctype N" for an unknown one.
func EnctypeName(id int32) string {
	if info, ok := supportedEnctypes[id]; ok {
		return info.name
	}
	if name, ok := otherEnctypeNames[id]; ok {
		return name
	}
	return fmt.Sprintf("enctype %d", id)
}

// checkEnctype returns the gokrb5 etype for a supported enctype, or an error
// naming an unsupported one.
func checkEnctype(id int32) (etype.EType, enctypeInfo, error) {
	info, ok := supportedEnctypes[id]
	if !ok {
		return nil, enctypeInfo{}, fmt.Errorf("gss: unsupported enctype %s (%d): "+
			"only aes128-cts-hmac-sha1-96, aes256-cts-hmac-sha1-96, aes128-cts-hmac-sha256-128 "+
			"and aes256-cts-hmac-sha384-192 are supported", EnctypeName(id), id)
	}
	et, err := crypto.GetEtype(id)
	if err != nil {
		return nil, enctypeInfo{}, fmt.Errorf("gss: enctype %s: %v", info.name, err)
	}
	return et, info, nil
}

// checkKey validates a key for use with this package.
func checkKey(key types.EncryptionKey) (etype.EType, enctypeInfo, error) {
	et, info, err := checkEnctype(key.KeyType)
	if err != nil {
		return nil, enctypeInfo{}, err
	}
	if len(key.KeyValue) != info.keyLen {
		return nil, enctypeInfo{}, fmt.Errorf("gss: %s key has %d bytes, want %d",
			info.name, len(key.KeyValue), info.keyLen)
	}
	return et, info, nil
}

// Wrapper seals and unseals RFC 4121 Wrap tokens with confidentiality for one
// established security context. Wrap and Unwrap keep separate sequence
// numbers under separate locks, so one goroutine may Wrap while another
// Unwraps.
type Wrapper struct {
	et             etype.EType
	enctype        int32
	keyValue       []byte // never printed
	initiator      bool
	acceptorSubkey bool

	sendFlags byte
	recvFlags byte
	sendUsage uint32
	recvUsage uint32

	confLen  int // confounder bytes
	hmacLen  int // checksum bytes
	overhead int

	sendMu   sync.Mutex
	sendSeq  uint64
	sendKeys *sealKeys // Ke/Ki for sendUsage, under sendMu

	recvMu   sync.Mutex
	recvSeq  uint64
	recvKeys *sealKeys           // Ke/Ki for recvUsage, under recvMu
	recvBuf  []byte              // scratch for rotated or aliased tokens, under recvMu
	recvConf [aes.BlockSize]byte // the decrypted confounder, under recvMu
}

// NewWrapper returns a Wrapper for a context whose wrap key is key. initiator
// tells which side we are; acceptorSubkey tells that key is the acceptor's
// subkey (flag AcceptorSubkey on every token, both directions). sendSeq and
// recvSeq are the initial sequence numbers of our tokens and of the peer's.
// An enctype other than 17, 18, 19 or 20 is an error naming it.
func NewWrapper(key types.EncryptionKey, initiator bool, acceptorSubkey bool, sendSeq, recvSeq uint64) (*Wrapper, error) {
	et, _, err := checkKey(key)
	if err != nil {
		return nil, err
	}
	w := &Wrapper{
		et:             et,
		enctype:        key.KeyType,
		keyValue:       bytes.Clone(key.KeyValue),
		initiator:      initiator,
		acceptorSubkey: acceptorSubkey,
		confLen:        et.GetConfounderByteSize(),
		hmacLen:        et.GetHMACBitLength() / 8,
		sendSeq:        sendSeq,
		recvSeq:        recvSeq,
	}
	// RFC 4121 §2: KG-USAGE-ACCEPTOR-SEAL 22, KG-USAGE-INITIATOR-SEAL 24.
	if initiator {
		w.sendUsage = keyusage.GSSAPI_INITIATOR_SEAL
		w.recvUsage = keyusage.GSSAPI_ACCEPTOR_SEAL
		w.recvFlags = FlagSentByAcceptor
	} else {
		w.sendUsage = keyusage.GSSAPI_ACCEPTOR_SEAL
		w.recvUsage = keyusage.GSSAPI_INITIATOR_SEAL
		w.sendFlags = FlagSentByAcceptor
	}
	w.sendFlags |= FlagSealed
	w.recvFlags |= FlagSealed
	if acceptorSubkey {
		w.sendFlags |= FlagAcceptorSubkey
		w.recvFlags |= FlagAcceptorSubkey
	}
	// Derive the keys of both directions once (gokrb5's derivation).
	if w.sendKeys, err = newSealKeys(et, w.keyValue, w.sendUsage); err != nil {
		return nil, err
	}
	if w.recvKeys, err = newSealKeys(et, w.keyValue, w.recvUsage); err != nil {
		return nil, err
	}
	// header | E(confounder | plaintext | filler(EC=0) | header copy) | HMAC
	w.overhead = wrapHeaderLen + w.confLen + wrapHeaderLen + w.hmacLen
	return w, nil
}

// Enctype returns the enctype number of the wrap key.
func (w *Wrapper) Enctype() int32 { return w.enctype }

// String describes the wrapper without any key material.
func (w *Wrapper) String() string {
	side := "acceptor"
	if w.initiator {
		side = "initiator"
	}
	return fmt.Sprintf("gss.Wrapper{%s, %s, acceptorSubkey=%t}", EnctypeName(w.enctype), side, w.acceptorSubkey)
}

// GoString is String, so that %#v does not print the key either.
func (w *Wrapper) GoString() string { return w.String() }

// Overhead returns the number of bytes a token adds to its plaintext:
// 16 header + confounder + 16 encrypted header copy + checksum (60 for the
// AES-SHA1 enctypes, 64 for aes128-sha256, 72 for aes256-sha384).
func (w *Wrapper) Overhead() int { return w.overhead }

// MaxPlaintext returns the largest plaintext whose token fits in maxToken
// bytes, or 0 if not even an empty plaintext fits.
func (w *Wrapper) MaxPlaintext(maxToken int) int {
	if maxToken <= w.overhead {
		return 0
	}
	return maxToken - w.overhead
}

// wrapHeader builds a 16-byte wrap token header.
func wrapHeader(flags byte, ec, rrc uint16, seq uint64) [wrapHeaderLen]byte {
	var h [wrapHeaderLen]byte
	h[0], h[1], h[2], h[3] = wrapTokID0, wrapTokID1, flags, wrapFiller
	binary.BigEndian.PutUint16(h[4:6], ec)
	binary.BigEndian.PutUint16(h[6:8], rrc)
	binary.BigEndian.PutUint64(h[8:16], seq)
	return h
}

// Wrap appends to dst a sealed wrap token carrying plaintext (RFC 4121
// §4.2.4): the header (EC = 0, RRC = 0) followed by the enctype's encryption
// of plaintext | header. The send sequence number advances only on success.
func (w *Wrapper) Wrap(dst, plaintext []byte) ([]byte, error) {
	w.sendMu.Lock()
	defer w.sendMu.Unlock()
	hdr := wrapHeader(w.sendFlags, 0, 0, w.sendSeq)
	// The token is built in place in dst: header | confounder | plaintext |
	// header copy | room for the checksum; then the RFC 3961 encrypt of the
	// enctype (AES-CTS with Ke, HMAC with Ki over confounder | plaintext for
	// RFC 3962, over IV | ciphertext for RFC 8009) runs over it in place.
	n := len(plaintext) + w.overhead
	orig, start := dst, len(dst)
	dst = slices.Grow(dst, n)
	tok := dst[start : start+n]
	// plaintext first: copy handles a plaintext that overlaps dst's spare
	// capacity, and nothing reads plaintext afterwards.
	copy(tok[wrapHeaderLen+w.confLen:], plaintext)
	copy(tok, hdr[:])
	copy(tok[wrapHeaderLen+w.confLen+len(plaintext):], hdr[:])
	if _, err := rand.Read(tok[wrapHeaderLen : wrapHeaderLen+w.confLen]); err != nil {
		return orig, fmt.Errorf("gss: sealing wrap token: could not generate random confounder: %v", err)
	}
	w.sendKeys.seal(tok[wrapHeaderLen:])
	w.sendSeq++
	return dst[:start+n], nil
}

// Unwrap verifies and decrypts a sealed wrap token and appends its plaintext
// to dst. It checks TOK_ID, the direction flag (a token from our own side is
// rejected), the Sealed flag (a token without confidentiality is rejected),
// the AcceptorSubkey flag, the filler byte, undoes any right rotation (RRC),
// decrypts with integrity check, checks that the encrypted header copy
// equals the header (with RRC zeroed, RFC 4121 §4.2.4) and that the sequence
// number is the next expected one. The receive sequence number advances only
// on success.
func (w *Wrapper) Unwrap(dst, token []byte) ([]byte, error) {
	if len(token) < wrapHeaderLen {
		return dst, fmt.Errorf("%w: %d bytes, shorter than the 16-byte header", ErrMalformedToken, len(token))
	}
	if token[0] != wrapTokID0 || token[1] != wrapTokID1 {
		return dst, fmt.Errorf("%w: TOK_ID %02x %02x, want 05 04", ErrMalformedToken, token[0], token[1])
	}
	flags := token[2]
	if flags&FlagSentByAcceptor != w.recvFlags&FlagSentByAcceptor {
		if w.initiator {
			return dst, fmt.Errorf("%w: token was sent by an initiator, we are the initiator", ErrDirection)
		}
		return dst, fmt.Errorf("%w: token was sent by an acceptor, we are the acceptor", ErrDirection)
	}
	if flags&FlagSealed == 0 {
		return dst, ErrNotSealed
	}
	if flags&FlagAcceptorSubkey != w.recvFlags&FlagAcceptorSubkey {
		return dst, fmt.Errorf("%w: flag %t, context %t", ErrSubkeyFlag, flags&FlagAcceptorSubkey != 0, w.acceptorSubkey)
	}
	if token[3] != wrapFiller {
		return dst, fmt.Errorf("%w: filler byte %02x, want ff", ErrMalformedToken, token[3])
	}
	ec := int(binary.BigEndian.Uint16(token[4:6]))
	rrc := int(binary.BigEndian.Uint16(token[6:8]))
	seq := binary.BigEndian.Uint64(token[8:16])

	body := token[wrapHeaderLen:]
	// The smallest valid body: confounder, EC filler bytes, the header copy
	// and the checksum.
	if minBody := w.confLen + ec + wrapHeaderLen + w.hmacLen; len(body) < minBody {
		return dst, fmt.Errorf("%w: %d bytes after the header, need at least %d (EC %d)",
			ErrMalformedToken, len(body), minBody, ec)
	}
	w.recvMu.Lock()
	defer w.recvMu.Unlock()
	orig, start := dst, len(dst)
	// Plaintext after the confounder: data | EC filler | header copy.
	restLen := len(body) - w.hmacLen - w.confLen
	dst = slices.Grow(dst, restLen)
	rest := dst[start : start+restLen]
	// RFC 4121 §4.2.5: the sender rotated everything after the header right
	// by RRC bytes; rotate it back (left), modulo its length. The ciphertext
	// is also copied aside if it shares memory with where the plaintext goes.
	if r := rrc % len(body); r != 0 || overlaps(rest, body) {
		var rotated []byte
		if len(body) <= MaxPacket {
			if cap(w.recvBuf) < len(body) {
				w.recvBuf = make([]byte, MaxPacket)
			}
			rotated = w.recvBuf[:len(body)]
		} else {
			rotated = make([]byte, len(body))
		}
		n := copy(rotated, body[r:])
		copy(rotated[n:], body[:r])
		body = rotated
	}
	if !w.recvKeys.open(&w.recvConf, rest, body) {
		clear(rest)
		return orig, fmt.Errorf("%w: integrity verification failed", ErrIntegrity)
	}
	copyHdr := rest[restLen-wrapHeaderLen:]
	want := wrapHeader(flags, uint16(ec), 0, seq)
	if !bytes.Equal(copyHdr, want[:]) {
		clear(rest)
		return orig, fmt.Errorf("%w: the encrypted header copy does not match the token header", ErrIntegrity)
	}

	switch {
	case seq < w.recvSeq:
		clear(rest)
		return orig, fmt.Errorf("%w: sequence number %d already seen (replayed or reordered token), expected %d", ErrSequence, seq, w.recvSeq)
	case seq > w.recvSeq:
		clear(rest)
		return orig, fmt.Errorf("%w: sequence number %d, expected %d (reordered or missing token)", ErrSequence, seq, w.recvSeq)
	}
	w.recvSeq++
	return dst[:start+restLen-wrapHeaderLen-ec], nil
}
