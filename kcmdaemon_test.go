package pgconnector_test

import (
	"context"
	"encoding/binary"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
	"github.com/pgconnector/pgconnector/negotiation"
)

// A KCM daemon that misbehaves (fault injection: the real Heimdal kcm answers at once) and a
// real server that would take a plaintext connection: the credentials check is bounded by
// connect_timeout and by the caller's deadline, the error names the step that spent the time,
// and under gssencmode=prefer an unfinished check never lets the connect go on without GSS
// encryption. psql (libpq 15, MIT krb5) beside: see TestKCMDaemonConnectBounded.

// KCM opcodes and codes (MIT src/include/kcm.h, krb5_err.et) the fake daemon answers.
const (
	fakeOpGetPrincipal    = 8
	fakeOpGetCredUUIDList = 9
	fakeOpGetCredByUUID   = 10
	fakeOpGetDefaultCache = 20
	fakeCodeFCCInternal   = -1765328188 // KRB5_FCC_INTERNAL: operation not supported (Heimdal)
)

// startFakeKCMDaemon starts a harness.FakeKCM (its Krb5Conf names its socket). answer returns
// the reply to a request and how long to wait before sending it; a negative wait never answers.
func startFakeKCMDaemon(t *testing.T, answer func(op uint16) ([]byte, time.Duration)) *harness.FakeKCM {
	t.Helper()
	return harness.FakeKCMT(t, func(op uint16, _ []byte) ([]byte, time.Duration) { return answer(op) })
}

// kcmAnswer is a KCM reply: u32 length, u32 outer code 0, u32 op status, result.
func kcmAnswer(status int32, result []byte) []byte { return harness.KCMReply(status, result) }

// v4Credential is a version 4 credential record (k5_marshal_cred) valid until end.
func v4Credential(client, server []byte, end time.Time) []byte {
	b := append(append([]byte{}, client...), server...)
	b = binary.BigEndian.AppendUint16(b, 18) // aes256-cts-hmac-sha1-96
	b = harness.KCMData(b, make([]byte, 32))
	for _, ts := range []int64{end.Add(-time.Hour).Unix(), end.Add(-time.Hour).Unix(), end.Unix(), end.Unix()} {
		b = binary.BigEndian.AppendUint32(b, uint32(ts))
	}
	b = append(b, 0)                                    // is_skey
	b = binary.BigEndian.AppendUint32(b, 0)             // flags
	b = binary.BigEndian.AppendUint32(b, 0)             // addresses
	b = binary.BigEndian.AppendUint32(b, 0)             // authdata
	b = harness.KCMData(b, []byte("not a real ticket")) // ticket
	return harness.KCMData(b, nil)                      // second ticket
}

// slowKCM answers like a daemon with one cache "7" holding a ticket-granting ticket and
// services-1 service tickets, reachable only by UUID (as Heimdal's kcm), each answer after
// wait.
func slowKCM(services int, wait time.Duration) func(op uint16) ([]byte, time.Duration) {
	client := harness.KCMPrincipal("FAKE.TEST", "carol")
	end := time.Now().Add(10 * time.Hour)
	tgt := kcmAnswer(0, v4Credential(client, harness.KCMPrincipal("FAKE.TEST", "krbtgt", "FAKE.TEST"), end))
	svc := kcmAnswer(0, v4Credential(client, harness.KCMPrincipal("FAKE.TEST", "postgres", "db"), end))
	uuids := make([]byte, 16*services)
	for i := range services {
		uuids[16*i] = byte(i + 1)
	}
	var mu sync.Mutex
	byUUID := 0
	return func(op uint16) ([]byte, time.Duration) {
		switch op {
		case fakeOpGetDefaultCache:
			return kcmAnswer(0, []byte("7\x00")), wait
		case fakeOpGetPrincipal:
			return kcmAnswer(0, client), wait
		case fakeOpGetCredUUIDList:
			return kcmAnswer(0, uuids), wait
		case fakeOpGetCredByUUID:
			mu.Lock()
			defer mu.Unlock()
			byUUID++
			if byUUID%services == 1 {
				return tgt, wait
			}
			return svc, wait
		}
		return kcmAnswer(fakeCodeFCCInternal, nil), wait
	}
}

// checkCredentialsStep checks that a connect that took took failed at the credentials check,
// within deadline (from its start) and 1 s.
func checkCredentialsStep(t *testing.T, what string, err error, took, deadline time.Duration, want string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: connected, want a failure of the credentials check (no connection without GSS)", what)
		return
	}
	if took > deadline+time.Second {
		t.Errorf("%s: returned after %v, want at most %v + 1s", what, took.Round(time.Millisecond), deadline)
	}
	var he *negotiation.HostError
	if !errors.As(err, &he) || he.Step != "GSS credentials" {
		t.Errorf("%s: %v, want a host error at the step \"GSS credentials\"", what, err)
	}
	for _, w := range []string{"GSS credentials", want, "credential cache KCM:"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: %q does not say %q", what, err, w)
		}
	}
}

// connectTimed connects with c and closes the connection if one is made: how long the connect
// took, and its error.
func connectTimed(ctx context.Context, c *pgconnector.Connector) (time.Duration, error) {
	start := time.Now()
	conn, err := c.Connect(ctx)
	took := time.Since(start)
	if conn != nil {
		conn.Close()
	}
	return took, err
}

