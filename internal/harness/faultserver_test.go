package harness

import (
	"crypto/tls"
	"crypto/x509"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/stdlib"
)

func faultAddr(s interface{ Addr() (string, int) }) string {
	host, port := s.Addr()
	return net.JoinHostPort(host, strconv.Itoa(port))
}

func faultDSN(s interface{ Addr() (string, int) }, extra ...string) string {
	host, port := s.Addr()
	return strings.Join(append([]string{"host=" + host, "port=" + strconv.Itoa(port), "user=app dbname=app connect_timeout=10"}, extra...), " ")
}

// Without a fault, pgx works in every query mode, and the counters say what it sent.
func TestFaultServerPgx(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	for _, tc := range []struct {
		sslmode string
		tls     bool
		want    [][]Packet
	}{
		// pgx's prefer: SSLRequest, 'N', a new socket for the StartupMessage.
		{"prefer", false, [][]Packet{{PacketSSLRequest}, {PacketStartupMessage}}},
		{"disable", false, [][]Packet{{PacketStartupMessage}}},
		{"require", true, [][]Packet{{PacketSSLRequest, PacketStartupMessage}}},
	} {
		t.Run(tc.sslmode, func(t *testing.T) {
			s := FaultServerT(t, FaultServerOptions{TLS: tc.tls})
			conn, err := pgx.Connect(ctx, faultDSN(s, "sslmode="+tc.sslmode))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			if v := conn.PgConn().ParameterStatus("server_version"); v != "15.0" {
				t.Errorf("server_version %q", v)
			}
			modes := []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol}
			for _, mode := range modes {
				var n int32
				if err := conn.QueryRow(ctx, "select 1", mode).Scan(&n); err != nil || n != 1 {
					t.Fatalf("%v: %d, %v", mode, n, err)
				}
			}
			st := s.Stats()
			if !reflect.DeepEqual(st.FirstPackets, tc.want) || st.Connections != len(tc.want) || st.Queries != len(modes) || st.Faults != 0 {
				t.Errorf("stats %+v, want first packets %v and %d queries", st, tc.want, len(modes))
			}
		})
	}
}

// With TLS, the certificate verifies against CAPEM for 127.0.0.1 and localhost.
func TestFaultServerTLSVerifies(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	s := FaultServerT(t, FaultServerOptions{TLS: true})
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(s.CAPEM()) {
		t.Fatal("CAPEM holds no certificate")
	}
	for _, host := range []string{"127.0.0.1", "localhost"} {
		cfg, err := pgx.ParseConfig(faultDSN(s, "sslmode=verify-full"))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Host = host
		cfg.TLSConfig = &tls.Config{RootCAs: pool, ServerName: host}
		cfg.Fallbacks = nil
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Fatalf("%s: %v", host, err)
		}
		if !conn.PgConn().Conn().(*tls.Conn).ConnectionState().HandshakeComplete {
			t.Errorf("%s: no TLS", host)
		}
		_ = conn.Close(ctx)
	}
	if FaultServerT(t, FaultServerOptions{}).CAPEM() != nil {
		t.Error("CAPEM without TLS")
	}
}

