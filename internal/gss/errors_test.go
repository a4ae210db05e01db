package gss

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jcmturner/gokrb5/v8/iana/errorcode"
	"github.com/jcmturner/gokrb5/v8/iana/nametype"
	"github.com/jcmturner/gokrb5/v8/krberror"
	"github.com/jcmturner/gokrb5/v8/messages"
	"github.com/jcmturner/gokrb5/v8/types"

	"github.com/pgconnector/pgconnector/negotiation"

	"github.com/pgconnector/pgconnector/internal/harness"
)

// sentinel names the sentinel of package negotiation an error is, for test messages.
func sentinel(err error) string {
	switch r, u := errors.Is(err, negotiation.ErrGSSRejected), errors.Is(err, negotiation.ErrGSSUnverified); {
	case r && u:
		return "both ErrGSSRejected and ErrGSSUnverified"
	case r:
		return "ErrGSSRejected"
	case u:
		return "ErrGSSUnverified"
	}
	return "neither sentinel"
}

const eText = "E-TEXT-OF-THE-KDC"

// gokrb5KDCError builds the error gokrb5 v8 returns when the KDC answers with a KRB-ERROR of
// code, with gokrb5's own constructors: TGSExchange's when spn is a service principal or a
// krbtgt, ASExchange's when spn is "".
func gokrb5KDCError(code int32, spn string) error {
	ke := messages.NewKRBError(types.NewPrincipalName(nametype.KRB_NT_SRV_INST, "krbtgt/"+testRealm), testRealm, code, eText)
	if spn == "" {
		return krberror.Errorf(ke, krberror.KDCError, "AS Exchange Error: kerberos error response from KDC")
	}
	return krberror.Errorf(ke, krberror.KDCError, "TGS Exchange Error: kerberos error response from KDC when requesting for %s",
		types.NewPrincipalName(nametype.KRB_NT_PRINCIPAL, spn).PrincipalNameString())
}

// Which KRB-ERRORs from the KDC are ErrGSSRejected: those about the service, in answer to the
// TGS-REQ for it; never those of the AS exchange or of a TGS-REQ for a krbtgt. The e-text is
// never in the message.
func TestKDCErrorClassification(t *testing.T) {
	const spn = "postgres/db.example.com"
	cases := []struct {
		code     int32
		rejected bool // in answer to the TGS-REQ for spn
	}{
		{errorcode.KDC_ERR_S_PRINCIPAL_UNKNOWN, true},
		{errorcode.KDC_ERR_ETYPE_NOSUPP, true},
		{errorcode.KDC_ERR_SERVICE_EXP, true},
		{errorcode.KDC_ERR_S_OLD_MAST_KVNO, true},
		{errorcode.KDC_ERR_SERVICE_REVOKED, true},
		{errorcode.KDC_ERR_SERVICE_NOTYET, true},
		{errorcode.KDC_ERR_MUST_USE_USER2USER, true},
		{errorcode.KDC_ERR_C_PRINCIPAL_UNKNOWN, false},
		{errorcode.KDC_ERR_NAME_EXP, false},
		{errorcode.KDC_ERR_CLIENT_REVOKED, false},
		{errorcode.KDC_ERR_TGT_REVOKED, false},
		{errorcode.KDC_ERR_KEY_EXPIRED, false},
		{errorcode.KDC_ERR_PREAUTH_FAILED, false},
		{errorcode.KRB_AP_ERR_TKT_EXPIRED, false},
		{errorcode.KRB_AP_ERR_SKEW, false},
		{errorcode.KRB_AP_ERR_MODIFIED, false},
		{errorcode.KDC_ERR_PRINCIPAL_NOT_UNIQUE, false},
		{errorcode.KDC_ERR_NULL_KEY, false},
		{errorcode.KDC_ERR_POLICY, false},
		{errorcode.KDC_ERR_BADOPTION, false},
		{errorcode.KDC_ERR_PATH_NOT_ACCEPTED, false},
		{errorcode.KDC_ERR_SVC_UNAVAILABLE, false},
		{errorcode.KRB_ERR_GENERIC, false},
		{errorcode.KDC_ERR_WRONG_REALM, false},
		{99, false}, // no such code: "Unknown ErrorCode 99"
	}
	listed := map[int32]bool{}
	for _, c := range cases {
		listed[c.code] = c.rejected
	}
	// The list above, and serviceErrorCodes, agree.
	for code := range serviceErrorCodes {
		if !listed[code] {
			t.Errorf("serviceErrorCodes has %s, which the test does not expect", errorcode.Lookup(code))
		}
	}
	for _, c := range cases {
		for _, req := range []struct {
			name, spn, request string
			rejected           bool
		}{
			{"TGS-REQ for the service", spn, "a ticket for " + spn, c.rejected},
			{"AS-REQ", "", "the ticket-granting ticket", false},
			{"TGS-REQ for a krbtgt", "krbtgt/OTHER.EXAMPLE", "a ticket for krbtgt/OTHER.EXAMPLE", false},
		} {
			t.Run(strconv.Itoa(int(c.code))+" "+req.name, func(t *testing.T) {
				raw := gokrb5KDCError(c.code, req.spn)
				if !strings.Contains(raw.Error(), eText) {
					t.Fatalf("gokrb5's error %q does not hold the e-text: the test does not test", raw)
				}
				for _, err := range []error{raw, krberror.Errorf(raw, krberror.KRBMsgError, "wrapped by gokrb5")} {
					got := kdcExchangeError(spn, err)
					var ke *KDCError
					if !errors.As(got, &ke) || ke.Code != c.code || ke.Request != req.request {
						t.Fatalf("%v: %#v, want a *KDCError with code %d for %q", got, ke, c.code, req.request)
					}
					if errors.Is(got, negotiation.ErrGSSRejected) != req.rejected || errors.Is(got, negotiation.ErrGSSUnverified) {
						t.Errorf("%v is %s, want ErrGSSRejected %t", got, sentinel(got), req.rejected)
					}
					want := "gss: the KDC refused " + req.request + ": " + errorcode.Lookup(c.code)
					if got.Error() != want {
						t.Errorf("message %q, want %q", got, want)
					}
				}
			})
		}
	}
}