// psqlRun runs psql with conninfo against the fake daemon, for 4 s at most: its error (nil:
// connected) and how long it took.
func psqlRun(t *testing.T, d *harness.FakeKCM, conninfo string) (time.Duration, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	start := time.Now()
	_, err := harness.Psql(ctx, []string{"KRB5_CONFIG=" + d.Krb5Conf, "KRB5CCNAME=KCM:"}, conninfo, "select 1")
	return time.Since(start), err
}

// The credentials check with a daemon that never answers, or answers each request late, while
// the server would take a plaintext connection (gssencmode=prefer, sslmode=disable): with
// connect_timeout=1, and with a 1 s context deadline, the connect fails at the credentials
// check within the deadline and 1 s, and no plaintext connection is made.
//
// libpq 15 (psql beside) checks the credentials after the TCP connect, in gss_acquire_cred,
// which blocks (MIT's cc_kcm.c has no timeout) and is not interrupted by connect_timeout; libpq
// looks at connect_timeout again only when the check returns (fe-connect.c,
// pqConnectDBComplete). With a daemon that never answers it is still blocked when killed: no
// connection either. With one that answers each request after 1.2 s it fails with "timeout
// expired" once MIT's two requests (GET_DEFAULT_CACHE, GET_PRINCIPAL) are answered, past
// connect_timeout: the same outcome, the connector only says it on time. With 400 ms per answer
// (not compared) MIT's two requests fit in connect_timeout, and libpq goes on, while the
// connector's read of the 20 credentials (24 requests after the stamp's 2) does not fit: the
// sequence shares the host's budget, it does not get a timeout per request.
func TestKCMDaemonConnectBounded(t *testing.T) {
	srv, _ := servers(t)
	tests := []struct {
		name   string
		answer func(op uint16) ([]byte, time.Duration)
		psql   func(t *testing.T, took time.Duration, err error) // nil: not compared
	}{
		{"never answers", func(uint16) ([]byte, time.Duration) { return nil, -1 },
			func(t *testing.T, took time.Duration, err error) {
				if err == nil || !strings.Contains(err.Error(), "signal: killed") {
					t.Errorf("psql: %v, want it still blocked in the credentials check when killed", err)
				}
			}},
		{"1.2s per answer, 20 credentials", slowKCM(20, 1200*time.Millisecond),
			func(t *testing.T, took time.Duration, err error) {
				if err == nil || !strings.Contains(err.Error(), "timeout expired") || strings.Contains(err.Error(), "signal: killed") {
					t.Errorf("psql: %v, want \"timeout expired\" once the check returned", err)
				}
				if took < 2400*time.Millisecond {
					t.Errorf("psql failed after %v, before the daemon's two answers: libpq bounds the check", took)
				}
			}},
		{"400ms per answer, 20 credentials", slowKCM(20, 400*time.Millisecond), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := startFakeKCMDaemon(t, tt.answer)
			kerberos := pgconnector.WithKerberos(pgconnector.Kerberos{Krb5Conf: d.Krb5Conf, CCache: "KCM:"})
			dsn := srv.DSN("host=127.0.0.1", "sslmode=disable", "gssencmode=prefer", "connect_timeout=1")
			for _, b := range []struct {
				name, what, dsn string
				ctx             time.Duration
				want            string
			}{
				{"connect_timeout=1", "connect_timeout=1", dsn, 8 * time.Second /* a safety net */, "timeout expired (connect_timeout 1s)"},
				{"context deadline", "1s context", strings.ReplaceAll(dsn, "connect_timeout=1", "connect_timeout=0"), time.Second, "context deadline exceeded"},
			} {
				t.Run(b.name, func(t *testing.T) {
					c := newConnector(t, b.dsn, kerberos)
					defer c.Close()
					ctx, cancel := context.WithTimeout(context.Background(), b.ctx)
					defer cancel()
					took, err := connectTimed(ctx, c)
					checkCredentialsStep(t, b.what, err, took, time.Second, b.want)
				})
			}
			if tt.psql != nil {
				t.Run("psql", func(t *testing.T) {
					took, err := psqlRun(t, d, dsn)
					tt.psql(t, took, err)
				})
			}
		})
	}
}

// A connect whose read of the credential cache hangs does not hold up a second one that comes
// meanwhile on the same connector: each returns at its own connect_timeout.
func TestKCMDaemonConcurrentConnects(t *testing.T) {
	srv, _ := servers(t)
	stamp := slowKCM(2, 0)
	d := startFakeKCMDaemon(t, func(op uint16) ([]byte, time.Duration) {
		if op == fakeOpGetPrincipal { // the read of the cache, after the stamp
			return nil, -1
		}
		return stamp(op)
	})
	kerberos := pgconnector.WithKerberos(pgconnector.Kerberos{Krb5Conf: d.Krb5Conf, CCache: "KCM:"})
	c := newConnector(t, srv.DSN("host=127.0.0.1", "sslmode=disable", "connect_timeout=1"), kerberos)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second) // a safety net
	defer cancel()
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * 300 * time.Millisecond) // the second comes while the first reads
			took, err := connectTimed(ctx, c)
			checkCredentialsStep(t, "connect "+strconv.Itoa(i+1), err, took, time.Second, "timeout expired (connect_timeout 1s)")
		})
	}
	wg.Wait()
}