// database/sql over pgx, a new connection per query, from several goroutines.
func TestFaultServerDatabaseSQL(t *testing.T) {
	t.Parallel()
	s := FaultServerT(t, FaultServerOptions{})
	cfg, err := pgx.ParseConfig(faultDSN(s, "sslmode=disable"))
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(stdlib.GetConnector(*cfg))
	defer db.Close()
	db.SetMaxIdleConns(0)
	const workers, each = 6, 5
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				var n int
				if err := db.QueryRow("select 1").Scan(&n); err != nil || n != 1 {
					errs <- fmt.Errorf("select 1 = %d, %v", n, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Connections != workers*each || st.StartupMessages != workers*each || st.Queries != workers*each {
		t.Errorf("stats %+v, want %d connections, startups and queries", st, workers*each)
	}
}

// A libpq-style negotiation: SSLRequest or GSSENCRequest, 'N', StartupMessage on the same
// socket; a CancelRequest; a direct TLS ClientHello.
func TestFaultServerFirstPackets(t *testing.T) {
	t.Parallel()
	s := FaultServerT(t, FaultServerOptions{})
	for _, req := range [][]byte{sslRequest(), gssencRequest()} {
		w := dialWire(t, faultAddr(s))
		w.write(req)
		if a := w.readN(1); a[0] != 'N' {
			t.Fatalf("answer %q", a)
		}
		w.login()
		_ = w.raw.Close()
	}
	w := dialWire(t, faultAddr(s))
	w.write(encodeFrontend(&pgproto3.CancelRequest{ProcessID: 1, SecretKey: []byte{0, 0, 0, 1}}))
	if b, err := w.rest(); len(b) > 0 || err != io.EOF {
		t.Errorf("after a CancelRequest: %q, %v", b, err)
	}
	w = dialWire(t, faultAddr(s))
	w.write(clientHello(t))
	if b, err := w.rest(); len(b) > 0 || err != io.EOF {
		t.Errorf("after a ClientHello: %q, %v", b, err)
	}
	want := FaultStats{
		Connections: 4, SSLRequests: 1, GSSENCRequests: 1, StartupMessages: 2, CancelRequests: 1,
		FirstPackets: [][]Packet{
			{PacketSSLRequest, PacketStartupMessage},
			{PacketGSSENCRequest, PacketStartupMessage},
			{PacketCancelRequest},
			{PacketOther},
		},
	}
	if st := s.Stats(); !reflect.DeepEqual(st, want) {
		t.Errorf("stats %+v, want %+v", st, want)
	}
}

// reachStep opens a connection to addr (a FaultServer or a FaultProxy) and goes up to step:
// it sends what the step answers and returns the time it was sent. useTLS runs the startup
// inside TLS. With more, it then sends a Query more.
func reachStep(t *testing.T, addr string, step FaultStep, useTLS, more bool) (*wire, time.Time) {
	t.Helper()
	w := dialWire(t, addr)
	if useTLS {
		w.write(sslRequest())
		if a := w.readN(1); a[0] != 'S' {
			t.Fatalf("SSLRequest answer %q", a)
		}
		w.startTLS()
	}
	var sent time.Time
	switch step {
	case StepSSLAnswer:
		sent = time.Now()
		w.write(sslRequest())
	case StepGSSENCAnswer:
		sent = time.Now()
		w.write(gssencRequest())
	case StepTLSHandshake:
		w.write(sslRequest())
		if a := w.readN(1); a[0] != 'S' {
			t.Fatalf("SSLRequest answer %q", a)
		}
		sent = time.Now()
		w.write(clientHello(t))
	case StepAPRep:
		w.write(gssencRequest())
		if a := w.readN(1); a[0] != 'G' {
			t.Fatalf("GSSENCRequest answer %q", a)
		}
		sent = time.Now()
		w.write(gssPacket([]byte("\x60\x0aan AP-REQ")))
	case StepStartup:
		sent = time.Now()
		w.write(startupMessage())
	case StepAfterReady:
		w.login()
		sent = time.Now()
		w.write(queryMessage("select 1"))
	}
	if more {
		// More than the step needs, in a write of its own: what a terminal fault leaves
		// unread must not turn its FIN into an RST. (Not for a reset: the kernel reports
		// ECONNRESET once, to the first call, and a write that took it leaves reads an EOF.)
		_, _ = w.conn.Write(queryMessage("select 2"))
	}
	return w, sent
}

// readServerAnswer reads the correct answer of step from a FaultServer without TLS or GSS
// options (useTLS: started with TLS) and checks it.
func readServerAnswer(t *testing.T, w *wire, step FaultStep, tlsOn bool) []byte {
	t.Helper()
	switch step {
	case StepSSLAnswer:
		want := byte('N')
		if tlsOn {
			want = 'S'
		}
		if a := w.readN(1); a[0] != want {
			t.Fatalf("answer %q, want %q", a, want)
		}
		return []byte{want}
	case StepGSSENCAnswer:
		if a := w.readN(1); a[0] != 'N' {
			t.Fatalf("answer %q, want 'N'", a)
		}
		return []byte{'N'}
	case StepStartup:
		msgs, types := w.readUntilReady()
		if types != "RSSSSSKZ" {
			t.Fatalf("startup answer %q", types)
		}
		return msgs
	case StepAfterReady:
		msgs, types := w.readUntilReady()
		if types != "TDCZ" {
			t.Fatalf("query answer %q", types)
		}
		return msgs
	}
	t.Fatalf("no correct answer at %v", step)
	return nil
}

// Every supported (step, fault) of the FaultServer does on the wire what FaultKind says.
func TestFaultServerSteps(t *testing.T) {
	t.Parallel()
	for _, sk := range supported(docServerMatrix) {
		step, kind := FaultStep(sk[0]), FaultKind(sk[1])
		tlsVariants := []bool{false}
		if step == StepStartup || step == StepAfterReady {
			tlsVariants = append(tlsVariants, true)
		}
		for _, inTLS := range tlsVariants {
			name := fmt.Sprintf("%v/%v", step, kind)
			if inTLS {
				name += "/in TLS"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				f := testFault(kind, step)
				if step == StepTLSHandshake && kind == FaultTrickle {
					f.Delay = 200 * time.Microsecond // about 2000 bytes
				}
				s, err := StartFaultServer(FaultServerOptions{Fault: f, TLS: inTLS || step == StepTLSHandshake, GSS: step == StepAPRep})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = s.Close() })
				if step == StepTLSHandshake && kind == FaultTrickle {
					checkServerTLSTrickle(t, s, f)
					return
				}
				w, sent := reachStep(t, faultAddr(s), step, inTLS, f.terminal() && kind != FaultReset)
				reads0 := len(w.log.reads)
				switch kind {
				case FaultExtraBytes:
					readServerAnswer(t, w, step, inTLS)
					checkExtra(t, w, f)
					// The connection goes on.
					switch step {
					case StepSSLAnswer, StepGSSENCAnswer:
						w.login()
					case StepStartup:
						w.write(queryMessage("select 1"))
						if _, types := w.readUntilReady(); types != "TDCZ" {
							t.Errorf("then a query: %q", types)
						}
					case StepAfterReady:
						w.write(queryMessage("select 2"))
						if _, types := w.readUntilReady(); types != "TDCZ" {
							t.Errorf("then a second query: %q", types)
						}
					}
				case FaultTrickle:
					answer := readServerAnswer(t, w, step, inTLS)
					checkTrickle(t, w, f, sent, reads0, answer)
				default:
					checkTerminal(t, w, f, s.Close)
				}
				if st := s.Stats(); st.Faults != 1 {
					t.Errorf("stats %+v, want Faults 1", st)
				}
			})
		}
	}
}