// gokrb5 errors that are no KRB-ERROR are plain, with gokrb5's text, cut before any e-text.
func TestKDCExchangeErrorPlain(t *testing.T) {
	const spn = "postgres/db.example.com"
	tooBig := messages.NewKRBError(types.PrincipalName{}, testRealm, errorcode.KRB_ERR_RESPONSE_TOO_BIG, eText)
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"KDC unreachable", krberror.Errorf(errors.New("error sending to a KDC: dial tcp 127.0.0.1:88: connect: connection refused"),
			krberror.NetworkingError, "TGS Exchange Error: issue sending TGS_REQ to KDC"), "connection refused"},
		{"no session", krberror.New(krberror.KRBMsgError, "cannot login, no user credentials available and no valid existing session"),
			"cannot login"},
		{"KRB-ERROR quoted in a networking error", krberror.Errorf(fmt.Errorf("failed to communicate with KDC. Attempts made with UDP (%v) and then TCP (%v)", tooBig, "reset"),
			krberror.NetworkingError, "TGS Exchange Error: issue sending TGS_REQ to KDC"), "KRB-ERROR (52) KRB_ERR_RESPONSE_TOO_BIG"},
		{"KRB-ERROR with an unknown code", errors.New("x: KRB Error: Unknown ErrorCode -3 - " + eText), "KRB-ERROR (its text is not shown)"},
		{"KDC error of an unknown form", krberror.Errorf(tooBig, krberror.KDCError, "something gokrb5 does not say today"), "KRB-ERROR (52)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := kdcExchangeError(spn, c.err)
			if s := sentinel(got); s != "neither sentinel" {
				t.Errorf("%v is %s", got, s)
			}
			var ke *KDCError
			if errors.As(got, &ke) {
				t.Errorf("%v is a *KDCError", got)
			}
			if !strings.Contains(got.Error(), spn) || !strings.Contains(got.Error(), c.want) || strings.Contains(got.Error(), eText) {
				t.Errorf("message %q: want %q and %s, without the e-text", got, c.want, spn)
			}
		})
	}
	if kdcExchangeError(spn, nil) != nil {
		t.Error("kdcExchangeError(nil) is not nil")
	}
}

