package tlspolicy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// countSignatures runs f and returns how many signatures the package checked meanwhile.
func countSignatures(t testing.TB, f func()) int64 {
	t.Helper()
	var n atomic.Int64
	signatureChecks.Store(&n)
	defer signatureChecks.Store(nil)
	f()
	return n.Load()
}

// chainFuzz is what FuzzChainCheck builds server certificate lists from: certificates of four
// names N0 to N3, each name with a key of its own, and trust anchors.
type chainFuzz struct {
	// pool[i<<6 | j<<4 | v] has the subject Ni, the issuer name Nj and Ni's key, and is by
	// the bits of v: 1 signed by a stray key (else by Nj's), 2 not a CA, 4 expired, 8 without
	// an authorityKeyIdentifier (else Nj's key identifier).
	pool [256]*x509.Certificate
	// leaves[j<<1 | w] is a server certificate for localhost issued by Nj, signed by Nj's key
	// (w 0) or a stray key (w 1).
	leaves [8]*x509.Certificate
	// trusts: a root file with the self-signed N0; the same with the N1 of the pool issued by
	// N0 (an intermediate in the file); a pool that cannot be listed holding N0 (as
	// sslrootcert=system); a root file with a self-signed N3 of another key.
	trusts [4]chainTrust
	now    time.Time
}

func newChainFuzz(t testing.TB) *chainFuzz {
	t.Helper()
	fz := &chainFuzz{now: time.Now()}
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	skid := func(k *ecdsa.PrivateKey) []byte {
		der, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(der)
		return sum[:20]
	}
	var names [4]pkix.Name
	var keys [4]*ecdsa.PrivateKey
	for i := range names {
		names[i] = pkix.Name{CommonName: "N" + string(rune('0'+i))}
		keys[i] = newKey()
	}
	stray := newKey()
	serial := int64(0)
	issue := func(tmpl, parent *x509.Certificate, pub *ecdsa.PublicKey, signer *ecdsa.PrivateKey) *x509.Certificate {
		serial++
		tmpl.SerialNumber = big.NewInt(serial)
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
		if err != nil {
			t.Fatal(err)
		}
		c, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	valid := func(c *x509.Certificate, expired bool) *x509.Certificate {
		c.NotBefore, c.NotAfter = fz.now.Add(-time.Hour), fz.now.Add(24*time.Hour)
		if expired {
			c.NotBefore, c.NotAfter = fz.now.Add(-48*time.Hour), fz.now.Add(-24*time.Hour)
		}
		return c
	}
	for i := range 4 {
		for j := range 4 {
			for v := range 16 {
				parent := &x509.Certificate{Subject: names[j], SubjectKeyId: skid(keys[j])}
				signer := keys[j]
				if v&1 != 0 {
					signer = stray
				}
				if v&8 != 0 {
					parent.SubjectKeyId = nil
				}
				tmpl := valid(&x509.Certificate{Subject: names[i], SubjectKeyId: skid(keys[i]),
					BasicConstraintsValid: true, IsCA: v&2 == 0, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}, v&4 != 0)
				fz.pool[i<<6|j<<4|v] = issue(tmpl, parent, &keys[i].PublicKey, signer)
			}
		}
	}
	for j := range 4 {
		for w := range 2 {
			signer := keys[j]
			if w == 1 {
				signer = stray
			}
			tmpl := valid(&x509.Certificate{Subject: pkix.Name{CommonName: "localhost"}, DNSNames: []string{"localhost"},
				KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, false)
			fz.leaves[j<<1|w] = issue(tmpl, &x509.Certificate{Subject: names[j], SubjectKeyId: skid(keys[j])}, &stray.PublicKey, signer)
		}
	}
	selfSignedCA := func(name pkix.Name, k *ecdsa.PrivateKey) *x509.Certificate {
		tmpl := valid(&x509.Certificate{Subject: name, SubjectKeyId: skid(k), BasicConstraintsValid: true, IsCA: true,
			KeyUsage: x509.KeyUsageCertSign}, false)
		return issue(tmpl, tmpl, &k.PublicKey, k)
	}
	root := selfSignedCA(names[0], keys[0])
	system := x509.NewCertPool()
	system.AddCert(root)
	fz.trusts = [4]chainTrust{
		trustOf(newRootSet([]*x509.Certificate{root})),
		trustOf(newRootSet([]*x509.Certificate{root, fz.pool[1<<6|0<<4]})),
		{anchors: system, filter: true},
		trustOf(newRootSet([]*x509.Certificate{selfSignedCA(names[3], newKey())})),
	}
	return fz
}

// peer is the server's certificate list of a fuzz input: data[0] chooses the trust (bits 0-1)
// and the server's certificate (bits 2-4), each further byte a certificate of the pool.
func (fz *chainFuzz) input(data []byte) (peer []*x509.Certificate, t chainTrust) {
	peer = []*x509.Certificate{fz.leaves[data[0]>>2&7]}
	for _, b := range data[1:] {
		peer = append(peer, fz.pool[b])
	}
	return peer, fz.trusts[data[0]&3]
}

// The fuzz inputs' bounds: a list of at most maxFuzzPeers certificates after the server's (the
// 256 KiB crypto/tls accepts hold about a thousand small ones); the signatures the package
// checks for one list, at most one per link of the chain built (OpenSSL's depth); the time of
// one check, far above what the list costs (crypto/x509 checks at most 100 P-256 signatures,
// about 7 ms) and far below what checking every candidate at every step costs.
const (
	maxFuzzPeers      = 1024
	maxFuzzSignatures = maxChainDepth + 1
	maxFuzzTime       = 2 * time.Second
)

// FuzzChainCheck: a list of certificates taken from a pool of four names that issue each other
// (genuine or stray signatures, CAs or not, expired or not, with or without key identifiers) is
// checked against four trusts (root files, a pool that cannot be listed) within bounds of
// signatures checked and of time, and a refusal says "certificate verify failed"; a verified
// chain runs from the server's certificate to a self-signed anchor, and with a root file it is
// OpenSSL's one chain.
func FuzzChainCheck(f *testing.F) {
	fz := newChainFuzz(f)
	f.Add([]byte{2<<2 | 0, 1<<6 | 0<<4})              // N1 issued by N0 (honest, verifies)
	f.Add([]byte{2<<2 | 1, 1<<6 | 0<<4})              // the same with N1 in the root file
	f.Add([]byte{2<<2 | 2, 1<<6 | 0<<4, 0<<6 | 0<<4}) // system pool, the server sends N0 too
	f.Add([]byte{6<<2 | 3, 2<<6 | 1<<4, 1<<6 | 3<<4})
	junk := []byte{2<<2 | 0}
	for k := range 600 { // N1 and N2 issuing each other, stray signatures: a cycle of 16 variants each
		junk = append(junk, byte(1<<6|2<<4|(k&15)|1), byte(2<<6|1<<4|(k&15)|1))
	}
	f.Add(junk[:maxFuzzPeers+1])
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 || len(data) > maxFuzzPeers+1 {
			return
		}
		peer, trust := fz.input(data)
		var chains [][]*x509.Certificate
		var err error
		start := time.Now()
		checks := countSignatures(t, func() { chains, err = verifyChain(peer, trust, fz.now) })
		if d := time.Since(start); d > maxFuzzTime {
			t.Fatalf("%d certificates checked in %v, want at most %v", len(peer), d, maxFuzzTime)
		}
		if checks > maxFuzzSignatures {
			t.Fatalf("%d certificates: %d signatures checked, want at most %d", len(peer), checks, maxFuzzSignatures)
		}
		if err != nil {
			if !strings.HasPrefix(err.Error(), "certificate verify failed: ") {
				t.Fatalf("refusal %q does not say certificate verify failed", err)
			}
			return
		}
		if trust.store != nil {
			built := buildChain(peer, trust.store, fz.now).certs
			if len(chains) != 1 || !slices.EqualFunc(chains[0], built, (*x509.Certificate).Equal) {
				t.Fatalf("%d chains verified with a root file, want OpenSSL's one (%d certificates)", len(chains), len(built))
			}
		}
		for _, ch := range chains {
			if ch[0] != peer[0] || !selfSigned(ch[len(ch)-1]) || len(ch) > maxChainDepth+2 {
				t.Fatalf("a chain of %d certificates from %s to %s", len(ch), ch[0].Subject, ch[len(ch)-1].Subject)
			}
		}
	})
}

