package harness

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// gssQuery shows what a session's GSSAPI status is.
const gssQuery = "select encrypted, gss_authenticated, principal from pg_stat_gssapi where pid = pg_backend_pid()"

// gssHBA is the pg_hba.conf line that admits only GSS-encrypted connections
// of principals of k's realm.
func gssHBA(k *KDC) string {
	return "hostgssenc all all 127.0.0.1/32 gss include_realm=0 krb_realm=" + k.Realm
}

// conninfo builds a libpq connection string for the GSS tests.
func conninfo(host string, port int, user string, extra ...string) string {
	return strings.Join(append([]string{"host=" + host, "port=" + strconv.Itoa(port), "dbname=" + AppDatabase, "user=" + user}, extra...), " ")
}

// kdcWithAlice starts a KDC with the user principal alice and returns it with
// a credential cache holding alice's ticket-granting ticket.
func kdcWithAlice(t *testing.T, opts KDCOptions) (*KDC, string) {
	t.Helper()
	k := StartKDCT(t, opts)
	if _, err := k.AddPrincipal("alice"); err != nil {
		t.Fatal(err)
	}
	ccache := filepath.Join(t.TempDir(), "alice.ccache")
	if err := k.Kinit(ccache, "alice", 0); err != nil {
		t.Fatal(err)
	}
	return k, ccache
}

// gssServer starts a server with GSS options g and the given pg_hba lines and
// creates the role alice.
func gssServer(t *testing.T, g *GSSOptions, hba ...string) *Postgres {
	t.Helper()
	p := StartT(t, Options{GSS: g, HBA: hba})
	if err := p.CreateRole("alice"); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestKDCStartAndKinit(t *testing.T) {
	t.Parallel()
	// The first call in a process also makes the per-process directory (and
	// runs initdb); measure the KDC alone.
	if _, err := setup(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	k := StartKDCT(t, KDCOptions{})
	t.Logf("KDC start: %v (port %d)", time.Since(t0).Round(time.Millisecond), k.Port)

	if k.Realm != DefaultRealm || k.Port == 0 || k.Dir == "" {
		t.Fatalf("unexpected fields: realm %q port %d dir %q", k.Realm, k.Port, k.Dir)
	}
	conf, err := os.ReadFile(k.Krb5Conf)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"default_realm = " + DefaultRealm,
		"dns_canonicalize_hostname = false",
		"rdns = false",
		"udp_preference_limit = 1",
		"kdc = 127.0.0.1:" + strconv.Itoa(k.Port),
		"permitted_enctypes = " + strings.Join(SupportedEnctypes(), " "),
	} {
		if !strings.Contains(string(conf), want) {
			t.Errorf("krb5.conf lacks %q", want)
		}
	}
	// The KDC is the one listener on its port, over TCP and UDP.
	if tcp, udp, ok := listenersOn(k.Port); ok && (tcp != 1 || udp != 1) {
		t.Errorf("port %d: %d TCP listeners, %d UDP sockets", k.Port, tcp, udp)
	}
	if pid := readPidFile(k.pidFile); pid <= 0 || procComm(pid) != "krb5kdc" {
		t.Errorf("pid file names pid %d (%q)", pid, procComm(pid))
	}

	pw, err := k.AddPrincipal("alice")
	if err != nil {
		t.Fatal(err)
	}
	if len(pw) < 16 {
		t.Errorf("password of %d characters", len(pw))
	}
	if _, err := k.AddPrincipal("alice"); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("second AddPrincipal(alice): %v, want an error saying it exists", err)
	} else if strings.Contains(err.Error(), pw) {
		t.Error("error message holds the password")
	}
	if got, err := k.Enctypes("alice"); err != nil || !sameSet(got, SupportedEnctypes()) {
		t.Errorf("alice's keys: %v, %v; want %v", got, err, SupportedEnctypes())
	}
	if got, err := k.Enctypes("nobody"); err != nil || got != nil {
		t.Errorf("Enctypes(nobody) = %v, %v; want nil, nil", got, err)
	}

	// A user with keys of one type: kinit works with those.
	if _, err := k.AddPrincipalEnctypes("carol", EnctypeAES128SHA256); err != nil {
		t.Fatal(err)
	}
	if got, err := k.Enctypes("carol@" + k.Realm); err != nil || !slices.Equal(got, []string{EnctypeAES128SHA256}) {
		t.Errorf("carol's keys: %v, %v", got, err)
	}
	if err := k.Kinit(filepath.Join(t.TempDir(), "carol.cc"), "carol", 0); err != nil {
		t.Error(err)
	}
	if _, err := k.AddPrincipalEnctypes("dave", "des-cbc-crc"); err == nil {
		t.Error("AddPrincipalEnctypes with des-cbc-crc succeeded")
	}

	ccache := filepath.Join(t.TempDir(), "cc")
	if err := k.Kinit(ccache, "alice", 0); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(ccache)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("ccache mode %v", fi.Mode().Perm())
	}
	out, err := k.Klist(ccache)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "Default principal: alice@"+DefaultRealm) || !strings.Contains(out, "krbtgt/"+DefaultRealm+"@"+DefaultRealm) {
		t.Errorf("klist:\n%s", out)
	}
	// The keytab Kinit used is gone again.
	if left, _ := filepath.Glob(filepath.Join(k.keytabs, "*")); len(left) != 0 {
		t.Errorf("client keytabs left behind: %v", left)
	}

	env := k.Env(ccache)
	want := []string{"KRB5_CONFIG=" + k.Krb5Conf, "KRB5CCNAME=FILE:" + ccache, "KRB5_CLIENT_KTNAME=", "KRB5RCACHEDIR=" + k.rcache}
	if !slices.Equal(env, want) {
		t.Errorf("Env = %q, want %q", env, want)
	}

	// Keytab: -norandkey (the keys do not change, so kinit with the password
	// is not needed, and an existing ticket stays valid), mode 0600; a blank
	// in the path is fine.
	kt := filepath.Join(t.TempDir(), "alice's keytab")
	if err := k.Keytab(kt, "alice"); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(kt); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("keytab: %v, %v", fi, err)
	}
	if _, err := k.Klist(ccache); err != nil {
		t.Fatal(err)
	}

	for _, bad := range []string{"", "a b", "x\ny", `a"b`, "alice@lower.realm"} {
		if _, err := k.AddPrincipal(bad); err == nil {
			t.Errorf("AddPrincipal(%q) succeeded", bad)
		}
	}
	if err := k.Kinit(ccache, "nobody", 0); err == nil {
		t.Error("Kinit of a principal that does not exist succeeded")
	}
}

