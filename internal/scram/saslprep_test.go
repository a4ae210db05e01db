package scram

import (
	"context"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/sha256"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// The password preparation of PostgreSQL's pg_saslprep (src/common/saslprep.c), case by case: RFC
// 4013's examples (section 3, as 002_saslprep.pl uses them) and the inputs where PostgreSQL's
// order of steps differs from RFC 4013's (and from github.com/xdg-go/stringprep).
func TestSASLprep(t *testing.T) {
	for _, tc := range []struct {
		name, in, out string
		ok            bool
	}{
		// RFC 4013 section 3.
		{"soft hyphen mapped to nothing", "I\u00adX", "IX", true},
		{"no transformation", "user", "user", true},
		{"case preserved", "USER", "USER", true},
		{"NFKC, from ISO 8859-1", "\u00aa", "a", true},
		{"NFKC, roman numeral", "\u2168", "IX", true},
		// PostgreSQL: an ASCII password is used as it is, control characters included.
		{"ASCII control character", "foo\x07bar", "foo\x07bar", true},
		// Outside ASCII a prohibited code point fails pg_saslprep: the password as it is.
		{"control character beside non-ASCII", "\u00e9\x07", "\u00e9\x07", false},
		{"bidi: RandALCat then digit", "\u0627\u0031", "\u0627\u0031", false},
		{"bidi: RandALCat first and last", "\u0627\u0031\u0628", "\u0627\u0031\u0628", true},
		{"bidi: RandALCat with LCat", "foo\u0627bar", "foo\u0627bar", false},
		{"invalid UTF-8", "caf\xe9", "caf\xe9", false},
		{"surrogate in UTF-8", "a\xed\xa0\x80", "a\xed\xa0\x80", false},
		{"non-ASCII space", "a\u00a0b", "a b", true},
		// Where PostgreSQL differs from RFC 4013's order: C.1.2 mapped before B.1 (U+200B is in
		// both), an empty result gives the password as it is, and the prohibited and unassigned
		// checks are made before NFKC.
		{"zero width space is C.1.2 first", "a\u200bb", "a b", true},
		{"only a soft hyphen", "\u00ad", "\u00ad", false},
		{"modifier letter unassigned in Unicode 3.2", "x\u1d43", "x\u1d43", false},
		{"combining grave tone mark prohibited (C.8)", "a\u0340", "a\u0340", false},
		{"subscript j unassigned in Unicode 3.2", "x\u2c7c", "x\u2c7c", false},
		// RFC 3454's B.1 has U+1806, as PostgreSQL does (xdg-go/stringprep v1.0.4 does not).
		{"Mongolian todo soft hyphen", "a\u1806b", "ab", true},
		// Table A.1's edges: U+0220 assigned in 3.2, U+0221 not.
		{"assigned in Unicode 3.2", "\u0220", "\u0220", true},
		{"unassigned in Unicode 3.2", "\u0221", "\u0221", false},
		{"private use (C.3)", "\ue000", "\ue000", false},
		{"tagging (C.9)", "a\U000e0041", "a\U000e0041", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, ok := SASLprep(tc.in)
			if out != tc.out || ok != tc.ok {
				t.Errorf("SASLprep(%+q) = %+q, %v; want %+q, %v", tc.in, out, ok, tc.out, tc.ok)
			}
		})
	}
}

// The PBKDF2 of this package gives crypto/pbkdf2's (RFC 8018 section 5.2)
// for one block, whatever the count, and stops with the context's error.
func TestSaltedPassword(t *testing.T) {
	for _, iters := range []int{1, 2, checkEvery - 1, checkEvery, checkEvery + 1, 3 * checkEvery} {
		got, err := saltedPassword(context.Background(), "pencil", testSalt, iters)
		want, werr := pbkdf2.Key(sha256.New, "pencil", testSalt, iters, sha256.Size)
		if err != nil || werr != nil || !hmac.Equal(got[:], want) {
			t.Errorf("%d iterations: %x, %v; want %x", iters, got, err, want)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := saltedPassword(ctx, "pencil", testSalt, 10*checkEvery); err != context.Canceled {
		t.Errorf("ended context: %v", err)
	}
}

// FuzzSASLprep: no panic, and pg_saslprep's properties: ASCII as it is; invalid UTF-8 refused
// as it is; a refusal always gives the password as it is; an accepted password gives valid UTF-8
// in NFKC.
func FuzzSASLprep(f *testing.F) {
	for _, s := range []string{"IX", "I\u00adX", "\u2168", "\u00aa", "a\u200bb", "\u00ad", "x\u1d43", "a\u0340",
		"x\u2c7c", "\u0627\u0031", "\u0627\u0031\u0628", "caf\xe9", "a\u1806b", "\ufdfa", "\u00e9\x07"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out, ok := SASLprep(in)
		ascii := true
		for i := 0; i < len(in); i++ {
			ascii = ascii && in[i] < utf8.RuneSelf
		}
		switch {
		case ascii && (out != in || !ok):
			t.Fatalf("ASCII %+q gave %+q, %v", in, out, ok)
		case !utf8.ValidString(in) && (out != in || ok):
			t.Fatalf("invalid UTF-8 %+q gave %+q, %v", in, out, ok)
		case !ok && out != in:
			t.Fatalf("refused %+q gave %+q, not the password as it is", in, out)
		case ok && !ascii && (!utf8.ValidString(out) || !norm.NFKC.IsNormalString(out)):
			t.Fatalf("%+q gave %+q, not valid UTF-8 in NFKC", in, out)
		}
	})
}