// The fuzz target's honest inputs verify and its junk is refused.
func TestChainFuzzSeeds(t *testing.T) {
	fz := newChainFuzz(t)
	for _, tt := range []struct {
		data []byte
		want string // "" for verified, else the start of the reason
	}{
		{[]byte{2<<2 | 0, 1<<6 | 0<<4}, ""},
		{[]byte{2<<2 | 1, 1<<6 | 0<<4}, ""},
		{[]byte{2<<2 | 2, 1<<6 | 0<<4}, ""},
		{[]byte{2<<2 | 0, 1<<6 | 0<<4 | 4}, "certificate has expired"},
		{[]byte{2<<2 | 0, 1<<6 | 0<<4 | 1}, "certificate signature failure"},
		{[]byte{2<<2 | 0, 1<<6 | 0<<4 | 2}, "invalid CA certificate"},
		{[]byte{2<<2 | 3, 1<<6 | 0<<4}, "unable to get local issuer certificate"},
	} {
		peer, trust := fz.input(tt.data)
		_, err := verifyChain(peer, trust, fz.now)
		got := ""
		if err != nil {
			got = strings.TrimPrefix(err.Error(), "certificate verify failed: ")
		}
		if !strings.HasPrefix(got, tt.want) || (tt.want == "") != (got == "") {
			t.Errorf("%v: %v, want %q", tt.data, err, tt.want)
		}
	}
}