// A short lifetime gives a ticket that expires: klist -s (exit status 1 when
// the cache holds no valid ticket) tells.
func TestKinitShortLifetime(t *testing.T) {
	t.Parallel()
	k := StartKDCT(t, KDCOptions{Realm: "SHORT.TEST", TicketLifetime: time.Hour})
	if _, err := k.AddPrincipal("alice"); err != nil {
		t.Fatal(err)
	}
	ccache := filepath.Join(t.TempDir(), "cc")
	t0 := time.Now()
	if err := k.Kinit(ccache, "alice", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	klistS := func() error {
		cmd := exec.Command(k.progs.klist, "-s")
		cmd.Env = append(CleanEnv(), k.Env(ccache)...)
		return cmd.Run()
	}
	if err := klistS(); err != nil && time.Since(t0) < time.Second {
		t.Fatalf("klist -s right after kinit: %v", err)
	}
	time.Sleep(time.Until(t0.Add(3 * time.Second)))
	if err := klistS(); err == nil {
		t.Fatal("klist -s: the 2-second ticket is still valid after 3 seconds")
	}
	// A lifetime over the KDC's maximum is cut to it.
	if err := k.Kinit(ccache, "alice", 5*time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := klistS(); err != nil {
		t.Fatalf("klist -s after a new kinit: %v", err)
	}
	if err := k.Kinit(ccache, "alice", time.Millisecond); err == nil {
		t.Error("Kinit with a lifetime of 1 ms succeeded")
	}
}

// TestKDCStartTime measures KDC starts (a new database, krb5kdc up) and
// stops; run with -v to see it. Not parallel, so that it measures a quiet
// machine.
func TestKDCStartTime(t *testing.T) {
	ctx := testCtx(t)
	if _, err := setup(ctx); err != nil {
		t.Fatal(err)
	}
	var total time.Duration
	const n = 3
	for i := range n {
		t0 := time.Now()
		k, err := StartKDC(ctx, KDCOptions{})
		if err != nil {
			t.Fatal(err)
		}
		d := time.Since(t0)
		total += d
		t1 := time.Now()
		if err := k.Stop(); err != nil {
			t.Fatal(err)
		}
		t.Logf("KDC start %d: %v, stop: %v", i+1, d.Round(time.Millisecond), time.Since(t1).Round(time.Millisecond))
	}
	t.Logf("mean KDC start: %v", (total / n).Round(time.Millisecond))
}

// A KDC left running by a process that died is stopped by the next process's
// sweep, through its pid file.
func TestSweepStopsStaleKDC(t *testing.T) {
	t.Parallel()
	k := StartKDCT(t, KDCOptions{})
	pid := readPidFile(k.pidFile)
	// A base directory whose owner is a process that has exited.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	base, err := os.MkdirTemp(tempRoots()[0], basePrefix+"*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	owner := "pid=" + strconv.Itoa(dead.Process.Pid) + " start=1 host=" + must(os.Hostname()) + "\n"
	if err := os.WriteFile(filepath.Join(base, ownerFile), []byte(owner), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(base, "kdc-1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(base, "kdc-1", "krb5kdc.pid"), []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sweepStale()
	if !waitGone(pid, 5*time.Second) {
		t.Errorf("krb5kdc %d still running after the sweep", pid)
	}
	if _, err := os.Stat(base); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stale base %s not removed (%v)", base, err)
	}
	// Stop copes with a KDC that is already gone.
	if err := k.Stop(); err != nil {
		t.Errorf("Stop after the sweep: %v", err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestKDCStopIsIdempotentAndRemovesDirectory(t *testing.T) {
	t.Parallel()
	k, err := StartKDC(testCtx(t), KDCOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pid := readPidFile(k.pidFile)
	if pid <= 0 {
		t.Fatal("no pid file")
	}
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			if err := k.Stop(); err != nil {
				t.Errorf("Stop: %v", err)
			}
		})
	}
	wg.Wait()
	if err := k.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if !waitGone(pid, 0) {
		t.Errorf("krb5kdc %d still running", pid)
	}
	if _, err := os.Stat(k.Dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s still exists (%v)", k.Dir, err)
	}
}

// Two KDCs in one process get different ports and realms of their own.
func TestTwoKDCs(t *testing.T) {
	t.Parallel()
	a := StartKDCT(t, KDCOptions{Realm: "A.TEST"})
	b := StartKDCT(t, KDCOptions{Realm: "B.TEST"})
	if a.Port == b.Port {
		t.Fatalf("both KDCs on port %d", a.Port)
	}
	for _, k := range []*KDC{a, b} {
		if _, err := k.AddPrincipal("alice"); err != nil {
			t.Fatal(err)
		}
		cc := filepath.Join(t.TempDir(), "cc")
		if err := k.Kinit(cc, "alice", 0); err != nil {
			t.Fatal(err)
		}
		if out, err := k.Klist(cc); err != nil || !strings.Contains(out, "alice@"+k.Realm) {
			t.Errorf("%s: klist %v:\n%s", k.Realm, err, out)
		}
	}
	for _, bad := range []KDCOptions{{Realm: "lower.case"}, {Realm: "A B"}, {ClockSkew: 1500 * time.Millisecond}, {TicketLifetime: time.Millisecond}} {
		if k, err := StartKDC(testCtx(t), bad); err == nil {
			_ = k.Stop()
			t.Errorf("StartKDC(%+v) succeeded", bad)
		}
	}
	c := StartKDCT(t, KDCOptions{Realm: "C.TEST", ClockSkew: time.Second})
	if conf, err := os.ReadFile(c.Krb5Conf); err != nil || !strings.Contains(string(conf), "clockskew = 1\n") {
		t.Errorf("krb5.conf with ClockSkew 1s: %v\n%s", err, conf)
	}
	if _, err := Start(testCtx(t), Options{GSS: &GSSOptions{}}); err == nil {
		t.Error("GSSOptions without a KDC were accepted")
	}
}

// The main case: a server that admits only GSS-encrypted connections, and the
// real psql with alice's ticket, naming the server as localhost and as
// 127.0.0.1 (one service principal each, as canonicalization is off).
func TestGSSEncryptionWithPsql(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	k, ccache := kdcWithAlice(t, KDCOptions{})
	p := gssServer(t, &GSSOptions{KDC: k, Keytab: true}, gssHBA(k))

	if p.KrbSrvName != "postgres" || p.KeytabFile == "" {
		t.Fatalf("KrbSrvName %q, KeytabFile %q", p.KrbSrvName, p.KeytabFile)
	}
	fi, err := os.Stat(p.KeytabFile)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 || statUID(t, p.KeytabFile) != statUID(t, p.DataDir) {
		t.Errorf("keytab mode %v, uid %d; want 0600 and the server's uid %d", fi.Mode().Perm(), statUID(t, p.KeytabFile), statUID(t, p.DataDir))
	}
	var settings string
	err = p.admin(ctx, func(c *pgx.Conn) error {
		return c.QueryRow(ctx, "select current_setting('krb_server_keyfile') || ' ' || current_setting('krb_caseins_users')").Scan(&settings)
	})
	if err != nil || settings != "FILE:"+p.KeytabFile+" off" {
		t.Errorf("settings %q (%v)", settings, err)
	}

	// The postmaster runs with the realm's krb5.conf, a replay cache of its
	// own and no other Kerberos variable.
	environ, err := os.ReadFile("/proc/" + strconv.Itoa(postmasterPID(filepath.Join(p.DataDir, "postmaster.pid"))) + "/environ")
	if err != nil {
		t.Fatal(err)
	}
	var krbEnv []string
	for _, kv := range strings.Split(string(environ), "\x00") {
		if strings.HasPrefix(kv, "KRB5") {
			krbEnv = append(krbEnv, kv)
		}
	}
	rcache := filepath.Join(filepath.Dir(p.DataDir), "krb5rcache")
	slices.Sort(krbEnv)
	if want := []string{"KRB5RCACHEDIR=" + rcache, "KRB5_CONFIG=" + k.Krb5Conf}; !slices.Equal(krbEnv, want) {
		t.Errorf("postmaster's Kerberos environment %q, want %q", krbEnv, want)
	}

	for _, host := range []string{"localhost", "127.0.0.1"} {
		t.Run(host, func(t *testing.T) {
			out, err := Psql(ctx, k.Env(ccache), conninfo(host, p.Port, "alice", "gssencmode=require"),
				"select encrypted from pg_stat_gssapi where pid = pg_backend_pid()")
			if err != nil || out != "t" {
				t.Fatalf("psql: %q, %v; want t", out, err)
			}
			out, err = Psql(ctx, k.Env(ccache), conninfo(host, p.Port, "alice", "gssencmode=require"), gssQuery)
			if want := "t|t|alice@" + k.Realm; err != nil || out != want {
				t.Errorf("psql: %q, %v; want %q", out, err, want)
			}
			session, ticket, err := k.TicketEnctypes(ccache, "postgres/"+host)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("service ticket for postgres/%s: session key %s, ticket %s", host, session, ticket)
		})
	}

	// The acceptor keeps its replay cache there.
	if entries, err := os.ReadDir(rcache); err != nil || len(entries) == 0 {
		t.Errorf("replay cache directory %s: %d entries, %v", rcache, len(entries), err)
	}

	t.Run("no credentials", func(t *testing.T) {
		missing := filepath.Join(t.TempDir(), "missing.ccache")
		mark := p.LogMark()
		out, err := Psql(ctx, k.Env(missing), conninfo("localhost", p.Port, "alice", "gssencmode=require"), "select 1")
		if err == nil {
			t.Fatalf("psql without a ticket connected: %q", out)
		}
		if !strings.Contains(err.Error(), "GSSAPI encryption required but was impossible") {
			t.Errorf("error %v", err)
		}
		t.Logf("refused as expected: %v", err)
		// libpq looks for credentials only once its TCP connection is up
		// (CONNECTION_MADE), then closes it without sending a byte. The
		// postmaster forks a backend for it all the same, which writes its
		// "connection received" line whenever it runs, maybe after psql
		// has exited: wait for it.
		n := 0
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if n, err = p.ConnectionsSince(mark); err != nil || n > 0 {
				break
			}
		}
		if err != nil || n != 1 {
			t.Errorf("ConnectionsSince = %d, %v; want 1 (a socket opened and closed)", n, err)
		}
	})

	// Why Env sets KRB5_CLIENT_KTNAME: with a client keytab, MIT's library
	// gets a ticket by itself although the ccache does not exist.
	t.Run("client keytab", func(t *testing.T) {
		kt := filepath.Join(t.TempDir(), "alice.keytab")
		if err := k.Keytab(kt, "alice"); err != nil {
			t.Fatal(err)
		}
		missing := filepath.Join(t.TempDir(), "missing.ccache")
		env := append(k.Env(missing), "KRB5_CLIENT_KTNAME=FILE:"+kt)
		out, err := Psql(ctx, env, conninfo("localhost", p.Port, "alice", "gssencmode=require"), "select encrypted from pg_stat_gssapi where pid = pg_backend_pid()")
		if err != nil || out != "t" {
			t.Errorf("psql with a client keytab: %q, %v; want t", out, err)
		}
	})

	t.Run("no encryption", func(t *testing.T) {
		_, err := Psql(ctx, k.Env(ccache), conninfo("localhost", p.Port, "alice", "gssencmode=disable", "sslmode=disable"), "select 1")
		if err == nil || !strings.Contains(err.Error(), "no pg_hba.conf entry") {
			t.Errorf("gssencmode=disable: %v, want no pg_hba.conf entry", err)
		}
	})
}

// A server built with GSSAPI but without a keytab: psql with a ticket and
// gssencmode=prefer asks for GSS encryption first, the server answers 'G' but
// cannot accept the context, and psql starts over without GSS on a new
// connection, which hostnogssenc trust lets in.
func TestGSSPreferWithoutServerKeytab(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	k, ccache := kdcWithAlice(t, KDCOptions{})
	// The service principals exist, so psql gets a service ticket and sends an
	// AP-REQ the server cannot decrypt.
	if err := k.AddServicePrincipals("postgres", "localhost", "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	p := gssServer(t, &GSSOptions{KDC: k, Keytab: false}, gssHBA(k), "hostnogssenc all all 127.0.0.1/32 trust")
	if p.KeytabFile != "" {
		t.Errorf("KeytabFile %q without a keytab", p.KeytabFile)
	}
	px := ProxyT(t, p.Addr())
	_, port := px.Addr()

	mark := p.LogMark()
	out, err := Psql(ctx, k.Env(ccache), conninfo("localhost", port, "alice", "gssencmode=prefer", "sslmode=disable"), gssQuery)
	if err != nil {
		t.Fatal(err)
	}
	if out != "f|f|" {
		t.Errorf("session %q, want f|f| (no GSS)", out)
	}
	n, err := p.ConnectionsSince(mark)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("ConnectionsSince = %d, want 2 (GSS attempt, then plain)\n%s", n, p.logSince(mark))
	}
	if got, want := px.Stats(), (ProxyStats{Connections: 2, GSSENCRequests: 1, StartupMessages: 1}); got != want {
		t.Errorf("proxy stats %+v, want %+v", got, want)
	}
	if log := p.logSince(mark); !strings.Contains(log, "GSSAPI") {
		t.Errorf("the server log does not mention the GSSAPI failure:\n%s", log)
	} else {
		t.Logf("server log:\n%s", log)
	}

	// gssencmode=require fails for good.
	if _, err := Psql(ctx, k.Env(ccache), conninfo("localhost", p.Port, "alice", "gssencmode=require"), "select 1"); err == nil {
		t.Error("gssencmode=require connected to a server without a keytab")
	}
}

// Each supported encryption type, forced through a service principal with
// keys (and session keys) of that type alone, gives a GSS-encrypted
// connection; klist -e shows the service ticket's types.
func TestGSSEnctypes(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	k, ccache := kdcWithAlice(t, KDCOptions{})
	for i, enctype := range SupportedEnctypes() {
		t.Run(enctype, func(t *testing.T) {
			service := "pg" + strconv.Itoa(i)
			p := gssServer(t, &GSSOptions{KDC: k, Keytab: true, Service: service, Enctypes: []string{enctype}}, gssHBA(k))
			if got, err := k.Enctypes(service + "/localhost"); err != nil || !slices.Equal(got, []string{enctype}) {
				t.Fatalf("keys of %s/localhost: %v, %v", service, got, err)
			}
			out, err := Psql(ctx, k.Env(ccache), conninfo("localhost", p.Port, "alice", "gssencmode=require", "krbsrvname="+service), gssQuery)
			if want := "t|t|alice@" + k.Realm; err != nil || out != want {
				t.Fatalf("psql: %q, %v; want %q", out, err, want)
			}
			session, ticket, err := k.TicketEnctypes(ccache, service+"/localhost")
			if err != nil {
				t.Fatal(err)
			}
			if session != enctype || ticket != enctype {
				t.Errorf("service ticket: session key %s, ticket %s; want %s for both", session, ticket, enctype)
			}
			// Without krbsrvname psql asks for postgres/localhost, which does
			// not exist in the KDC.
			if _, err := Psql(ctx, k.Env(ccache), conninfo("localhost", p.Port, "alice", "gssencmode=require"), "select 1"); err == nil {
				t.Error("psql with the default krbsrvname connected")
			}
		})
	}
	// The same service with other keys is refused.
	if err := k.AddServicePrincipalsEnctypes("pg0", []string{EnctypeAES128SHA1}, "localhost"); err == nil {
		t.Error("AddServicePrincipalsEnctypes over existing keys of another type succeeded")
	}
}

// The server needs no KDC: once psql has its service tickets, the KDC can go.
func TestGSSAcceptorNeedsNoKDC(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	k, ccache := kdcWithAlice(t, KDCOptions{})
	p := gssServer(t, &GSSOptions{KDC: k, Keytab: true}, gssHBA(k))
	// Keep a copy of krb5.conf: Stop removes the KDC's directory.
	conf, err := os.ReadFile(k.Krb5Conf)
	if err != nil {
		t.Fatal(err)
	}
	confCopy := filepath.Join(t.TempDir(), "krb5.conf")
	if err := os.WriteFile(confCopy, conf, 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(k.Env(ccache), "KRB5_CONFIG="+confCopy, "KRB5RCACHEDIR="+t.TempDir())
	const q = "select encrypted from pg_stat_gssapi where pid = pg_backend_pid()"
	for _, host := range []string{"localhost", "127.0.0.1"} {
		if out, err := Psql(ctx, env, conninfo(host, p.Port, "alice", "gssencmode=require"), q); err != nil || out != "t" {
			t.Fatalf("%s: psql: %q, %v", host, out, err)
		}
	}
	if err := k.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"localhost", "127.0.0.1"} {
		if out, err := Psql(ctx, env, conninfo(host, p.Port, "alice", "gssencmode=require"), q); err != nil || out != "t" {
			t.Errorf("%s: psql with the KDC stopped: %q, %v", host, out, err)
		}
	}
	// A new service ticket cannot be had now.
	if _, err := Psql(ctx, env, conninfo("localhost", p.Port, "alice", "gssencmode=require", "krbsrvname=other"), q); err == nil {
		t.Error("psql got a ticket for another service with the KDC stopped")
	}
}

// The server process keeps its Kerberos environment across reloads.
func TestGSSSurvivesReload(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	k, ccache := kdcWithAlice(t, KDCOptions{})
	p := gssServer(t, &GSSOptions{KDC: k, Keytab: true}, gssHBA(k))
	if err := p.SetHBA(gssHBA(k), "hostnogssenc all all 127.0.0.1/32 reject"); err != nil {
		t.Fatal(err)
	}
	if err := p.SetSSL(true); err != nil {
		t.Fatal(err)
	}
	out, err := Psql(ctx, k.Env(ccache), conninfo("localhost", p.Port, "alice", "gssencmode=require"), gssQuery)
	if want := "t|t|alice@" + k.Realm; err != nil || out != want {
		t.Fatalf("psql after reloads: %q, %v; want %q", out, err, want)
	}
	_, err = Psql(ctx, k.Env(ccache), conninfo("localhost", p.Port, "alice", "gssencmode=disable", "sslmode=require"), "select 1")
	if err == nil || !strings.Contains(err.Error(), "rejects connection") {
		t.Errorf("TLS without GSS: %v, want the hostnogssenc reject", err)
	}
}

// Psql's error carries psql's message and exit status, not the conninfo.
func TestPsqlErrors(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	p := StartT(t, Options{Auth: "scram-sha-256"})
	out, err := Psql(ctx, nil, p.DSN("sslmode=disable"), "select 40 + 2")
	if err != nil || out != "42" {
		t.Fatalf("psql: %q, %v", out, err)
	}
	_, err = Psql(ctx, nil, p.DSN("password=wrong-secret", "sslmode=disable"), "select 1")
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("wrong password: %v, want exit status 2", err)
	}
	if strings.Contains(err.Error(), "wrong-secret") || strings.Contains(err.Error(), p.Password) {
		t.Error("the error holds a password")
	}
	// No password at all: psql -w fails instead of prompting.
	done := make(chan error, 1)
	go func() {
		_, err := Psql(context.Background(), nil, "host=127.0.0.1 port="+strconv.Itoa(p.Port)+" user=app dbname=app sslmode=disable", "select 1")
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Error("psql without a password connected to a scram server")
		}
	case <-time.After(time.Minute):
		t.Fatal("psql without a password did not return")
	}
	if _, err := Psql(ctx, nil, p.DSN("sslmode=disable"), "select nope"); !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Errorf("bad query: %v, want exit status 1", err)
	}
}
