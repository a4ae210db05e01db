package harness

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// startupTypes is what a real server answers a trusted StartupMessage with.
var startupTypes = regexp.MustCompile(`^RS+KZ$`)

// The FaultProxy in front of a real cluster without TLS: every supported fault at the answer
// steps, the startup and after ReadyForQuery does on the wire what FaultKind says.
func TestFaultProxyPlainCluster(t *testing.T) {
	t.Parallel()
	p := StartT(t, Options{})
	// The server's own answer to a GSSENCRequest: 'G' when it is built with GSSAPI, as
	// Debian's, even without Kerberos configured.
	w := dialWire(t, p.Addr())
	w.write(gssencRequest())
	gssAnswer := w.readN(1)[0]
	_ = w.raw.Close()
	t.Logf("the server answers %q to a GSSENCRequest", gssAnswer)

	for _, sk := range supported(docProxyMatrix) {
		step, kind := FaultStep(sk[0]), FaultKind(sk[1])
		switch step {
		case StepTLSHandshake, StepAPRep, StepWrapToken:
			continue // TestFaultProxyTLSCluster, TestFaultProxyGSSFraming
		}
		t.Run(fmt.Sprintf("%v/%v", step, kind), func(t *testing.T) {
			t.Parallel()
			f := testFault(kind, step)
			px := FaultProxyT(t, p.Addr(), f)
			w, sent := reachStep(t, faultAddr(px), step, false, f.terminal() && kind != FaultReset)
			reads0 := len(w.log.reads)
			read := func() []byte {
				t.Helper()
				switch step {
				case StepSSLAnswer:
					if a := w.readN(1); a[0] != 'N' {
						t.Fatalf("answer %q, want 'N'", a)
					}
					return []byte{'N'}
				case StepGSSENCAnswer:
					if a := w.readN(1); a[0] != gssAnswer {
						t.Fatalf("answer %q, want %q", a, gssAnswer)
					}
					return []byte{gssAnswer}
				case StepStartup:
					msgs, types := w.readUntilReady()
					if !startupTypes.MatchString(types) {
						t.Fatalf("startup answer %q", types)
					}
					return msgs
				default:
					msgs, types := w.readUntilReady()
					if types != "TDCZ" {
						t.Fatalf("query answer %q", types)
					}
					return msgs
				}
			}
			switch kind {
			case FaultExtraBytes:
				read()
				checkExtra(t, w, f)
				switch step {
				case StepSSLAnswer:
					w.login()
				case StepStartup, StepAfterReady:
					w.write(queryMessage("select 2"))
					if _, types := w.readUntilReady(); types != "TDCZ" {
						t.Errorf("then a query: %q", types)
					}
				}
			case FaultTrickle:
				checkTrickle(t, w, f, sent, reads0, read())
			default:
				if kind == FaultStall {
					// The proxy stalls what the server sends at the step: wait until the server
					// has sent it (a loaded machine forks a backend slowly), or the check that
					// nothing arrives proves nothing.
					waitFaultApplied(t, px.Stats)
				}
				checkTerminal(t, w, f, px.Close)
			}
			if st := px.Stats(); st.Faults != 1 || st.Connections != 1 {
				t.Errorf("stats %+v, want 1 connection and 1 fault", st)
			}
		})
	}
}

// What the proxy counts, as Proxy does, and Count.
func TestFaultProxyCountsAndCount(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	p := StartT(t, Options{})
	px := FaultProxyT(t, p.Addr(), Fault{Kind: FaultErrorResponse, Step: StepStartup, SQLState: "57P03", Count: 1})
	host, port := px.Addr()
	dsn := p.DSN(fmt.Sprintf("host=%s port=%d sslmode=disable", host, port))

	_, err := pgx.Connect(ctx, dsn)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "57P03" || pgErr.Message != FaultMessage {
		t.Fatalf("first connection: %v, want the fault's 57P03", err)
	}
	conn := connect(t, ctx, dsn)
	if describe(t, ctx, conn).User != AppUser {
		t.Error("second connection: wrong user")
	}
	// libpq's way: SSLRequest, 'N', StartupMessage on the same socket.
	out, err := Psql(ctx, nil, p.DSN(fmt.Sprintf("host=%s port=%d sslmode=prefer", host, port)), "select 1")
	if err != nil || out != "1" {
		t.Fatalf("psql: %q, %v", out, err)
	}
	// A CancelRequest.
	if err := conn.PgConn().CancelRequest(ctx); err != nil {
		t.Fatal(err)
	}
	want := FaultStats{
		Connections: 4, SSLRequests: 1, StartupMessages: 3, CancelRequests: 1, Faults: 1,
		FirstPackets: [][]Packet{
			{PacketStartupMessage},
			{PacketStartupMessage},
			{PacketSSLRequest, PacketStartupMessage},
			{PacketCancelRequest},
		},
	}
	if st := px.Stats(); !reflect.DeepEqual(st, want) {
		t.Errorf("stats %+v, want %+v", st, want)
	}
}