// What the acceptor answers to the AP-REQ: a KRB-ERROR is ErrGSSRejected, any other failed
// check ErrGSSUnverified.
func TestInitiatorClassification(t *testing.T) {
	f := newFixture(t, 18)
	cases := []struct {
		name  string
		reply func(messages.APReq) []byte
		want  string
	}{
		{"KRB-ERROR", func(messages.APReq) []byte { return makeKRBError(t, errorcode.KRB_AP_ERR_MODIFIED, eText) }, "ErrGSSRejected"},
		{"KRB-ERROR, unknown code", func(messages.APReq) []byte { return makeKRBError(t, 1234, eText) }, "ErrGSSRejected"},
		{"AP-REP under another key", func(a messages.APReq) []byte {
			o := goodReply(a, nil, 1)
			o.key = randomKey(t, 18)
			return makeAPRep(t, o)
		}, "ErrGSSUnverified"},
		{"AP-REP without the authenticator's time", func(a messages.APReq) []byte {
			o := goodReply(a, nil, 1)
			o.cusec = (o.cusec + 1) % 1000000
			return makeAPRep(t, o)
		}, "ErrGSSUnverified"},
		{"bad acceptor subkey", func(a messages.APReq) []byte {
			k := types.EncryptionKey{KeyType: 18, KeyValue: make([]byte, 16)}
			return makeAPRep(t, goodReply(a, &k, 1))
		}, "ErrGSSUnverified"},
		{"sequence number out of range", func(a messages.APReq) []byte { return makeAPRep(t, goodReply(a, nil, 1<<40)) }, "ErrGSSUnverified"},
		{"malformed AP-REP", func(messages.APReq) []byte { return frameToken(tokAPRep, []byte{0x6f, 0x03, 1, 2, 3}) }, "ErrGSSUnverified"},
		{"malformed KRB-ERROR", func(messages.APReq) []byte { return frameToken(tokKRBError, []byte{0x7e, 0x00}) }, "ErrGSSUnverified"},
		{"not a token", func(messages.APReq) []byte { return []byte("garbage") }, "ErrGSSUnverified"},
		{"no token", func(messages.APReq) []byte { return nil }, "ErrGSSUnverified"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ini, apreq := start(t, f)
			_, _, err := ini.Step(c.reply(apreq))
			if err == nil {
				t.Fatal("Step accepted the reply")
			}
			if got := sentinel(err); got != c.want {
				t.Errorf("%v is %s, want %s", err, got, c.want)
			}
			// Failed for good, and the same error again.
			if _, _, err2 := ini.Step(makeAPRep(t, goodReply(apreq, nil, 1))); sentinel(err2) != c.want {
				t.Errorf("second Step: %v is %s, want %s", err2, sentinel(err2), c.want)
			}
			if strings.Contains(err.Error(), eText) {
				t.Errorf("the message repeats the e-text: %q", err)
			}
		})
	}
}

