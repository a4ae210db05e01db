package pgconnector

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgconnector/pgconnector/internal/harness"
	"github.com/pgconnector/pgconnector/internal/testpki"
	"github.com/pgconnector/pgconnector/internal/tlspolicy"
	"github.com/pgconnector/pgconnector/negotiation"
)

// tlsQuery says how a connection is protected: the TLS version, or "plain".
const tlsQuery = "select coalesce((select version from pg_stat_ssl where pid = pg_backend_pid() and ssl), 'plain')"

// connectOutcome opens one connection with c and returns the TLS version or "plain", or
// "error" and the error's text.
func connectOutcome(ctx context.Context, c *Connector) (outcome, msg string) {
	dc, err := c.Connect(ctx)
	if err != nil {
		return "error", err.Error()
	}
	defer dc.Close()
	var v string
	if err := pgxConnOf(dc).QueryRow(ctx, tlsQuery).Scan(&v); err != nil {
		return "error", "query: " + err.Error()
	}
	return v, ""
}

// psqlTLSOutcome runs psql with conninfo and env and returns what connectOutcome returns.
func psqlTLSOutcome(ctx context.Context, env []string, conninfo string) (outcome, msg string) {
	out, err := harness.Psql(ctx, env, conninfo, tlsQuery)
	if err != nil {
		return "error", err.Error()
	}
	return out, ""
}

// clearPGSSLEnv unsets the PG* variables of the TLS keys for the test.
func clearPGSSLEnv(t *testing.T) {
	for _, env := range []string{"PGSSLMODE", "PGSSLROOTCERT", "PGSSLCRL", "PGSSLCRLDIR", "PGSSLSNI",
		"PGSSLNEGOTIATION", "PGSSLMINPROTOCOLVERSION", "PGSSLMAXPROTOCOLVERSION", "PGREQUIRESSL", "PGGSSENCMODE"} {
		t.Setenv(env, "")
		os.Unsetenv(env)
	}
}

// systemRootsChildEnv carries, to the re-executed test binary, the connection strings it tries
// (one a line) and the file it writes their outcomes to.
const (
	systemRootsChildDSNs = "PGCONNECTOR_TEST_SYSTEM_ROOTS_DSNS"
	systemRootsChildOut  = "PGCONNECTOR_TEST_SYSTEM_ROOTS_OUT"
)

