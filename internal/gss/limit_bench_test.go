package gss

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"hash"
	"testing"
)

// BenchmarkLimit measures the standard library's primitives over one 16 KiB
// packet's worth of data, the rate a wrap or unwrap cannot exceed on this CPU:
// AES-256 and AES-128 CBC encrypt and decrypt (cipher.BlockMode, AES-NI
// assembly where the CPU has it) and keyed HMAC-SHA1, -SHA256 and -SHA384
// (Reset, Write, Sum). A wrap of aes256-cts-hmac-sha1-96 does one CBC pass
// and one HMAC-SHA1 pass over the data, so its floor time per byte is the
// sum of the two.
func BenchmarkLimit(b *testing.B) {
	const n = MaxPacket
	buf := make([]byte, n)
	for _, keyLen := range []int{16, 32} {
		block, err := aes.NewCipher(make([]byte, keyLen))
		if err != nil {
			b.Fatal(err)
		}
		name := "aes128"
		if keyLen == 32 {
			name = "aes256"
		}
		b.Run(name+"-cbc-encrypt", func(b *testing.B) {
			b.SetBytes(n)
			for range b.N {
				cipher.NewCBCEncrypter(block, zeroBlock[:]).CryptBlocks(buf, buf)
			}
		})
		b.Run(name+"-cbc-decrypt", func(b *testing.B) {
			b.SetBytes(n)
			for range b.N {
				cipher.NewCBCDecrypter(block, zeroBlock[:]).CryptBlocks(buf, buf)
			}
		})
	}
	for _, h := range []struct {
		name string
		new  func() hash.Hash
	}{{"hmac-sha1", sha1.New}, {"hmac-sha256", sha256.New}, {"hmac-sha384", sha512.New384}} {
		b.Run(h.name, func(b *testing.B) {
			mac := hmac.New(h.new, make([]byte, 32))
			sum := make([]byte, 0, mac.Size())
			b.SetBytes(n)
			for range b.N {
				mac.Reset()
				mac.Write(buf)
				sum = mac.Sum(sum[:0])
			}
		})
	}
}
