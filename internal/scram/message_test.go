package scram

import (
	"bytes"
	"context"
	"encoding/base64"
	"strings"
	"testing"
)

// nonceMark in a test message stands for the client nonce of the exchange it is given to.
const nonceMark = "@N"

var testSaltB64 = base64.StdEncoding.EncodeToString(testSalt)

func TestMalformedServerFirst(t *testing.T) {
	for _, tc := range []struct{ name, msg, want string }{
		{"empty", "", "has no nonce (r=)"},
		{"no nonce", "s=" + testSaltB64 + ",i=4096", "has no nonce (r=)"},
		{"no salt", "r=@Nxyz,i=4096", "has no salt (s=)"},
		{"no count", "r=@Nxyz,s=" + testSaltB64, "has no iteration count (i=)"},
		{"order", "s=" + testSaltB64 + ",r=@Nxyz,i=4096", "has no nonce (r=)"},
		{"mandatory extension", "m=ext,r=@Nxyz,s=" + testSaltB64 + ",i=4096", "mandatory extension (m=)"},
		{"garbage after", "r=@Nxyz,s=" + testSaltB64 + ",i=4096,x=1", "goes on after the iteration count"},
		{"other nonce", "r=abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGH,s=" + testSaltB64 + ",i=4096", "does not extend the client nonce"},
		{"nonce cut", "r=" + nonceMark[:1] + ",s=" + testSaltB64 + ",i=4096", "does not extend the client nonce"},
		{"nonce not extended", "r=@N,s=" + testSaltB64 + ",i=4096", "does not extend the client nonce"},
		{"nonce with a space", "r=@Nab c,s=" + testSaltB64 + ",i=4096", "outside printable ASCII"},
		{"nonce with a high byte", "r=@Nab\xff,s=" + testSaltB64 + ",i=4096", "outside printable ASCII"},
		{"bad base64", "r=@Nxyz,s=not*base64,i=4096", "salt from the server is not valid base64"},
		{"unpadded base64", "r=@Nxyz,s=" + strings.TrimRight(base64.StdEncoding.EncodeToString([]byte("salt!")), "=") + ",i=4096", "not valid base64"},
		{"empty salt", "r=@Nxyz,s=,i=4096", "salt from the server is empty"},
		{"huge salt", "r=@Nxyz,s=" + base64.StdEncoding.EncodeToString(make([]byte, maxSaltLen+1)) + ",i=4096", "longer than 1024 bytes"},
		{"i=0", "r=@Nxyz,s=" + testSaltB64 + ",i=0", "iteration count 0 from the server is below 1"},
		{"i=-1", "r=@Nxyz,s=" + testSaltB64 + ",i=-1", "not a positive decimal number"},
		{"i=+1", "r=@Nxyz,s=" + testSaltB64 + ",i=+4096", "not a positive decimal number"},
		{"i empty", "r=@Nxyz,s=" + testSaltB64 + ",i=", "iteration count from the server is empty"},
		{"i hex", "r=@Nxyz,s=" + testSaltB64 + ",i=0x1000", "not a positive decimal number"},
		{"i huge", "r=@Nxyz,s=" + testSaltB64 + ",i=99999999999999999999999999999999", "iteration count of 32 digits from the server exceeds the limit of 10000000"},
		{"i 2^63", "r=@Nxyz,s=" + testSaltB64 + ",i=9223372036854775808", "iteration count 9223372036854775808 from the server exceeds the limit"},
		{"i 2^31-1", "r=@Nxyz,s=" + testSaltB64 + ",i=2147483647", "iteration count 2147483647 from the server exceeds the limit of 10000000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDerivations()
			k := NewKeys(d.config(Config{}))
			e, err := k.Start("", MechanismSHA256, testUser, testPassword, nil, false)
			if err != nil {
				t.Fatal(err)
			}
			msg := strings.ReplaceAll(tc.msg, nonceMark, e.nonce)
			_, err = e.ServerFirst(context.Background(), []byte(msg))
			if !isKind(err, ErrServerMessage) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			checkSecretFree(t, err, testPassword, e.nonce, testSaltB64, "xyz")
			d.expect(t, 0)
			if factorCount(t, k, testUser, testPassword) != 0 {
				t.Error("a refused message left key factors")
			}
		})
	}
}

