package negotiation

import (
	"context"
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
	classErrorResponse, classRejected, classUnverified, classServer}

// What may be remembered, whatever the method, step and error: the answer to GSSENCRequest
// ('E'), Kerberos refusing (KDC or acceptor), the server closing the socket on the AP-REQ (what
// PostgreSQL does when it cannot accept the context), and pg_hba rejecting a GSS-encrypted
// startup. Never load, timeouts, resets, cancellation or a failed check of the server.
func TestJudgeRemembersOnlyWhatTheServerSaid(t *testing.T) {
	codes := []string{"", "28000", "28P01", "53300", "57P03", "3D000", "42704"}
	for _, m := range []Method{MethodGSS, MethodSSL, MethodPlain} {
		for _, st := range allSteps {
			for _, c := range allClasses {
				for _, code := range codes {
					if (c == classServer) != (code != "") {
						continue
					}
					v := judge(m, st, c, code)
					allowed := st == stepGSSENCRequest && c == classErrorResponse ||
						st == stepServiceTicket && c == classRejected ||
						st == stepGSSContext && (c == classRejected || c == classClosed) ||
						c == classServer && code == "28000" && m == MethodGSS
					if v.gssNo && !allowed {
						t.Errorf("%v at %v, class %d %s: remembered as 'GSS cannot succeed'", m, st, c, code)
					}
					if allowed && !v.gssNo {
						t.Errorf("%v at %v, class %d %s: not remembered", m, st, c, code)
					}
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
		name string
		m    Method
		st   step
		c    class
		code string
		want verdict
	}{
		{"'E' to SSLRequest fails", MethodSSL, stepSSLRequest, classErrorResponse, "", verdict{final: true}},
		{"SSLRequest closed: fails", MethodSSL, stepSSLRequest, classClosed, "", verdict{final: true}},
		{"SSLRequest reset: fails", MethodSSL, stepSSLRequest, classReset, "", verdict{final: true}},
		{"SSLRequest timeout: next address", MethodSSL, stepSSLRequest, classTimeout, "", verdict{}},
		{"'E' to GSSENCRequest: retry without GSS", MethodGSS, stepGSSENCRequest, classErrorResponse, "", verdict{next: true, gssNo: true}},
		{"GSSENCRequest closed: fails", MethodGSS, stepGSSENCRequest, classClosed, "", verdict{final: true}},
		{"TLS handshake failure under prefer: plaintext", MethodSSL, stepTLS, classOther, "", verdict{next: true}},
		{"TLS handshake reset: plaintext", MethodSSL, stepTLS, classReset, "", verdict{next: true}},
		{"GSS context failure: next method", MethodGSS, stepGSSContext, classOther, "", verdict{next: true}},
		{"tampering: next method, nothing remembered", MethodGSS, stepGSSContext, classUnverified, "", verdict{next: true}},
		{"KDC unreachable: next method, nothing remembered", MethodGSS, stepServiceTicket, classOther, "", verdict{next: true}},
		{"wrong password: no other host", MethodPlain, stepStartup, classServer, "28P01", verdict{final: true}},
		{"pg_hba under GSS", MethodGSS, stepStartup, classServer, "28000", verdict{next: true, gssNo: true, stale: true}},
		{"pg_hba under TLS", MethodSSL, stepStartup, classServer, "28000", verdict{next: true, stale: true}},
		{"too many clients under GSS: one socket", MethodGSS, stepStartup, classServer, "53300", verdict{}},
		{"starting up: next host", MethodPlain, stepStartup, classServer, "57P03", verdict{}},
		{"closed during startup under TLS: no fallback", MethodSSL, stepStartup, classClosed, "", verdict{}},
		{"wrap token fails during startup: no fallback", MethodGSS, stepStartup, classUnverified, "", verdict{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := judge(tt.m, tt.st, tt.c, tt.code); got != tt.want {
				t.Errorf("judge = %+v, want %+v", got, tt.want)
			}
		})
	}
}