// checkServerTLSTrickle: the server's handshake bytes come one at a time, and the session
// works.
func checkServerTLSTrickle(t *testing.T, s *FaultServer, f Fault) {
	w := dialWire(t, faultAddr(s))
	w.write(sslRequest())
	if a := w.readN(1); a[0] != 'S' {
		t.Fatalf("answer %q", a)
	}
	counted := &countingConn{Conn: w.raw}
	tc := tls.Client(counted, &tls.Config{InsecureSkipVerify: true})
	sent := time.Now()
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(sent)
	n := counted.read.Load()
	if min := time.Duration(n) * f.delay(); elapsed < min {
		t.Errorf("handshake: %d bytes from the server in %v, want at least %v", n, elapsed, min)
	}
	if reads := counted.reads.Load(); reads < 2 {
		t.Errorf("handshake: %d bytes in %d reads", n, reads)
	}
	t.Logf("server's TLS flight: %d bytes in %d reads, %v", n, counted.reads.Load(), elapsed)
	w.use(tc)
	w.login()
}

type countingConn struct {
	net.Conn
	read, reads atomic.Int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.read.Add(int64(n))
		c.reads.Add(1)
	}
	return n, err
}

// Without a fault, a server with GSS answers 'G' and closes after the client's first context
// token.
func TestFaultServerGSSCloses(t *testing.T) {
	t.Parallel()
	s := FaultServerT(t, FaultServerOptions{GSS: true})
	w, _ := reachStep(t, faultAddr(s), StepAPRep, false, true)
	checkTerminal(t, w, Fault{Kind: FaultClose}, s.Close)
	if st := s.Stats(); st.Faults != 0 || !reflect.DeepEqual(st.FirstPackets, [][]Packet{{PacketGSSENCRequest}}) {
		t.Errorf("stats %+v", st)
	}
}

