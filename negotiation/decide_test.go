package negotiation

import (
	"errors"
	"slices"
	"testing"
)

// The rows encode src/interfaces/libpq/fe-connect.c (PostgreSQL 17): init_allowed_encryption_methods
// (which methods each gssencmode x sslmode allows) and select_next_encryption_method (GSS first;
// sslmode=allow tries plaintext before SSL), plus what a remembered answer changes.
func TestDecide(t *testing.T) {
	const (
		gss    = MethodGSS
		ssl    = MethodSSL
		direct = MethodDirectSSL
		plain  = MethodPlain
	)
	no := Known{SSL: AnswerNo}
	yes := Known{SSL: AnswerYes}
	gssNo := Known{GSS: AnswerNo}
	direct2 := Known{SSL: AnswerYes, Direct: AnswerYes}
	tests := []struct {
		name    string
		in      Input
		want    []Method
		skipped []Method
		learns  bool
		err     error
	}{
		// No Kerberos credentials: gssencmode=prefer skips GSS with no round trip.
		{"disable", Input{SSLMode: SSLModeDisable, GSSEncMode: GSSEncModePrefer}, []Method{plain}, nil, false, nil},
		{"allow: plaintext then SSL", Input{SSLMode: SSLModeAllow, GSSEncMode: GSSEncModePrefer}, []Method{plain, ssl}, nil, false, nil},
		{"prefer, unknown: SSLRequest then plaintext on the same socket", Input{SSLMode: SSLModePrefer, GSSEncMode: GSSEncModePrefer}, []Method{ssl, plain}, nil, true, nil},
		{"require", Input{SSLMode: SSLModeRequire, GSSEncMode: GSSEncModePrefer}, []Method{ssl}, nil, false, nil},
		{"verify-ca", Input{SSLMode: SSLModeVerifyCA, GSSEncMode: GSSEncModeDisable}, []Method{ssl}, nil, false, nil},
		{"verify-full", Input{SSLMode: SSLModeVerifyFull, GSSEncMode: GSSEncModeDisable}, []Method{ssl}, nil, false, nil},

		// Remembered answers.
		{"prefer, remembered N: plaintext at once", Input{SSLMode: SSLModePrefer, GSSEncMode: GSSEncModePrefer, Known: no}, []Method{plain}, []Method{ssl}, false, nil},
		{"prefer, remembered S: SSLRequest without waiting", Input{SSLMode: SSLModePrefer, GSSEncMode: GSSEncModePrefer, Known: yes}, []Method{ssl, plain}, nil, false, nil},
		{"allow, remembered N: SSL after plaintext is pointless", Input{SSLMode: SSLModeAllow, GSSEncMode: GSSEncModePrefer, Known: no}, []Method{plain}, []Method{ssl}, false, nil},
		{"require is never downgraded by a remembered N", Input{SSLMode: SSLModeRequire, GSSEncMode: GSSEncModePrefer, Known: no}, []Method{ssl}, nil, false, nil},
		{"verify-full is never downgraded by a remembered N", Input{SSLMode: SSLModeVerifyFull, GSSEncMode: GSSEncModePrefer, Known: no}, []Method{ssl}, nil, false, nil},
		{"disable ignores the cache", Input{SSLMode: SSLModeDisable, GSSEncMode: GSSEncModePrefer, Known: yes}, []Method{plain}, nil, false, nil},

		// gssencmode with credentials: GSS first; after it SSL then plaintext, or plaintext then SSL for allow.
		{"gss prefer + prefer", Input{SSLMode: SSLModePrefer, GSSEncMode: GSSEncModePrefer, GSSCredentials: true}, []Method{gss, ssl, plain}, nil, true, nil},
		{"gss prefer + allow", Input{SSLMode: SSLModeAllow, GSSEncMode: GSSEncModePrefer, GSSCredentials: true}, []Method{gss, plain, ssl}, nil, true, nil},
		{"gss prefer + disable", Input{SSLMode: SSLModeDisable, GSSEncMode: GSSEncModePrefer, GSSCredentials: true}, []Method{gss, plain}, nil, true, nil},
		{"gss prefer + verify-full: a GSS channel is used instead of TLS", Input{SSLMode: SSLModeVerifyFull, GSSEncMode: GSSEncModePrefer, GSSCredentials: true}, []Method{gss, ssl}, nil, true, nil},
		{"gss require: GSS only, even with sslmode=prefer", Input{SSLMode: SSLModePrefer, GSSEncMode: GSSEncModeRequire, GSSCredentials: true}, []Method{gss}, nil, false, nil},
		{"gss require + sslmode=require", Input{SSLMode: SSLModeRequire, GSSEncMode: GSSEncModeRequire, GSSCredentials: true}, []Method{gss}, nil, false, nil},
		{"gss prefer, remembered failure: skipped", Input{SSLMode: SSLModePrefer, GSSEncMode: GSSEncModePrefer, GSSCredentials: true, Known: gssNo}, []Method{ssl, plain}, []Method{gss}, true, nil},
		{"gss prefer, failure remembered with older credentials: tried again", Input{SSLMode: SSLModePrefer, GSSEncMode: GSSEncModePrefer, GSSCredentials: true, GSSGeneration: 2, Known: Known{GSS: AnswerNo, GSSGeneration: 1}}, []Method{gss, ssl, plain}, nil, true, nil},
		{"gss require ignores a remembered failure", Input{SSLMode: SSLModePrefer, GSSEncMode: GSSEncModeRequire, GSSCredentials: true, Known: gssNo}, []Method{gss}, nil, false, nil},
		{"gss disable", Input{SSLMode: SSLModePrefer, GSSEncMode: GSSEncModeDisable, GSSCredentials: true}, []Method{ssl, plain}, nil, true, nil},

		// Without credentials, require fails before any socket is opened.
		{"gss require without credentials", Input{SSLMode: SSLModePrefer, GSSEncMode: GSSEncModeRequire}, nil, nil, false, ErrGSSNoCredentials},
		{"gss require without credentials, sslmode=disable", Input{SSLMode: SSLModeDisable, GSSEncMode: GSSEncModeRequire}, nil, nil, false, ErrGSSNoCredentials},

		// Unix sockets: neither SSL nor GSS, whatever the modes.
		{"unix socket, prefer", Input{SSLMode: SSLModePrefer, GSSEncMode: GSSEncModePrefer, UnixSocket: true, GSSCredentials: true}, []Method{plain}, nil, false, nil},
		{"unix socket, sslmode=require", Input{SSLMode: SSLModeRequire, GSSEncMode: GSSEncModeDisable, UnixSocket: true}, []Method{plain}, nil, false, nil},
		{"unix socket, gssencmode=require", Input{SSLMode: SSLModePrefer, GSSEncMode: GSSEncModeRequire, UnixSocket: true}, nil, nil, false, ErrGSSUnixSocket},

		// sslnegotiation=direct: TLS at once, nothing to learn.
		{"direct, require", Input{SSLMode: SSLModeRequire, GSSEncMode: GSSEncModeDisable, DirectSSL: true}, []Method{direct}, nil, false, nil},
		{"direct ignores a remembered N", Input{SSLMode: SSLModeRequire, GSSEncMode: GSSEncModeDisable, DirectSSL: true, Known: no}, []Method{direct}, nil, false, nil},

		// Direct TLS learned: a host remembered to take SSLRequest and direct TLS gets a
		// ClientHello first, SSLRequest after it; plaintext only after SSLRequest.
		{"learned direct, prefer", Input{SSLMode: SSLModePrefer, GSSEncMode: GSSEncModePrefer, Known: direct2}, []Method{direct, ssl, plain}, nil, false, nil},
		{"learned direct, require", Input{SSLMode: SSLModeRequire, GSSEncMode: GSSEncModePrefer, Known: direct2}, []Method{direct, ssl}, nil, false, nil},
		{"learned direct, verify-full", Input{SSLMode: SSLModeVerifyFull, GSSEncMode: GSSEncModeDisable, Known: direct2}, []Method{direct, ssl}, nil, false, nil},
		{"learned direct, allow: after plaintext", Input{SSLMode: SSLModeAllow, GSSEncMode: GSSEncModePrefer, Known: direct2}, []Method{plain, direct, ssl}, nil, false, nil},
		{"learned direct, after GSS", Input{SSLMode: SSLModePrefer, GSSEncMode: GSSEncModePrefer, GSSCredentials: true, Known: Known{SSL: AnswerYes, Direct: AnswerYes}}, []Method{gss, direct, ssl, plain}, nil, true, nil},
		{"learned direct, sslmode=disable", Input{SSLMode: SSLModeDisable, GSSEncMode: GSSEncModePrefer, Known: direct2}, []Method{plain}, nil, false, nil},
		{"learned direct, turned off", Input{SSLMode: SSLModePrefer, GSSEncMode: GSSEncModePrefer, Known: direct2, NoLearnedDirect: true}, []Method{ssl, plain}, nil, false, nil},
		{"direct remembered failing", Input{SSLMode: SSLModePrefer, GSSEncMode: GSSEncModePrefer, Known: Known{SSL: AnswerYes, Direct: AnswerNo}}, []Method{ssl, plain}, nil, false, nil},
		{"direct without 'S' remembered: SSLRequest first", Input{SSLMode: SSLModePrefer, GSSEncMode: GSSEncModePrefer, Known: Known{Direct: AnswerYes}}, []Method{ssl, plain}, nil, true, nil},
		{"direct, but 'N' remembered since", Input{SSLMode: SSLModePrefer, GSSEncMode: GSSEncModePrefer, Known: Known{SSL: AnswerNo, Direct: AnswerYes}}, []Method{plain}, []Method{ssl}, false, nil},
		{"sslnegotiation=direct written: libpq's plan", Input{SSLMode: SSLModeRequire, GSSEncMode: GSSEncModeDisable, DirectSSL: true, Known: direct2}, []Method{direct}, nil, false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Decide(tt.in)
			if !errors.Is(err, tt.err) {
				t.Fatalf("error = %v, want %v", err, tt.err)
			}
			if err != nil {
				return
			}
			if got := p.Methods(); !equal(got, tt.want) {
				t.Errorf("methods = %v, want %v", got, tt.want)
			}
			if got := p.Skipped(); !equal(got, tt.skipped) {
				t.Errorf("skipped = %v, want %v", got, tt.skipped)
			}
			if p.CacheHit() != (len(tt.skipped) > 0) {
				t.Errorf("CacheHit = %v", p.CacheHit())
			}
			if p.Learns != tt.learns {
				t.Errorf("Learns = %v, want %v", p.Learns, tt.learns)
			}
			learned := !tt.in.DirectSSL && len(tt.want) > 0 && slices.Contains(tt.want, MethodDirectSSL)
			if p.LearnedDirect() != learned {
				t.Errorf("LearnedDirect = %v, want %v", p.LearnedDirect(), learned)
			}
		})
	}
}

