package main

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"flag"
	"hash"
	"slices"
	"sync"
	"testing"

	"github.com/jcmturner/gokrb5/v8/iana/etypeID"
	"github.com/jcmturner/gokrb5/v8/types"

	"github.com/pgconnector/pgconnector/internal/gss"
)

// wrapEnctypes are the enctypes internal/gss seals with, with their key
// length (RFC 3962, RFC 8009) and the hash of their HMAC.
var wrapEnctypes = []struct {
	id     int32
	keyLen int
	hmac   string
	hash   func() hash.Hash
}{
	{etypeID.AES128_CTS_HMAC_SHA1_96, 16, "SHA-1", sha1.New},
	{etypeID.AES256_CTS_HMAC_SHA1_96, 32, "SHA-1", sha1.New},
	{etypeID.AES128_CTS_HMAC_SHA256_128, 16, "SHA-256", sha256.New},
	{etypeID.AES256_CTS_HMAC_SHA384_192, 32, "SHA-384", sha512.New384},
}

// wrapRounds is how many times each wrap, unwrap and primitive is measured,
// taking turns; the median counts.
const wrapRounds = 3

var initTesting sync.Once

// wrapRates is scenario 7: for each enctype, the MB/s of plaintext that
// internal/gss's Wrap and Unwrap seal and open, one PostgreSQL GSS packet
// (16 KiB token, gss.MaxPacket) per operation on one goroutine, beside the
// standard library's AES-CBC encrypt and decrypt and keyed HMAC rates over
// the same length, the rates a wrap or unwrap cannot much exceed on this CPU.
// Each figure is the median of wrapRounds testing.Benchmark runs.
func wrapRates(quick bool) []WrapResult {
	initTesting.Do(func() {
		testing.Init()
		d := "300ms"
		if quick {
			d = "20ms"
		}
		_ = flag.Set("test.benchtime", d)
	})
	out := make([]WrapResult, len(wrapEnctypes))
	samples := make([][6][]float64, len(wrapEnctypes))
	for range wrapRounds {
		for i, e := range wrapEnctypes {
			s := &samples[i]
			s[0] = append(s[0], mbps(testing.Benchmark(func(b *testing.B) { benchCBC(b, e.keyLen, true) })))
			s[1] = append(s[1], mbps(testing.Benchmark(func(b *testing.B) { benchCBC(b, e.keyLen, false) })))
			s[2] = append(s[2], mbps(testing.Benchmark(func(b *testing.B) { benchHMAC(b, e.hash) })))
			s[3] = append(s[3], mbps(testing.Benchmark(func(b *testing.B) { benchWrap(b, e.id, e.keyLen) })))
			s[4] = append(s[4], mbps(testing.Benchmark(func(b *testing.B) { benchUnwrap(b, e.id, e.keyLen) })))
		}
	}
	for i, e := range wrapEnctypes {
		s := samples[i]
		r := WrapResult{
			Enctype: gss.EnctypeName(e.id), HMAC: e.hmac,
			CBCEncrypt: median(s[0]), CBCDecrypt: median(s[1]), HMACRate: median(s[2]),
			Wrap: median(s[3]), Unwrap: median(s[4]),
		}
		r.FloorWrap = floor(r.CBCEncrypt, r.HMACRate)
		r.FloorUnwrap = floor(r.CBCDecrypt, r.HMACRate)
		out[i] = r
	}
	return out
}

// floor is the rate of one pass of each of two primitives, one after the
// other.
func floor(a, b float64) float64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	return 1 / (1/a + 1/b)
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}

// mbps is a benchmark's rate in MB/s (1e6 bytes) of its SetBytes.
func mbps(r testing.BenchmarkResult) float64 {
	if r.N == 0 || r.T <= 0 {
		return 0
	}
	return float64(r.Bytes) * float64(r.N) / 1e6 / r.T.Seconds()
}

// wrapPlaintext is the plaintext of one full GSS packet for w.
func wrapPlaintext(w *gss.Wrapper) []byte {
	return make([]byte, w.MaxPlaintext(gss.MaxPacket-4))
}

func benchCBC(b *testing.B, keyLen int, encrypt bool) {
	block, err := aes.NewCipher(make([]byte, keyLen))
	if err != nil {
		b.Fatal(err)
	}
	var iv [aes.BlockSize]byte
	buf := make([]byte, gss.MaxPacket)
	b.SetBytes(int64(len(buf)))
	for range b.N {
		if encrypt {
			cipher.NewCBCEncrypter(block, iv[:]).CryptBlocks(buf, buf)
		} else {
			cipher.NewCBCDecrypter(block, iv[:]).CryptBlocks(buf, buf)
		}
	}
}

func benchHMAC(b *testing.B, h func() hash.Hash) {
	mac := hmac.New(h, make([]byte, 32))
	buf := make([]byte, gss.MaxPacket)
	sum := make([]byte, 0, mac.Size())
	b.SetBytes(int64(len(buf)))
	for range b.N {
		mac.Reset()
		mac.Write(buf)
		sum = mac.Sum(sum[:0])
	}
}

// wrapPair returns an initiator and an acceptor sharing a random key.
func wrapPair(b *testing.B, enctype int32, key []byte) (ini, acc *gss.Wrapper) {
	k := types.EncryptionKey{KeyType: enctype, KeyValue: key}
	ini, err := gss.NewWrapper(k, true, true, 0, 0)
	if err != nil {
		b.Fatal(err)
	}
	if acc, err = gss.NewWrapper(k, false, true, 0, 0); err != nil {
		b.Fatal(err)
	}
	return ini, acc
}

func randomKey(keyLen int) []byte {
	k := make([]byte, keyLen)
	_, _ = rand.Read(k) // crypto/rand.Read does not fail (Go 1.24)
	return k
}

func benchWrap(b *testing.B, enctype int32, keyLen int) {
	ini, _ := wrapPair(b, enctype, randomKey(keyLen))
	pt := wrapPlaintext(ini)
	buf := make([]byte, 0, gss.MaxPacket)
	b.SetBytes(int64(len(pt)))
	b.ResetTimer()
	for range b.N {
		if _, err := ini.Wrap(buf[:0], pt); err != nil {
			b.Fatal(err)
		}
	}
}

// benchUnwrap opens tokens in sequence; every 64 tokens a fresh acceptor
// (outside the timer) starts the sequence numbers again.
func benchUnwrap(b *testing.B, enctype int32, keyLen int) {
	key := randomKey(keyLen)
	ini, _ := wrapPair(b, enctype, key)
	pt := wrapPlaintext(ini)
	toks := make([][]byte, 64)
	for i := range toks {
		tok, err := ini.Wrap(nil, pt)
		if err != nil {
			b.Fatal(err)
		}
		toks[i] = tok
	}
	buf := make([]byte, 0, gss.MaxPacket)
	b.SetBytes(int64(len(pt)))
	b.ResetTimer()
	for i := 0; i < b.N; i += len(toks) {
		b.StopTimer()
		_, acc := wrapPair(b, enctype, key)
		b.StartTimer()
		for j := 0; j < len(toks) && i+j < b.N; j++ {
			if _, err := acc.Unwrap(buf[:0], toks[j]); err != nil {
				b.Fatal(err)
			}
		}
	}
}