// badPackets are packets the real server cannot send, for a context whose initiator Wrapper
// is ini and acceptor Wrapper acc (both with sequence numbers from 0), each with the Unwrap
// error it is (nil: none).
func badPackets(t *testing.T, ini, acc *Wrapper) []struct {
	name   string
	packet []byte
	want   error
} {
	t.Helper()
	frame := func(tok []byte) []byte { return append(binary.BigEndian.AppendUint32(nil, uint32(len(tok))), tok...) }
	good := func() []byte {
		tok, err := NewWrapper(acc.keyValueKey(), false, true, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		return mustWrap(t, tok, []byte("R\x00\x00\x00\x08\x00\x00\x00\x00")) // AuthenticationOk
	}
	flip := func(i int, b byte) []byte {
		tok := good()
		tok[i] ^= b
		return frame(tok)
	}
	skipped, err := NewWrapper(acc.keyValueKey(), false, true, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	return []struct {
		name   string
		packet []byte
		want   error
	}{
		{"tampered ciphertext", flip(40, 0x01), ErrIntegrity},
		{"sequence number skipped", frame(mustWrap(t, skipped, []byte("R\x00\x00\x00\x08\x00\x00\x00\x00"))), ErrSequence},
		{"reflected (sent by the initiator)", frame(mustWrap(t, ini, []byte("R\x00\x00\x00\x08\x00\x00\x00\x00"))), ErrDirection},
		{"AcceptorSubkey flag cleared", flip(2, FlagAcceptorSubkey), ErrSubkeyFlag},
		{"Sealed flag cleared", flip(2, FlagSealed), ErrNotSealed},
		{"wrong TOK_ID", flip(1, 0xff), ErrMalformedToken},
		{"packet length 0", []byte{0, 0, 0, 0}, nil},
		{"packet length beyond the maximum", binary.BigEndian.AppendUint32(nil, MaxPacket), nil},
	}
}

// A packet the real server cannot send fails the conn's Read with ErrGSSUnverified (and the
// Unwrap error); a reset, an EOF and a timeout do not.
func TestConnReadClassification(t *testing.T) {
	key := randomKey(t, 18)
	ini, acc := pair(t, key, true, 0, 0)
	for _, c := range badPackets(t, ini, acc) {
		t.Run(c.name, func(t *testing.T) {
			ini, _ := pair(t, key, true, 0, 0)
			cc, s := net.Pipe()
			defer cc.Close()
			defer s.Close()
			go s.Write(c.packet)
			_, err := NewConn(cc, ini).Read(make([]byte, 100))
			if sentinel(err) != "ErrGSSUnverified" || (c.want != nil && !errors.Is(err, c.want)) {
				t.Fatalf("Read: %v is %s, want ErrGSSUnverified and %v", err, sentinel(err), c.want)
			}
		})
	}
	t.Run("EOF, timeout", func(t *testing.T) {
		ini, _ := pair(t, key, true, 0, 0)
		cc, s := net.Pipe()
		defer cc.Close()
		conn := NewConn(cc, ini)
		conn.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
		if _, err := conn.Read(make([]byte, 1)); err == nil || sentinel(err) != "neither sentinel" {
			t.Errorf("timeout: %v is %s", err, sentinel(err))
		}
		conn.SetReadDeadline(time.Time{})
		go func() { s.Write([]byte{0, 0}); s.Close() }()
		if _, err := conn.Read(make([]byte, 1)); !errors.Is(err, io.ErrUnexpectedEOF) || sentinel(err) != "neither sentinel" {
			t.Errorf("EOF in a length: %v is %s", err, sentinel(err))
		}
	})
}

// The error of a conn Read during pgx's startup keeps its chain through pgx: pgx's error is
// still ErrGSSUnverified and the Unwrap error.
func TestUnverifiedThroughPgx(t *testing.T) {
	key := randomKey(t, 18)
	ini, acc := pair(t, key, true, 0, 0)
	for _, c := range badPackets(t, ini, acc) {
		t.Run(c.name, func(t *testing.T) {
			ln, err := harness.Listen()
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			served := make(chan error, 1)
			go func() {
				s, err := ln.Accept()
				if err != nil {
					served <- err
					return
				}
				defer s.Close()
				// The StartupMessage, in one packet; then the bad answer.
				var n [4]byte
				if _, err := io.ReadFull(s, n[:]); err != nil {
					served <- err
					return
				}
				if _, err := io.CopyN(io.Discard, s, int64(binary.BigEndian.Uint32(n[:]))); err != nil {
					served <- err
					return
				}
				_, err = s.Write(c.packet)
				served <- err
				io.Copy(io.Discard, s) // until pgx closes
			}()
			cfg, err := pgconn.ParseConfig(fmt.Sprintf("host=127.0.0.1 port=%d user=alice dbname=app sslmode=disable", ln.Addr().(*net.TCPAddr).Port))
			if err != nil {
				t.Fatal(err)
			}
			ini, _ := pair(t, key, true, 0, 0)
			cfg.AfterNetConnect = func(_ context.Context, _ *pgconn.Config, conn net.Conn) (net.Conn, error) {
				return NewConn(conn, ini), nil
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			pc, err := pgconn.ConnectConfig(ctx, cfg)
			if err == nil {
				pc.Close(ctx)
				t.Fatal("pgx connected")
			}
			if err := <-served; err != nil {
				t.Fatalf("the server: %v", err)
			}
			var ce *pgconn.ConnectError
			if !errors.As(err, &ce) {
				t.Errorf("pgx returned %T, not a *pgconn.ConnectError", err)
			}
			if sentinel(err) != "ErrGSSUnverified" || (c.want != nil && !errors.Is(err, c.want)) {
				t.Fatalf("pgx: %v is %s, want ErrGSSUnverified and %v", err, sentinel(err), c.want)
			}
			t.Logf("pgx: %v", err)
		})
	}
}