func TestMalformedServerFinal(t *testing.T) {
	for _, tc := range []struct {
		name, msg string
		kind      error
		want      string
	}{
		{"empty", "", ErrServerMessage, "neither a verifier (v=) nor an error (e=)"},
		{"other attribute", "x=1", ErrServerMessage, "neither a verifier"},
		{"bad base64", "v=###", ErrServerMessage, "server signature is not valid base64"},
		{"short", "v=" + base64.StdEncoding.EncodeToString(make([]byte, 20)), ErrServerMessage, "server signature is 20 bytes, not 32"},
		{"long", "v=" + base64.StdEncoding.EncodeToString(make([]byte, 200)), ErrServerMessage, "longer than 32 bytes"},
		{"garbage after", "v=" + base64.StdEncoding.EncodeToString(make([]byte, 32)) + ",x=1", ErrServerMessage, "goes on after the verifier"},
		{"wrong", "v=" + base64.StdEncoding.EncodeToString(make([]byte, 32)), ErrServerSignature, "the server does not know the password"},
		{"error", "e=invalid-proof", ErrServerError, "SCRAM error from the server: invalid-proof"},
		{"error with extension", "e=other-error,x=1", ErrServerError, "SCRAM error from the server: other-error"},
		{"error not defined", "e=bad\r\nvalue", ErrServerError, "SCRAM error from the server: a value RFC 5802 does not define (10 bytes)"},
		{"empty error", "e=", ErrServerError, "SCRAM error from the server: a value RFC 5802 does not define (0 bytes)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDerivations()
			k := NewKeys(d.config(Config{}))
			p := passwordPeer(t, testPassword, testSalt, 4096)
			e, _ := k.Start("", MechanismSHA256, testUser, testPassword, nil, false)
			s1, _ := p.conv().Step(string(e.ClientFirst()))
			if _, err := e.ServerFirst(context.Background(), []byte(s1)); err != nil {
				t.Fatal(err)
			}
			err := e.ServerFinal([]byte(tc.msg))
			if !isKind(err, tc.kind) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			checkSecretFree(t, err, testPassword, e.nonce)
			// Nothing of a failed exchange stays.
			if k.Len() != 0 {
				t.Error("entry kept after a failed ServerFinal")
			}
		})
	}
}

// FuzzServerFirst feeds any server-first-message, then any server-final-message, to an exchange:
// no panic, and no error holds the password or the client nonce. nonceMark in either message
// becomes the client nonce, so that the fuzzer reaches past the nonce check.
func FuzzServerFirst(f *testing.F) {
	for _, seed := range [][2]string{
		{"r=@Nxyz,s=" + testSaltB64 + ",i=4", "v=" + base64.StdEncoding.EncodeToString(make([]byte, 32))},
		{"r=@Nxyz,s=" + testSaltB64 + ",i=1", "e=invalid-proof"},
		{"r=@N,s=" + testSaltB64 + ",i=4", ""},
		{"r=@Nxyz,s=" + testSaltB64 + ",i=4,m=1", ""},
		{"m=x,r=@Nxyz,s=" + testSaltB64 + ",i=4", ""},
		{"r=@Nxyz,s=QUJD\n,i=4", "v=\n"},
		{"r=@Nxyz,s=,i=4", ""},
		{"r=@Nxyz,s=QUJD,i=0", ""},
		{"r=@Nxyz,s=QUJD,i=-1", ""},
		{"r=@Nxyz,s=QUJD,i=99999999999999999999999", ""},
		{"r=@Nxyz,s=QUJD,i=0004", "v=,"},
		{"r=@Nxyz,s=QUJD=,i=4", ""},
		{"r=xyz@N,s=QUJD,i=4", ""},
		{"", ""},
		{",,,", ",,"},
	} {
		f.Add([]byte(seed[0]), []byte(seed[1]))
	}
	d := newDerivations()
	k := NewKeys(d.config(Config{MaxIterations: 16})) // derivations stay cheap
	f.Fuzz(func(t *testing.T, first, final []byte) {
		for len(d.done) > 0 {
			<-d.done
		}
		e, err := k.Start("", MechanismSHA256, testUser, testPassword, nil, false)
		if err != nil {
			t.Fatal(err)
		}
		mark := []byte(nonceMark)
		first = bytes.ReplaceAll(first, mark, []byte(e.nonce))
		final = bytes.ReplaceAll(final, mark, []byte(e.nonce))
		c2, err := e.ServerFirst(context.Background(), first)
		checkSecretFree(t, err, testPassword, e.nonce)
		if err != nil {
			if c2 != nil {
				t.Fatal("client-final-message with an error")
			}
			return
		}
		if !bytes.HasPrefix(c2, []byte("c=biws,r="+e.nonce)) || !bytes.Contains(c2, []byte(",p=")) {
			t.Fatalf("client-final-message %q", c2)
		}
		if err := e.ServerFinal(final); err == nil {
			t.Fatalf("server-final-message %q verified without the server's keys", final)
		} else {
			checkSecretFree(t, err, testPassword, e.nonce)
		}
	})
}