// TestSystemRootsChild is the child process of TestVerifyNeedsRootFile: it runs only when that
// test re-executes the binary with SSL_CERT_FILE set (crypto/x509 reads the system roots once a
// process), and writes one line per connection string: the outcome, a tab, the message.
func TestSystemRootsChild(t *testing.T) {
	dsns, out := os.Getenv(systemRootsChildDSNs), os.Getenv(systemRootsChildOut)
	if dsns == "" || out == "" {
		return // not the child
	}
	var b strings.Builder
	for dsn := range strings.SplitSeq(dsns, "\n") {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		c, err := New(dsn)
		outcome, msg := "error", ""
		if err != nil {
			msg = err.Error()
		} else {
			outcome, msg = connectOutcome(ctx, c)
			c.Close()
		}
		cancel()
		b.WriteString(outcome + "\t" + strings.ReplaceAll(msg, "\n", `\n`) + "\n")
	}
	if err := os.WriteFile(out, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
}

// Security review row 1: sslmode=verify-ca or verify-full without sslrootcert and without
// ~/.postgresql/root.crt never connects, even to a server whose CA is in the system's trust
// store: libpq fails before the TLS handshake with "root certificate file ... does not exist"
// (fe-secure-openssl.c, initialize_SSL); only sslrootcert=system takes the system's roots. The
// server's CA is put in the system store of a child process (SSL_CERT_FILE, which crypto/x509
// and OpenSSL both honour), and psql runs beside with the same environment.
func TestVerifyNeedsRootFile(t *testing.T) {
	clearPGSSLEnv(t)
	srv := harness.StartT(t, harness.Options{TLS: true})
	home := t.TempDir() // no .postgresql/root.crt
	root := filepath.Join(home, ".postgresql", "root.crt")
	env := []string{"HOME=" + home, "SSL_CERT_FILE=" + srv.CAFile, "SSL_CERT_DIR=" + t.TempDir()}

	// child runs the connector in a process whose system roots are the server's CA.
	child := func(t *testing.T, dsns ...string) [][2]string {
		t.Helper()
		out := filepath.Join(t.TempDir(), "out")
		cmd := exec.Command(os.Args[0], "-test.run=^TestSystemRootsChild$", "-test.count=1")
		cmd.Env = append(append(harness.CleanEnv(), env...),
			systemRootsChildDSNs+"="+strings.Join(dsns, "\n"), systemRootsChildOut+"="+out)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("child: %v: %s", err, b)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		var res [][2]string
		for line := range strings.SplitSeq(strings.TrimSuffix(string(b), "\n"), "\n") {
			o, m, _ := strings.Cut(line, "\t")
			res = append(res, [2]string{o, strings.ReplaceAll(m, `\n`, "\n")})
		}
		if len(res) != len(dsns) {
			t.Fatalf("child gave %d outcomes for %d connection strings", len(res), len(dsns))
		}
		return res
	}

	// The system store of the child does hold the server's CA: sslrootcert=system connects
	// (libpq 16; psql 15 does not know "system").
	if got := child(t, srv.DSN("sslmode=verify-full", "sslrootcert=system", "gssencmode=disable")); got[0][0] != "TLSv1.3" {
		t.Fatalf("sslrootcert=system with the CA in SSL_CERT_FILE: %q %s", got[0][0], got[0][1])
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	want := `root certificate file "` + root + `" does not exist`
	mark := srv.LogMark()
	modes := []string{"verify-full", "verify-ca"}
	var dsns []string
	for _, mode := range modes {
		dsns = append(dsns, srv.DSN("sslmode="+mode, "gssencmode=disable"))
	}
	got := child(t, dsns...)
	for i, mode := range modes {
		psqlOut, psqlMsg := psqlTLSOutcome(ctx, env, dsns[i])
		t.Logf("sslmode=%s: psql %s %q; pgconnector %s %q", mode, psqlOut, psqlMsg, got[i][0], got[i][1])
		if psqlOut != "error" || !strings.Contains(psqlMsg, want) {
			t.Fatalf("sslmode=%s: psql %s %q, want %q", mode, psqlOut, psqlMsg, want)
		}
		if got[i][0] != "error" || !strings.Contains(got[i][1], want+"\n"+tlspolicy.RootHint) {
			t.Errorf("sslmode=%s: pgconnector %s %q, want libpq's %q and its hint", mode, got[i][0], got[i][1], want)
		}
		if strings.Contains(got[i][1], srv.Password) {
			t.Errorf("sslmode=%s: the error shows the password", mode)
		}
	}
	// Nothing of the startup reached the server: no backend was authorized.
	if log := srv.Log(); int64(len(log)) > mark && strings.Contains(log[mark:], "connection authorized") {
		t.Errorf("a connection was authorized without a root certificate file:\n%s", log[mark:])
	}

	// sslmode=require without a root file: TLS without verification, as libpq.
	req := srv.DSN("sslmode=require", "gssencmode=disable")
	psqlOut, psqlMsg := psqlTLSOutcome(ctx, env, req)
	if got := child(t, req); got[0][0] != psqlOut || psqlOut != "TLSv1.3" {
		t.Errorf("sslmode=require: psql %s %q, pgconnector %s %q", psqlOut, psqlMsg, got[0][0], got[0][1])
	}
}

// Security review row 10: a root certificate file that exists (sslrootcert, or the default
// ~/.postgresql/root.crt) is used under every sslmode, as libpq uses it (fe-secure-openssl.c,
// initialize_SSL: SSL_VERIFY_PEER whenever it loaded one): a server it does not verify fails the
// TLS attempt; prefer and allow then go on in plaintext, require (which acts as verify-ca) and
// verify-* fail, and with several hosts the next one is not tried. psql runs beside each case.
// The failed verification is not remembered as "no TLS": once the file verifies the server, the
// same connector (warm cache) connects over TLS again, and a file created after a failure is used.
func TestRootFileUnderEveryMode(t *testing.T) {
	clearPGSSLEnv(t)
	srv := harness.StartT(t, harness.Options{TLS: true})
	other := harness.StartT(t, harness.Options{TLS: true}) // another CA
	home := t.TempDir()
	t.Setenv("HOME", home)
	dir := filepath.Join(home, ".postgresql")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "root.crt")
	setRoot := func(t *testing.T, from string) {
		t.Helper()
		if from == "" {
			if err := os.Remove(root); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
			return
		}
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(root, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	garbage := filepath.Join(t.TempDir(), "garbage.crt")
	if err := os.WriteFile(garbage, []byte("not a certificate\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"HOME=" + home}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	for _, tt := range []struct {
		name  string
		root  string // the CA file copied to ~/.postgresql/root.crt; "" for none
		extra []string
		want  string // "TLSv1.3", "plain" or "error"
		msg   string // in both errors
	}{
		{"prefer, default root file of another CA", other.CAFile, []string{"sslmode=prefer"}, "plain", ""},
		{"allow, default root file of another CA", other.CAFile, []string{"sslmode=allow"}, "plain", ""},
		{"require, default root file of another CA", other.CAFile, []string{"sslmode=require"}, "error", "certificate verify failed"},
		{"verify-ca, default root file of another CA", other.CAFile, []string{"sslmode=verify-ca"}, "error", "certificate verify failed"},
		{"prefer, sslrootcert of another CA", "", []string{"sslmode=prefer", "sslrootcert=" + other.CAFile}, "plain", ""},
		{"require, sslrootcert of another CA", "", []string{"sslmode=require", "sslrootcert=" + other.CAFile}, "error", "certificate verify failed"},
		{"require, sslrootcert of the server's CA", other.CAFile, []string{"sslmode=require", "sslrootcert=" + srv.CAFile}, "TLSv1.3", ""},
		{"prefer, default root file of the server's CA", srv.CAFile, []string{"sslmode=prefer"}, "TLSv1.3", ""},
		{"prefer, sslrootcert that does not exist", "", []string{"sslmode=prefer", "sslrootcert=" + filepath.Join(dir, "none.crt")}, "TLSv1.3", ""},
		{"require, sslrootcert that does not exist", "", []string{"sslmode=require", "sslrootcert=" + filepath.Join(dir, "none.crt")}, "TLSv1.3", ""},
		{"prefer, root file without a certificate", "", []string{"sslmode=prefer", "sslrootcert=" + garbage}, "plain", ""},
		{"require, root file without a certificate", "", []string{"sslmode=require", "sslrootcert=" + garbage}, "error", `could not read root certificate file "` + garbage + `"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			setRoot(t, tt.root)
			dsn := srv.DSN(append(tt.extra, "gssencmode=disable")...)
			psqlOut, psqlMsg := psqlTLSOutcome(ctx, env, dsn)
			c, err := New(dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			for _, run := range []string{"cold", "warm"} {
				out, msg := connectOutcome(ctx, c)
				t.Logf("%s: psql %s %q; pgconnector %s %q", run, psqlOut, psqlMsg, out, msg)
				if psqlOut != tt.want || out != tt.want {
					t.Fatalf("%s: psql %s, pgconnector %s, want %s (%s)", run, psqlOut, out, tt.want, msg)
				}
				if !strings.Contains(psqlMsg, tt.msg) || !strings.Contains(msg, tt.msg) {
					t.Errorf("%s: psql %q, pgconnector %q, want both to say %q", run, psqlMsg, msg, tt.msg)
				}
				if strings.Contains(msg, srv.Password) {
					t.Errorf("the error shows the password")
				}
			}
		})
	}

	t.Run("several hosts: a server that does not verify ends the connect", func(t *testing.T) {
		setRoot(t, other.CAFile) // verifies the second host, not the first
		dsn := "host=127.0.0.1,127.0.0.1 port=" + strconv.Itoa(srv.Port) + "," + strconv.Itoa(other.Port) +
			" user=app password=" + srv.Password + " dbname=app sslmode=verify-ca gssencmode=disable"
		psqlOut, psqlMsg := psqlTLSOutcome(ctx, env, dsn)
		c, err := New(dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		out, msg := connectOutcome(ctx, c)
		t.Logf("psql %s %q; pgconnector %s %q", psqlOut, psqlMsg, out, msg)
		if psqlOut != "error" || out != "error" || !strings.Contains(msg, "certificate verify failed") ||
			strings.Contains(msg, strconv.Itoa(other.Port)) {
			t.Fatalf("psql %s, pgconnector %s %q: want both to fail on the first host only", psqlOut, out, msg)
		}
	})

	t.Run("a failed verification is not remembered", func(t *testing.T) {
		setRoot(t, other.CAFile)
		c, err := New(srv.DSN("sslmode=prefer", "gssencmode=disable"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for i := range 2 {
			if out, msg := connectOutcome(ctx, c); out != "plain" {
				t.Fatalf("connect %d with a root file that does not verify: %s %s, want plain (libpq's prefer)", i, out, msg)
			}
		}
		setRoot(t, srv.CAFile)
		if out, msg := connectOutcome(ctx, c); out != "TLSv1.3" {
			t.Fatalf("the root file now verifies the server: %s %s, want TLS: the failure was remembered", out, msg)
		}
	})

	t.Run("a root file created after a failure is used", func(t *testing.T) {
		setRoot(t, "")
		c, err := New(srv.DSN("sslmode=verify-full", "gssencmode=disable"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		want := `root certificate file "` + root + `" does not exist`
		if out, msg := connectOutcome(ctx, c); out != "error" || !strings.Contains(msg, want) {
			t.Fatalf("no root file: %s %q, want %q", out, msg, want)
		}
		setRoot(t, srv.CAFile)
		if out, msg := connectOutcome(ctx, c); out != "TLSv1.3" {
			t.Fatalf("root file created: %s %s, want TLS", out, msg)
		}
	})
}

// tlsProbe is a TLS server for what a real server cannot show: it records each client's SNI,
// whether the handshake completed and whether the client sent anything over TLS after it, then
// closes (after the first bytes). It answers SSLRequest with 'S' ('N' to GSSENCRequest) and takes direct TLS (a first
// byte 0x16, sslnegotiation=direct) as well; with alpn it selects that ALPN protocol, else none.
type tlsProbe struct {
	ln  net.Listener
	cfg *tls.Config

	accepted atomic.Int64
	mu       sync.Mutex
	seen     []probeConn
	wg       sync.WaitGroup
}

type probeConn struct {
	direct    bool
	sni       string
	handshake error
	alpn      string
	after     int // bytes of the first read over TLS after the handshake (0: the client closed)
}

func startTLSProbe(t *testing.T, cert tls.Certificate, alpn string) *tlsProbe {
	t.Helper()
	ln, err := harness.Listen()
	if err != nil {
		t.Fatal(err)
	}
	p := &tlsProbe{ln: ln, cfg: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}
	if alpn != "" {
		p.cfg.NextProtos = []string{alpn}
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.accepted.Add(1)
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				p.serve(c)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.wg.Wait()
	})
	return p
}

func (p *tlsProbe) port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// conns returns what the probe recorded since from (an earlier count), once the connections the
// probe accepted so far are done with (a record is made when the client has closed).
func (p *tlsProbe) conns(from int) []probeConn {
	deadline := time.Now().Add(10 * time.Second)
	for {
		p.mu.Lock()
		done := len(p.seen) == int(p.accepted.Load())
		got := append([]probeConn(nil), p.seen[from:]...)
		p.mu.Unlock()
		if done || time.Now().After(deadline) {
			return got
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (p *tlsProbe) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.seen)
}

// bufConn reads through a bufio.Reader (the byte peeked at stays for the TLS handshake).
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c bufConn) Read(b []byte) (int, error) { return c.r.Read(b) }

func (p *tlsProbe) serve(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	r := bufio.NewReader(c)
	var rec probeConn
	defer func() {
		p.mu.Lock()
		p.seen = append(p.seen, rec)
		p.mu.Unlock()
	}()
	for {
		first, err := r.Peek(1)
		if err != nil {
			return
		}
		if first[0] == 0x16 {
			rec.direct = true
			break
		}
		var req [8]byte
		if _, err := io.ReadFull(r, req[:]); err != nil {
			return
		}
		switch string(req[4:]) {
		case "\x04\xd2\x16\x2f": // SSLRequest
			if _, err := c.Write([]byte("S")); err != nil {
				return
			}
		case "\x04\xd2\x16\x30": // GSSENCRequest
			if _, err := c.Write([]byte("N")); err != nil {
				return
			}
			continue
		default:
			return
		}
		break
	}
	cfg := p.cfg.Clone()
	cfg.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		rec.sni = hello.ServerName
		return nil, nil
	}
	tc := tls.Server(bufConn{Conn: c, r: r}, cfg)
	rec.handshake = tc.Handshake()
	if rec.handshake == nil {
		rec.alpn = tc.ConnectionState().NegotiatedProtocol
		// The first read: what the client sends first after the handshake (its StartupMessage),
		// or the end of the connection.
		_ = tc.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 512)
		n, _ := tc.Read(buf)
		rec.after = n
	}
}

// probePKI writes the root CA of a root -> intermediate -> leaf chain (the leaf for dnsName) to
// a file and returns it with the server's certificate (leaf and intermediate).
func probePKI(t *testing.T, dnsName string) (rootFile string, cert tls.Certificate) {
	t.Helper()
	p := testpki.New(t)
	leaf := p.Leaf
	if dnsName != "localhost" {
		leaf = testpki.Issue(t, &x509.Certificate{
			Subject:     pkix.Name{CommonName: dnsName},
			KeyUsage:    x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			DNSNames:    []string{dnsName},
		}, &p.Inter, testpki.NewKey(t))
	}
	rootFile = filepath.Join(t.TempDir(), "root.crt")
	if err := os.WriteFile(rootFile, testpki.PEMCert(p.Root.Cert), 0o644); err != nil {
		t.Fatal(err)
	}
	return rootFile, tls.Certificate{Certificate: [][]byte{leaf.Cert.Raw, p.Inter.Cert.Raw}, PrivateKey: leaf.Key}
}

// Security review row 5: sslsni=0 (or PGSSLSNI=0) sends no SNI, and verify-full still checks
// the host name; the default sends the host name, never an IP address (libpq's initialize_SSL).
// psql, beside, shows what libpq sends to the same server.
func TestSSLSNI(t *testing.T) {
	clearPGSSLEnv(t)
	t.Setenv("HOME", t.TempDir())
	rootFile, cert := probePKI(t, "localhost")
	_, wrongCert := probePKI(t, "otherhost") // the same shape for another name (its own CA)
	good := startTLSProbe(t, cert, "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	for _, tt := range []struct {
		name      string
		host      string
		extra     string
		env       string // an environment variable for both clients
		wrongName bool   // the server's certificate names another host
		sni       string
		handshake bool // the client accepted the server's certificate
	}{
		{name: "verify-full, default sslsni", host: "localhost", extra: "sslmode=verify-full", sni: "localhost", handshake: true},
		{name: "verify-full sslsni=0", host: "localhost", extra: "sslmode=verify-full sslsni=0", sni: "", handshake: true},
		{name: "verify-full PGSSLSNI=0", host: "localhost", extra: "sslmode=verify-full", env: "PGSSLSNI=0", sni: "", handshake: true},
		{name: "verify-full sslsni=0, certificate for another name", host: "localhost", extra: "sslmode=verify-full sslsni=0", wrongName: true, sni: "", handshake: false},
		{name: "require sslsni=1, an IP address", host: "127.0.0.1", extra: "sslmode=require sslsni=1", sni: "", handshake: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := good
			if tt.wrongName {
				srv = startTLSProbe(t, wrongCert, "")
			}
			dsn := "host=" + tt.host + " hostaddr=127.0.0.1 port=" + strconv.Itoa(srv.port()) +
				" user=app dbname=app gssencmode=disable sslrootcert=" + rootFile + " " + tt.extra
			var env []string
			if tt.env != "" {
				env = append(env, tt.env)
				k, v, _ := strings.Cut(tt.env, "=")
				t.Setenv(k, v)
			}
			from := srv.count()
			_, psqlMsg := psqlTLSOutcome(ctx, env, dsn)
			psql := srv.conns(from)
			from = srv.count()
			c, err := New(dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_, msg := connectOutcome(ctx, c)
			ours := srv.conns(from)
			t.Logf("psql %+v %q; pgconnector %+v %q", psql, psqlMsg, ours, msg)
			if len(psql) != 1 || len(ours) != 1 {
				t.Fatalf("TLS connections: psql %d, pgconnector %d, want 1 each", len(psql), len(ours))
			}
			for who, rec := range map[string]probeConn{"psql": psql[0], "pgconnector": ours[0]} {
				if rec.sni != tt.sni {
					t.Errorf("%s sent SNI %q, want %q", who, rec.sni, tt.sni)
				}
				if (rec.handshake == nil) != tt.handshake {
					t.Errorf("%s: handshake error %v, want the certificate accepted: %v", who, rec.handshake, tt.handshake)
				}
			}
		})
	}
}

// Security review row 4: with sslnegotiation=direct, a server that completes the TLS handshake
// without selecting the ALPN protocol "postgresql" is refused, with libpq 17's message
// (fe-secure-openssl.c, open_client_SSL), and nothing is sent over the connection (psql 15
// cannot do direct TLS: the message is libpq 17's source text). The same server selecting
// "postgresql" gets the StartupMessage.
func TestDirectTLSNeedsALPN(t *testing.T) {
	clearPGSSLEnv(t)
	t.Setenv("HOME", t.TempDir())
	rootFile, cert := probePKI(t, "localhost")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const libpq17 = "direct SSL connection was established without ALPN protocol negotiation extension"
	for _, alpn := range []string{"", "postgresql"} {
		t.Run("server ALPN "+strconv.Quote(alpn), func(t *testing.T) {
			srv := startTLSProbe(t, cert, alpn)
			for _, mode := range []string{"require", "verify-full"} {
				from := srv.count()
				c, err := New("host=localhost hostaddr=127.0.0.1 port=" + strconv.Itoa(srv.port()) +
					" user=app password=secret-pw dbname=app gssencmode=disable sslnegotiation=direct sslmode=" + mode +
					" sslrootcert=" + rootFile)
				if err != nil {
					t.Fatal(err)
				}
				dc, err := c.Connect(ctx)
				if err == nil {
					dc.Close()
				}
				c.Close()
				msg := ""
				if err != nil {
					msg = err.Error()
				}
				got := srv.conns(from)
				t.Logf("sslmode=%s: %+v %q", mode, got, msg)
				if len(got) != 1 || !got[0].direct || got[0].handshake != nil {
					t.Fatalf("sslmode=%s: connections %+v, want one direct TLS handshake that completed", mode, got)
				}
				if strings.Contains(msg, "secret-pw") {
					t.Errorf("the error shows the password")
				}
				if alpn == "" {
					if got[0].after != 0 {
						t.Errorf("sslmode=%s: %d bytes sent after a handshake without ALPN", mode, got[0].after)
					}
					if !strings.Contains(msg, "TLS handshake: "+libpq17) {
						t.Errorf("sslmode=%s: error %q, want libpq 17's %q", mode, msg, libpq17)
					}
					if !errors.Is(err, negotiation.ErrDirectTLSNoALPN) {
						t.Errorf("sslmode=%s: %v is not negotiation.ErrDirectTLSNoALPN", mode, err)
					}
				} else if got[0].alpn != "postgresql" || got[0].after == 0 || strings.Contains(msg, libpq17) {
					t.Errorf("sslmode=%s: with ALPN postgresql: ALPN %q, %d bytes after the handshake, error %q: want the StartupMessage sent",
						mode, got[0].alpn, got[0].after, msg)
				}
			}
		})
	}
}
