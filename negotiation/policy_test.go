package negotiation

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Errors as they reach the negotiator are classified by what they say about the server.
func TestClassify(t *testing.T) {
	live := context.Background()
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	timeoutErr := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	for _, tt := range []struct {
		name string
		ctx  context.Context
		err  error
		want class
	}{
		{"server error", live, fmt.Errorf("x: %w", &pgconn.PgError{Code: "53300"}), classServer},
		{"protocol", live, fmt.Errorf("dial error: %w", &ProtocolError{Request: "SSLRequest"}), classProtocol},
		{"error response", live, &ErrorResponseError{Request: "SSLRequest"}, classErrorResponse},
		{"rejected", live, fmt.Errorf("gss: %w", ErrGSSRejected), classRejected},
		{"unverified", live, fmt.Errorf("read: %w", ErrGSSUnverified), classUnverified},
		{"canceled", ended, context.Canceled, classCanceled},
		{"deadline", expired, context.DeadlineExceeded, classTimeout},
		{"i/o timeout", live, timeoutErr, classTimeout},
		{"any error once the deadline passed", expired, io.ErrUnexpectedEOF, classTimeout},
		{"reset", live, &net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, classReset},
		{"closed", live, io.ErrUnexpectedEOF, classClosed},
		{"EOF", live, fmt.Errorf("failed to receive message: %w", io.EOF), classClosed},
		{"other", live, errors.New("something"), classOther},
		{"TLS server refused", live, fmt.Errorf("AfterNetConnect failed: %w", &TLSRefusedError{Err: ErrDirectTLSNoALPN}), classTLSRefused},
		{"certificate verification", live, fmt.Errorf("tls error: %w", &tls.CertificateVerificationError{Err: errors.New("x509: unknown authority")}), classTLSRefused},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := classify(tt.ctx, tt.err); got != tt.want {
				t.Errorf("classify = %d, want %d", got, tt.want)
			}
		})
	}
}

var allSteps = []step{stepStartup, stepDial, stepSSLRequest, stepTLS, stepGSSENCRequest, stepServiceTicket, stepGSSContext}

var allClasses = []class{classOther, classCanceled, classTimeout, classClosed, classReset, classProtocol,
	classErrorResponse, classRejected, classUnverified, classServer, classClientRefused, classTLSRefused}

// What may be remembered, whatever the method, step and error: the answer to GSSENCRequest
// ('E'), Kerberos refusing (KDC or acceptor), the server closing the socket on the AP-REQ (what
// PostgreSQL does when it cannot accept the context), and a GSS-encrypted startup refused with
// 28000 once the connect gets in without GSS encryption. Never load, timeouts, resets,
// cancellation or a failed check of the server.
func TestJudgeRemembersOnlyWhatTheServerSaid(t *testing.T) {
	codes := []string{"", "28000", "28P01", "53300", "57P03", "3D000", "42704"}
	for _, m := range []Method{MethodGSS, MethodSSL, MethodPlain} {
		for _, st := range allSteps {
			for _, c := range allClasses {
				for _, code := range codes {
					if (c == classServer) != (code != "") {
						continue
					}
					for _, authOK := range []bool{false, true} {
						v := judge(m, st, c, code, authOK)
						strike := st == stepGSSENCRequest && c == classErrorResponse ||
							st == stepGSSContext && (c == classRejected || c == classClosed)
						no := st == stepServiceTicket && c == classRejected
						// A 28000 over GSS encryption is pg_hba refusing it or a failed
						// GSSAPI authentication: learned only once the connect gets in
						// without GSS encryption.
						ifIn := c == classServer && code == "28000" && m == MethodGSS && !authOK
						want := gssNothing
						switch {
						case ifIn:
							want = gssNoIfFallbackGetsIn
						case no:
							want = gssNo
						case strike:
							want = gssStrike
						}
						if v.gss != want {
							t.Errorf("%v at %v, class %d %s, authOK %v: lesson %d, want %d", m, st, c, code, authOK, v.gss, want)
						}
					}
					v := judge(m, st, c, code, false)
					switch c {
					case classCanceled:
						if !v.final || v.next {
							t.Errorf("%v at %v: a canceled connect goes on", m, st)
						}
					case classTimeout:
						if v.next {
							t.Errorf("%v at %v: a timeout tries another method on the address (libpq: next address)", m, st)
						}
					case classProtocol:
						if v.next || !v.final {
							t.Errorf("%v at %v: a protocol violation tries something else", m, st)
						}
					}
					if c == classServer && (code == "53300" || code == "57P03") && v.next {
						t.Errorf("%v: load (%s) opens another socket", m, code)
					}
				}
			}
		}
	}
}