// CacheUse, the one definition of pgconnector.cache.hit: a hit when a remembered answer changed
// the plan (a method left out) or confirmed it (the server is remembered to accept the plan's
// first request); a miss when the plan asks first what is not remembered; none when no
// remembered answer could matter.
func TestPlanCacheUse(t *testing.T) {
	prefer := Input{SSLMode: SSLModePrefer, GSSEncMode: GSSEncModePrefer}
	creds := prefer
	creds.GSSCredentials, creds.GSSGeneration = true, 7
	with := func(in Input, k Known) Input { in.Known = k; return in }
	mode := func(in Input, ssl SSLMode, gss GSSEncMode) Input { in.SSLMode, in.GSSEncMode = ssl, gss; return in }
	for _, tt := range []struct {
		name string
		in   Input
		want CacheUse
	}{
		{"cold", prefer, CacheUseMiss},
		{"'S' remembered", with(prefer, Known{SSL: AnswerYes}), CacheUseHit},
		{"'N' remembered: SSL left out", with(prefer, Known{SSL: AnswerNo}), CacheUseHit},
		{"'N' remembered, sslmode=require: asked anyway", with(mode(prefer, SSLModeRequire, GSSEncModePrefer), Known{SSL: AnswerNo}), CacheUseMiss},
		{"'S' remembered, sslmode=require", with(mode(prefer, SSLModeRequire, GSSEncModeDisable), Known{SSL: AnswerYes}), CacheUseHit},
		{"GSS cold", creds, CacheUseMiss},
		{"GSS cold, 'S' remembered: GSS asked first", with(creds, Known{SSL: AnswerYes}), CacheUseMiss},
		{"GSS cold, 'N' remembered: SSL left out", with(creds, Known{SSL: AnswerNo}), CacheUseHit},
		{"GSS success remembered", with(creds, Known{GSS: AnswerYes, GSSGeneration: 7}), CacheUseHit},
		{"GSS success remembered with other credentials", with(creds, Known{GSS: AnswerYes, GSSGeneration: 6}), CacheUseMiss},
		{"GSS failure remembered: GSS left out", with(creds, Known{GSS: AnswerNo, GSSGeneration: 7}), CacheUseHit},
		{"GSS failure remembered, gssencmode=require", with(mode(creds, SSLModePrefer, GSSEncModeRequire), Known{GSS: AnswerNo, GSSGeneration: 7}), CacheUseMiss},
		{"GSS success remembered, gssencmode=require", with(mode(creds, SSLModePrefer, GSSEncModeRequire), Known{GSS: AnswerYes, GSSGeneration: 7}), CacheUseHit},
		{"gssencmode=disable, 'N' remembered", with(mode(creds, SSLModePrefer, GSSEncModeDisable), Known{SSL: AnswerNo, GSS: AnswerYes, GSSGeneration: 7}), CacheUseHit},
		{"gssencmode=disable, sslmode=disable", with(mode(creds, SSLModeDisable, GSSEncModeDisable), Known{SSL: AnswerNo}), CacheUseNone},
		{"sslmode=disable, no credentials", mode(prefer, SSLModeDisable, GSSEncModePrefer), CacheUseNone},
		{"sslmode=allow: plaintext first", with(mode(prefer, SSLModeAllow, GSSEncModePrefer), Known{SSL: AnswerYes}), CacheUseNone},
		{"sslmode=allow, 'N' remembered: SSL left out", with(mode(prefer, SSLModeAllow, GSSEncModePrefer), Known{SSL: AnswerNo}), CacheUseHit},
		{"Unix socket", Input{SSLMode: SSLModePrefer, GSSEncMode: GSSEncModePrefer, UnixSocket: true, Known: Known{SSL: AnswerNo}}, CacheUseNone},
		{"sslnegotiation=direct", Input{SSLMode: SSLModeRequire, DirectSSL: true, Known: Known{SSL: AnswerYes}}, CacheUseNone},
		{"direct TLS learned", with(prefer, Known{SSL: AnswerYes, Direct: AnswerYes}), CacheUseHit},
		{"direct TLS learned, sslmode=allow: plaintext first", with(mode(prefer, SSLModeAllow, GSSEncModePrefer), Known{SSL: AnswerYes, Direct: AnswerYes}), CacheUseNone},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Decide(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if got := p.CacheUse(); got != tt.want {
				t.Errorf("CacheUse = %v, want %v (plan %v, skipped %v)", got, tt.want, p.String(), p.Skipped())
			}
		})
	}
}