// Count: the first connections get the fault, the next ones do not.
func TestFaultServerCount(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	s := FaultServerT(t, FaultServerOptions{Fault: Fault{Kind: FaultErrorResponse, Step: StepStartup, SQLState: "57P03", Count: 2}})
	for i := range 4 {
		conn, err := pgx.Connect(ctx, faultDSN(s, "sslmode=disable"))
		var pgErr *pgconn.PgError
		if i < 2 {
			if !errors.As(err, &pgErr) || pgErr.Code != "57P03" || pgErr.Message != FaultMessage {
				t.Errorf("connection %d: %v, want the fault's 57P03", i+1, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("connection %d: %v", i+1, err)
		}
		_ = conn.Close(ctx)
	}
	if st := s.Stats(); st.Faults != 2 || st.Connections != 4 || st.StartupMessages != 4 {
		t.Errorf("stats %+v, want 2 faults in 4 connections", st)
	}
}

// psql (libpq) against the FaultServer: the well-behaved server serves it, and each fault ends
// in what libpq 15 makes of it.
func TestFaultServerPsql(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	for _, tc := range []struct {
		name    string
		opts    FaultServerOptions
		conn    string
		wantErr string // "" for success, printing 1
		packets [][]Packet
	}{
		{"no fault", FaultServerOptions{}, "sslmode=prefer", "",
			[][]Packet{{PacketSSLRequest, PacketStartupMessage}}},
		{"TLS", FaultServerOptions{TLS: true}, "sslmode=require", "",
			[][]Packet{{PacketSSLRequest, PacketStartupMessage}}},
		{"error response 53300 at startup", FaultServerOptions{Fault: Fault{Kind: FaultErrorResponse, Step: StepStartup, SQLState: "53300"}}, "sslmode=disable",
			"FATAL:  " + FaultMessage, [][]Packet{{PacketStartupMessage}}},
		// libpq (15.10 and later) does not show what a server says during the SSL exchange:
		// a man in the middle could have written it.
		{"error response at SSLRequest answer", FaultServerOptions{Fault: Fault{Kind: FaultErrorResponse, Step: StepSSLAnswer, SQLState: "57P03"}}, "sslmode=prefer",
			"server sent an error response during SSL exchange", [][]Packet{{PacketSSLRequest}}},
		{"garbage at SSLRequest answer", FaultServerOptions{Fault: Fault{Kind: FaultGarbage, Step: StepSSLAnswer}}, "sslmode=prefer",
			"received invalid response to SSL negotiation: X", [][]Packet{{PacketSSLRequest}}},
		{"reset at SSLRequest answer", FaultServerOptions{Fault: Fault{Kind: FaultReset, Step: StepSSLAnswer}}, "sslmode=prefer",
			"server closed the connection unexpectedly", [][]Packet{{PacketSSLRequest}}},
		// The bytes after 'S' would be read as TLS: libpq refuses them (CVE-2021-23222).
		{"extra bytes after S", FaultServerOptions{TLS: true, Fault: Fault{Kind: FaultExtraBytes, Step: StepSSLAnswer}}, "sslmode=require",
			"received unencrypted data after SSL response", [][]Packet{{PacketSSLRequest}}},
		// After 'N' nothing is checked: libpq takes the forged bytes for the answer to its
		// StartupMessage (and then sees the real one "arrive while idle").
		{"extra bytes after N", FaultServerOptions{Fault: Fault{Kind: FaultExtraBytes, Step: StepSSLAnswer}}, "sslmode=prefer", "",
			[][]Packet{{PacketSSLRequest, PacketStartupMessage}}},
		{"garbage at startup", FaultServerOptions{Fault: Fault{Kind: FaultGarbage, Step: StepStartup}}, "sslmode=disable",
			"expected authentication request from server, but received X", [][]Packet{{PacketStartupMessage}}},
		{"error response instead of the TLS handshake", FaultServerOptions{TLS: true, Fault: Fault{Kind: FaultErrorResponse, Step: StepTLSHandshake, SQLState: "08P01"}}, "sslmode=require",
			"SSL error", [][]Packet{{PacketSSLRequest}}},
		{"stall at startup", FaultServerOptions{Fault: Fault{Kind: FaultStall, Step: StepStartup}}, "sslmode=disable connect_timeout=2",
			"timeout expired", [][]Packet{{PacketStartupMessage}}},
		{"trickled TLS handshake", FaultServerOptions{TLS: true, Fault: Fault{Kind: FaultTrickle, Step: StepTLSHandshake}}, "sslmode=require", "",
			[][]Packet{{PacketSSLRequest, PacketStartupMessage}}},
		{"error response after ReadyForQuery", FaultServerOptions{Fault: Fault{Kind: FaultErrorResponse, Step: StepAfterReady, SQLState: "57P01"}}, "sslmode=disable",
			"FATAL:  " + FaultMessage, [][]Packet{{PacketStartupMessage}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := FaultServerT(t, tc.opts)
			out, err := Psql(ctx, nil, faultDSN(s, tc.conn), "select 1")
			switch {
			case tc.wantErr == "" && (err != nil || out != "1"):
				t.Errorf("psql: %q, %v; want 1", out, err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("psql: %q, %v; want an error with %q", out, err, tc.wantErr)
			default:
				t.Logf("psql: %q, %v", out, err)
			}
			if st := s.Stats(); !reflect.DeepEqual(st.FirstPackets, tc.packets) {
				t.Errorf("first packets %v, want %v", st.FirstPackets, tc.packets)
			}
		})
	}
}

// psql with a Kerberos ticket against a FaultServer that answers 'G': libpq sends its AP-REQ,
// the server closes, and with gssencmode=prefer libpq starts over without GSS on a new
// connection; with require it fails.
func TestFaultServerGSSWithPsql(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	k, ccache := kdcWithAlice(t, KDCOptions{})
	if err := k.AddServicePrincipals("postgres", "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	s := FaultServerT(t, FaultServerOptions{GSS: true})
	host, port := s.Addr()
	out, err := Psql(ctx, k.Env(ccache), conninfo(host, port, "alice", "gssencmode=prefer", "sslmode=disable"), "select 1")
	if err != nil || out != "1" {
		t.Errorf("gssencmode=prefer: %q, %v; want 1 after a fallback", out, err)
	}
	want := [][]Packet{{PacketGSSENCRequest}, {PacketStartupMessage}}
	if st := s.Stats(); !reflect.DeepEqual(st.FirstPackets, want) {
		t.Errorf("first packets %v, want %v", st.FirstPackets, want)
	}
	if _, err := Psql(ctx, k.Env(ccache), conninfo(host, port, "alice", "gssencmode=require"), "select 1"); err == nil {
		t.Error("gssencmode=require connected")
	} else {
		t.Logf("gssencmode=require: %v", err)
	}
}