// Rows of the table that libpq's behaviour fixes (fe-connect.c, PQconnectPoll).
func TestJudgeFollowsLibpq(t *testing.T) {
	for _, tt := range []struct {
		name   string
		m      Method
		st     step
		c      class
		code   string
		authOK bool
		want   verdict
	}{
		{"'E' to SSLRequest fails", MethodSSL, stepSSLRequest, classErrorResponse, "", false, verdict{final: true}},
		{"SSLRequest closed: fails", MethodSSL, stepSSLRequest, classClosed, "", false, verdict{final: true}},
		{"SSLRequest reset: fails", MethodSSL, stepSSLRequest, classReset, "", false, verdict{final: true}},
		{"SSLRequest timeout: next address", MethodSSL, stepSSLRequest, classTimeout, "", false, verdict{}},
		{"'E' to GSSENCRequest: retry without GSS", MethodGSS, stepGSSENCRequest, classErrorResponse, "", false, verdict{next: true, gss: gssStrike}},
		{"GSSENCRequest closed: fails", MethodGSS, stepGSSENCRequest, classClosed, "", false, verdict{final: true}},
		{"TLS handshake failure under prefer: plaintext", MethodSSL, stepTLS, classOther, "", false, verdict{next: true}},
		{"TLS handshake reset: plaintext", MethodSSL, stepTLS, classReset, "", false, verdict{next: true}},
		{"TLS server refused by the client (certificate, root file, ALPN): plaintext, nothing remembered", MethodSSL, stepTLS, classTLSRefused, "", false, verdict{next: true}},
		{"GSS context failure: next method", MethodGSS, stepGSSContext, classOther, "", false, verdict{next: true}},
		{"GSS context closed: a strike", MethodGSS, stepGSSContext, classClosed, "", false, verdict{next: true, gss: gssStrike}},
		{"tampering: next method, nothing remembered", MethodGSS, stepGSSContext, classUnverified, "", false, verdict{next: true}},
		{"KDC unreachable: next method, nothing remembered", MethodGSS, stepServiceTicket, classOther, "", false, verdict{next: true}},
		{"wrong password: no other host", MethodPlain, stepStartup, classServer, "28P01", false, verdict{final: true}},
		{"28000 under GSS: next method, learned only if it gets in", MethodGSS, stepStartup, classServer, "28000", false, verdict{next: true, gss: gssNoIfFallbackGetsIn, stale: true}},
		{"pg_hba under TLS", MethodSSL, stepStartup, classServer, "28000", false, verdict{next: true, stale: true}},
		{"28000 after AuthenticationOk: authentication failed, stop", MethodGSS, stepStartup, classServer, "28000", true, verdict{final: true}},
		{"too many clients under GSS: one socket, stop", MethodGSS, stepStartup, classServer, "53300", false, verdict{final: true}},
		{"another error before AuthenticationOk: next method", MethodSSL, stepStartup, classServer, "08P01", false, verdict{next: true}},
		{"requirepeer, require_auth, channel_binding, sslcertmode: stop", MethodPlain, stepStartup, classClientRefused, "", false, verdict{final: true}},
		{"starting up: next host", MethodPlain, stepStartup, classServer, "57P03", false, verdict{leave: true}},
		{"closed during startup under TLS: no fallback, no other host", MethodSSL, stepStartup, classClosed, "", false, verdict{final: true}},
		{"reset during startup: no other host", MethodPlain, stepStartup, classReset, "", false, verdict{final: true}},
		{"wrap token fails during startup: no fallback, no other host", MethodGSS, stepStartup, classUnverified, "", false, verdict{final: true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := judge(tt.m, tt.st, tt.c, tt.code, tt.authOK); got != tt.want {
				t.Errorf("judge = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// A retry after a remembered answer proved wrong shares the host's connect_timeout: here the
// first attempt (connects got in with the answer before) takes 700 ms of a 1 s connect_timeout
// to be rejected by pg_hba, and the retry's DNS lookup hangs; the connect ends at 1 s, not 1.7 s.
func TestStaleRetrySharesTheBudget(t *testing.T) {
	lookups := 0
	n, err := NewNegotiator(Config{
		Hosts:          []Host{{Host: "db.example", Port: 5432, SSLMode: SSLModePrefer}},
		GSSEncMode:     GSSEncModeDisable,
		ConnectTimeout: time.Second,
		LookupFunc: func(ctx context.Context, host string) ([]string, error) {
			lookups++
			if lookups > 1 {
				<-ctx.Done()
				return nil, ctx.Err()
			}
			return []string{"10.0.0.1"}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	n.Cache().SetSSL(Key{Host: "db.example", Port: 5432}, AnswerNo)
	n.Cache().GotIn(Key{Host: "db.example", Port: 5432})
	start := time.Now()
	err = n.Connect(context.Background(), func(ctx context.Context) error {
		time.Sleep(700 * time.Millisecond)
		return &pgconn.PgError{Severity: "FATAL", Code: "28000"}
	})
	took := time.Since(start)
	if err == nil || lookups != 2 {
		t.Fatalf("connect: %v after %d lookups, want a failed retry", err, lookups)
	}
	if took > 1300*time.Millisecond {
		t.Errorf("the connect took %v, want about the 1 s of connect_timeout", took)
	}
}

// Connects waiting for another's probe of a host whose first address stalls are not failed by
// the wait: the probe ends with the first address, and the waiters, whose first address shares
// the same connect_timeout, go on with the next one, connecting about when the prober does.
func TestProbeWaitersFollowThroughAStalledAddress(t *testing.T) {
	n, err := NewNegotiator(Config{
		Hosts:          []Host{{Host: "db.example", Port: 5432, SSLMode: SSLModePrefer}},
		GSSEncMode:     GSSEncModeDisable,
		ConnectTimeout: time.Second,
		LookupFunc: func(ctx context.Context, host string) ([]string, error) {
			return []string{"10.0.0.1", "10.0.0.2"}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	base, err := pgconn.ParseConfig("host=db.example user=u")
	if err != nil {
		t.Fatal(err)
	}
	open := func(ctx context.Context) error {
		cfg := base.Copy()
		if err := n.Configure(ctx, cfg); err != nil {
			return err
		}
		addrs, _ := cfg.LookupFunc(ctx, cfg.Host)
		if addrs[0] == "10.0.0.1" {
			<-ctx.Done() // the first address never answers
			return ctx.Err()
		}
		return nil
	}
	start := time.Now()
	errs := make(chan error, 4)
	for range 4 {
		go func() { errs <- n.Connect(context.Background(), open) }()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Errorf("connect: %v", err)
		}
	}
	if took := time.Since(start); took > 1500*time.Millisecond {
		t.Errorf("the connects took %v, want about the 1 s of the first address", took)
	}
}