// Every combination of modes and knowledge gives a plan or one of the documented errors, and a
// mode that requires TLS never gets a plaintext method.
func TestDecideAllCombinations(t *testing.T) {
	for ssl := SSLModeDisable; ssl <= SSLModeVerifyFull; ssl++ {
		for gss := GSSEncModeDisable; gss <= GSSEncModeRequire; gss++ {
			for _, creds := range []bool{false, true} {
				for _, unix := range []bool{false, true} {
					for _, sslA := range []Answer{AnswerUnknown, AnswerYes, AnswerNo} {
						for _, gssA := range []Answer{AnswerUnknown, AnswerYes, AnswerNo} {
							for _, directA := range []Answer{AnswerUnknown, AnswerYes, AnswerNo} {
								in := Input{SSLMode: ssl, GSSEncMode: gss, GSSCredentials: creds, UnixSocket: unix, Known: Known{SSL: sslA, GSS: gssA, Direct: directA}}
								p, err := Decide(in)
								if err != nil {
									if !errors.Is(err, ErrGSSNoCredentials) && !errors.Is(err, ErrGSSUnixSocket) {
										t.Errorf("%+v: unexpected error %v", in, err)
									}
									continue
								}
								if len(p.Methods()) == 0 {
									t.Errorf("%+v: empty plan", in)
								}
								for _, m := range p.Methods() {
									if m == MethodPlain && !unix && (ssl.requiresTLS() || gss == GSSEncModeRequire) {
										t.Errorf("%+v: plaintext planned although encryption is required", in)
									}
									if m == MethodGSS && (gss == GSSEncModeDisable || !creds || unix) {
										t.Errorf("%+v: GSS planned although impossible or disabled", in)
									}
									if m == MethodSSL && (ssl == SSLModeDisable || unix) {
										t.Errorf("%+v: SSL planned although disabled", in)
									}
								}
								// Learned direct TLS is always followed by SSLRequest, before any
								// plaintext: a failed direct handshake never leads to plaintext
								// without the server's 'N' to SSLRequest.
								ms := p.Methods()
								for i, m := range ms {
									if m == MethodDirectSSL && (i+1 >= len(ms) || ms[i+1] != MethodSSL) {
										t.Errorf("%+v: plan %v: direct TLS not followed by SSLRequest", in, p.String())
									}
								}
								if p.LearnedDirect() && (sslA != AnswerYes || directA != AnswerYes) {
									t.Errorf("%+v: direct TLS without both answers remembered", in)
								}
							}
						}
					}
				}
			}
		}
	}
}