// The FaultProxy in front of a real cluster with TLS: the faults of the TLS handshake, and
// psql through some of them.
func TestFaultProxyTLSCluster(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	p := StartT(t, Options{TLS: true})
	for _, kind := range []FaultKind{FaultClose, FaultReset, FaultStall, FaultGarbage, FaultErrorResponse, FaultTrickle} {
		t.Run(kind.String(), func(t *testing.T) {
			t.Parallel()
			f := testFault(kind, StepTLSHandshake)
			if kind == FaultTrickle {
				f.Delay = 200 * time.Microsecond
			}
			px := FaultProxyT(t, p.Addr(), f)
			if kind == FaultTrickle {
				w := dialWire(t, faultAddr(px))
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
				elapsed, n := time.Since(sent), counted.read.Load()
				if min := time.Duration(n) * f.delay(); elapsed < min || counted.reads.Load() < 2 {
					t.Errorf("handshake: %d bytes in %d reads and %v, want at least %v", n, counted.reads.Load(), elapsed, min)
				}
				t.Logf("the server's TLS flight: %d bytes in %d reads, %v", n, counted.reads.Load(), elapsed)
				w.use(tc)
				w.login()
				w.write(queryMessage("select 1"))
				if _, types := w.readUntilReady(); types != "TDCZ" {
					t.Errorf("query answer %q", types)
				}
			} else {
				w, _ := reachStep(t, faultAddr(px), StepTLSHandshake, false, kind != FaultReset)
				checkTerminal(t, w, f, px.Close)
			}
			if st := px.Stats(); st.Faults != 1 || !reflect.DeepEqual(st.FirstPackets, [][]Packet{{PacketSSLRequest}}) {
				t.Errorf("stats %+v, want 1 fault and first packets [[SSLRequest]]", st)
			}
		})
	}

	for _, tc := range []struct {
		name    string
		f       Fault
		wantErr string
	}{
		{"no fault", Fault{}, ""},
		{"trickled handshake", Fault{Kind: FaultTrickle, Step: StepTLSHandshake}, ""},
		{"extra bytes after S", Fault{Kind: FaultExtraBytes, Step: StepSSLAnswer}, "received unencrypted data after SSL response"},
		// libpq reads the TLS connection itself: an RST in the handshake gets its usual message.
		{"reset instead of the ServerHello", Fault{Kind: FaultReset, Step: StepTLSHandshake}, "server closed the connection unexpectedly"},
	} {
		t.Run("psql/"+tc.name, func(t *testing.T) {
			t.Parallel()
			px := FaultProxyT(t, p.Addr(), tc.f)
			host, port := px.Addr()
			out, err := Psql(ctx, nil, p.DSN(fmt.Sprintf("host=%s port=%d sslmode=require", host, port)),
				"select ssl from pg_stat_ssl where pid = pg_backend_pid()")
			switch {
			case tc.wantErr == "" && (err != nil || out != "t"):
				t.Errorf("psql: %q, %v; want t", out, err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("psql: %q, %v; want an error with %q", out, err, tc.wantErr)
			default:
				t.Logf("psql: %q, %v", out, err)
			}
		})
	}
}

// The GSS packets a scripted upstream sends: the tests below check the proxy's framing byte
// by byte, which a real GSS server cannot be made to show.
var (
	upstreamAPRep = []byte("\x60\x1a\x06\x09\x2a\x86\x48\x86\xf7\x12\x01\x02\x02\x02\x00an AP-REP")
	upstreamWrap1 = []byte("\x05\x04\x06\xff\x00\x00\x00\x1c\x00\x00\x00\x00\x00\x00\x00\x01the first wrap token")
	upstreamWrap2 = []byte("\x05\x04\x06\xff\x00\x00\x00\x1c\x00\x00\x00\x00\x00\x00\x00\x02the second")
	clientWrap    = []byte("\x05\x04\x07\xff\x00\x00\x00\x1c\x00\x00\x00\x00\x00\x00\x00\x01a StartupMessage")
)

// gssUpstream is a fake GSS server: 'G' to a GSSENCRequest, upstreamAPRep after the client's
// first packet, and after the client's next packet upstreamWrap1 and upstreamWrap2 in one
// write; then it reads until the client closes.
func gssUpstream(t *testing.T) string {
	t.Helper()
	srv, err := listenLoopback("GSS upstream")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	srv.start(func(c net.Conn) {
		_ = c.SetDeadline(time.Now().Add(time.Minute))
		if _, _, err := readFirstPacket(c); err != nil {
			return
		}
		readPacket := func() bool {
			hdr := make([]byte, 4)
			if _, err := io.ReadFull(c, hdr); err != nil {
				return false
			}
			_, err := io.ReadFull(c, make([]byte, int(hdr[0])<<24|int(hdr[1])<<16|int(hdr[2])<<8|int(hdr[3])))
			return err == nil
		}
		if _, err := c.Write([]byte{'G'}); err != nil || !readPacket() {
			return
		}
		if _, err := c.Write(gssPacket(upstreamAPRep)); err != nil || !readPacket() {
			return
		}
		if _, err := c.Write(append(gssPacket(upstreamWrap1), gssPacket(upstreamWrap2)...)); err != nil {
			return
		}
		drain(c)
	})
	host, port := srv.Addr()
	return net.JoinHostPort(host, fmt.Sprint(port))
}

// The proxy finds the AP-REP and the first wrap token in the GSS framing and alters only them.
func TestFaultProxyGSSFraming(t *testing.T) {
	t.Parallel()
	upstream := gssUpstream(t)
	for _, step := range []FaultStep{StepAPRep, StepWrapToken} {
		for _, kind := range append([]FaultKind{FaultNone}, faultProxyMatrix[step]...) {
			t.Run(fmt.Sprintf("%v/%v", step, kind), func(t *testing.T) {
				t.Parallel()
				f := testFault(kind, step)
				if kind == FaultNone {
					f = Fault{}
				}
				px := FaultProxyT(t, upstream, f)
				w, sent := reachStep(t, faultAddr(px), StepAPRep, false, false)
				if step == StepWrapToken {
					if got := w.readN(4 + len(upstreamAPRep)); !bytes.Equal(got, gssPacket(upstreamAPRep)) {
						t.Fatalf("AP-REP %q", got)
					}
					sent = time.Now()
					w.write(gssPacket(clientWrap))
				}
				want := gssPacket(upstreamAPRep)
				if step == StepWrapToken {
					want = gssPacket(upstreamWrap1)
				}
				reads0 := len(w.log.reads)
				if f.terminal() {
					if kind != FaultReset {
						_, _ = w.conn.Write(gssPacket(clientWrap))
					}
					checkTerminal(t, w, f, px.Close)
					return
				}
				got := w.readN(len(want))
				switch kind {
				case FaultCorrupt:
					want[len(want)-1] ^= 0xff
				case FaultExtraBytes:
					checkExtra(t, w, f)
				case FaultTrickle:
					checkTrickle(t, w, f, sent, reads0, got)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("%v: got %q, want %q", step, got, want)
				}
				// The rest passes untouched.
				if step == StepAPRep {
					w.write(gssPacket(clientWrap))
					if got := w.readN(4 + len(upstreamWrap1)); !bytes.Equal(got, gssPacket(upstreamWrap1)) {
						t.Errorf("first wrap token %q", got)
					}
				}
				if got := w.readN(4 + len(upstreamWrap2)); !bytes.Equal(got, gssPacket(upstreamWrap2)) {
					t.Errorf("second wrap token %q", got)
				}
				wantFaults := 1
				if kind == FaultNone {
					wantFaults = 0
				}
				if st := px.Stats(); st.Faults != wantFaults || !reflect.DeepEqual(st.FirstPackets, [][]Packet{{PacketGSSENCRequest}}) {
					t.Errorf("stats %+v", st)
				}
			})
		}
	}
}

// The proxy in front of a real cluster with GSS encryption, and psql with a Kerberos ticket: a
// corrupted AP-REP fails libpq's check of the server (mutual authentication), a corrupted first
// wrap token its integrity check; without a fault, or with a trickle, psql connects.
func TestFaultProxyGSSCluster(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	k, ccache := kdcWithAlice(t, KDCOptions{})
	p := gssServer(t, &GSSOptions{KDC: k, Keytab: true}, gssHBA(k), "hostnogssenc all all 127.0.0.1/32 trust")
	for _, tc := range []struct {
		name    string
		f       Fault
		mode    string
		want    string // psql's output, or after a "!" part of its error
		packets [][]Packet
	}{
		{"no fault", Fault{}, "require", "t|t|alice@" + k.Realm, [][]Packet{{PacketGSSENCRequest}}},
		{"trickled AP-REP", Fault{Kind: FaultTrickle, Step: StepAPRep}, "require", "t|t|alice@" + k.Realm, [][]Packet{{PacketGSSENCRequest}}},
		{"trickled first wrap token", Fault{Kind: FaultTrickle, Step: StepWrapToken}, "require", "t|t|alice@" + k.Realm, [][]Packet{{PacketGSSENCRequest}}},
		{"corrupted AP-REP", Fault{Kind: FaultCorrupt, Step: StepAPRep}, "require",
			"!could not initiate GSSAPI security context: Unspecified GSS failure.  Minor code may provide more information: Decrypt integrity check failed",
			[][]Packet{{PacketGSSENCRequest}}},
		{"corrupted first wrap token", Fault{Kind: FaultCorrupt, Step: StepWrapToken}, "require",
			"!GSSAPI unwrap error: A token had an invalid Message Integrity Check (MIC): Decrypt integrity check failed",
			[][]Packet{{PacketGSSENCRequest}}},
		// libpq 15 says nothing more than `connection to server at ... failed:` about an
		// end of the stream during the GSS context establishment; exit status 2 is "no
		// connection".
		{"closed instead of the AP-REP", Fault{Kind: FaultClose, Step: StepAPRep}, "require", "!exit status 2", [][]Packet{{PacketGSSENCRequest}}},
		// The first wrap token holds the whole startup answer, so psql is connected (exit
		// status 1, not 2); the extra bytes are then read as the length of the next packet.
		{"extra bytes after the first wrap token", Fault{Kind: FaultExtraBytes, Step: StepWrapToken}, "require",
			"!oversize GSSAPI packet sent by the server", [][]Packet{{PacketGSSENCRequest}}},
		// With prefer, libpq takes a failed check of the server as a reason to start over
		// without GSS encryption, on a new connection, in the clear.
		{"corrupted AP-REP, prefer", Fault{Kind: FaultCorrupt, Step: StepAPRep}, "prefer", "f|f|", [][]Packet{{PacketGSSENCRequest}, {PacketStartupMessage}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			px := FaultProxyT(t, p.Addr(), tc.f)
			_, port := px.Addr()
			out, err := Psql(ctx, k.Env(ccache), conninfo("localhost", port, "alice", "gssencmode="+tc.mode, "sslmode=disable"), gssQuery)
			if wantErr, ok := strings.CutPrefix(tc.want, "!"); ok {
				if err == nil || !strings.Contains(err.Error(), wantErr) {
					t.Errorf("psql: %q, %v; want an error with %q", out, err, wantErr)
				}
			} else if err != nil || out != tc.want {
				t.Errorf("psql: %q, %v; want %q", out, err, tc.want)
			}
			t.Logf("psql: %q, %v", out, err)
			st := px.Stats()
			if !reflect.DeepEqual(st.FirstPackets, tc.packets) {
				t.Errorf("first packets %v, want %v", st.FirstPackets, tc.packets)
			}
			if wantFaults := min(1, int(tc.f.Kind)); st.Faults != wantFaults {
				t.Errorf("%d faults, want %d", st.Faults, wantFaults)
			}
		})
	}
}

// waitFaultApplied waits, up to a minute, until stats counts one applied fault.
func waitFaultApplied(t *testing.T, stats func() FaultStats) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); stats().Faults == 0; {
		if time.Now().After(deadline) {
			t.Fatalf("the fault was not applied within a minute: %+v", stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
}