func TestParseGSSEncMode(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want GSSEncMode
		err  bool
	}{
		{"", GSSEncModePrefer, false},
		{"prefer", GSSEncModePrefer, false},
		{"disable", GSSEncModeDisable, false},
		{"require", GSSEncModeRequire, false},
		{"Require", 0, true},
		{"allow", 0, true},
	} {
		got, err := ParseGSSEncMode(tt.in)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("ParseGSSEncMode(%q) = %v, %v", tt.in, got, err)
		}
	}
}

// The warm decision path: what the cache knows, then the plan. It must not allocate.
func TestWarmDecisionDoesNotAllocate(t *testing.T) {
	c := NewCache(DefaultTestTTL)
	k := Key{Host: "db.example", Port: 5432}
	c.SetSSL(k, AnswerNo)
	allocs := testing.AllocsPerRun(1000, func() {
		p, err := Decide(Input{SSLMode: SSLModePrefer, GSSEncMode: GSSEncModePrefer, Known: c.Known(k)})
		if err != nil || p.Methods()[0] != MethodPlain {
			t.Fatal("unexpected plan")
		}
	})
	if allocs != 0 {
		t.Errorf("warm decision allocates %v times", allocs)
	}
}

func BenchmarkWarmDecision(b *testing.B) {
	c := NewCache(DefaultTestTTL)
	k := Key{Host: "db.example", Port: 5432}
	c.SetSSL(k, AnswerNo)
	b.ReportAllocs()
	for b.Loop() {
		p, _ := Decide(Input{SSLMode: SSLModePrefer, GSSEncMode: GSSEncModePrefer, Known: c.Known(k)})
		if p.Methods()[0] != MethodPlain {
			b.Fatal("unexpected plan")
		}
	}
}

func equal(a, b []Method) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// gssdelegation is on when its value starts with '1' (libpq 16, fe-auth.c and
// fe-secure-gssapi.c test conn->gssdelegation[0] == '1'); nothing is rejected.
func TestParseGSSDelegation(t *testing.T) {
	for in, want := range map[string]bool{"": false, "0": false, "1": true, "10": true, "1 ": true,
		"true": false, "yes": false, "on": false, " 1": false} {
		if got := ParseGSSDelegation(in); got != want {
			t.Errorf("ParseGSSDelegation(%q) = %v, want %v", in, got, want)
		}
	}
}
