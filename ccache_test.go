//go:build linux

package pgconnector_test

import (
	"database/sql"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
)

// cacheTools fills and empties one credential cache with MIT's own programs.
type cacheTools struct {
	label    string // the subtest's name
	source   string // the cache type the gss_credentials span names
	name     string // the cache name, as KRB5CCNAME would give it
	krb5Conf string // the KRB5_CONFIG list that reaches it
	kinit    func() error
	kdestroy func() error
}

// With every credential cache type filled by MIT's kinit (or, for KCM, kept by a real KCM
// daemon), gssencmode=require gives a GSS-encrypted connection, and a kinit or kdestroy is seen
// at the next connect, as for FILE in TestKinitAndKdestroyTakeEffect. The test runs in a
// session keyring of its own, which goes with it.
func TestCredentialCacheTypes(t *testing.T) {
	if !harness.InPrivateSessionKeyring(t) {
		return
	}
	lab := newKerberosLab(t)
	srv := lab.server(t, true, lab.gssHBA(), "hostnogssenc all all 127.0.0.1/32 trust")
	k := lab.kdc
	dir := t.TempDir()
	mit := func(label, name string) cacheTools {
		typ, _, _ := strings.Cut(name, ":")
		return cacheTools{label: label, name: name, source: typ, krb5Conf: k.Krb5Conf,
			kinit:    func() error { return k.KinitName(name, "alice", 0) },
			kdestroy: func() error { return k.Kdestroy(name, true) }}
	}
	caches := []cacheTools{
		mit("FILE", "FILE:"+filepath.Join(dir, "file.ccache")),
		mit("DIR", "DIR:"+filepath.Join(dir, "collection")),
		mit("KEYRING session", "KEYRING:session:pgconnector"),
		mit("KEYRING legacy", "KEYRING:pgconnector-legacy"),
	}
	kcm := harness.StartKCMT(t)
	kcmConf := k.Krb5Conf + ":" + kcm.Krb5Conf
	caches = append(caches, cacheTools{label: "KCM", name: "KCM:", source: "KCM", krb5Conf: kcmConf,
		kinit: func() error { return kcm.Kinit(k, "KCM:", "alice", 0) },
		kdestroy: func() error {
			_, err := kcm.Run(k, "KCM:", "kdestroy")
			return err
		}})
	for _, cc := range caches {
		t.Run(cc.label, func(t *testing.T) {
			kerberos := pgconnector.WithKerberos(pgconnector.Kerberos{Krb5Conf: cc.krb5Conf, CCache: cc.name})
			prefer := sql.OpenDB(newConnector(t, aliceDSN(srv, "localhost", "sslmode=disable"), kerberos))
			defer prefer.Close()
			prefer.SetMaxIdleConns(0)
			rec, tp := newRecorder()
			require := sql.OpenDB(newConnector(t, aliceDSN(srv, "localhost", "gssencmode=require"), kerberos,
				pgconnector.WithTracerProvider(tp)))
			defer require.Close()
			require.SetMaxIdleConns(0)
			step := func(db *sql.DB, want string) {
				t.Helper()
				if got := transport(t, db); got != want {
					t.Fatalf("%s, want %s", got, want)
				}
			}
			step(prefer, "plain") // no ticket yet
			if err := require.Ping(); err == nil {
				t.Fatal("gssencmode=require connected without a ticket")
			}
			if err := cc.kinit(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cc.kdestroy() })
			step(prefer, "gss") // kinit, seen at the next connect
			step(require, "gss")
			if err := cc.kdestroy(); err != nil {
				t.Fatal(err)
			}
			step(prefer, "plain") // kdestroy, seen at the next connect
			if err := require.Ping(); err == nil {
				t.Fatal("gssencmode=require connected after kdestroy")
			}
			if err := cc.kinit(); err != nil {
				t.Fatal(err)
			}
			step(prefer, "gss")
			step(require, "gss")
			// The credentials check names the cache type, and nothing that identifies the cache.
			checked := 0
			for _, s := range rec.Ended() {
				if s.Name() != "postgresql.gss_credentials" {
					continue
				}
				checked++
				if got := attr(s.Attributes(), "pgconnector.gss.credentials.source"); got != cc.source {
					t.Errorf("gss_credentials span: source %q, want %q", got, cc.source)
				}
				for _, kv := range s.Attributes() {
					if v := kv.Value.Emit(); strings.Contains(v, "alice") || strings.Contains(v, dir) {
						t.Errorf("gss_credentials span: %s = %q names the principal or the cache", kv.Key, v)
					}
				}
			}
			if checked == 0 {
				t.Error("no gss_credentials span")
			}
		})
	}
}

// Without KRB5CCNAME, the cache is krb5.conf's default_ccache_name with its %{uid} expanded, as
// MIT's krb5_cc_default_name finds it, here in an included directory.
func TestDefaultCCacheName(t *testing.T) {
	lab := newKerberosLab(t)
	srv := lab.server(t, true, lab.gssHBA())
	dir := t.TempDir()
	confDir := filepath.Join(dir, "krb5.conf.d")
	if err := os.Mkdir(confDir, 0o755); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(dir, "cc-"+strconv.Itoa(os.Getuid()))
	if err := os.WriteFile(filepath.Join(confDir, "ccache.conf"),
		[]byte("[libdefaults]\n    default_ccache_name = DIR:"+filepath.Join(dir, "cc-%{uid}")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	main := filepath.Join(dir, "krb5.conf")
	if err := os.WriteFile(main, []byte("includedir "+confDir+"\ninclude "+lab.kdc.Krb5Conf+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := lab.kdc.KinitName("DIR:"+cache, "alice", 0); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KRB5CCNAME", "")
	db := sql.OpenDB(newConnector(t, aliceDSN(srv, "localhost", "gssencmode=require"),
		pgconnector.WithKerberos(pgconnector.Kerberos{Krb5Conf: main})))
	defer db.Close()
	if got := transport(t, db); got != "gss" {
		t.Fatalf("%s, want gss from DIR:%s", got, cache)
	}
}

// A cache type that cannot be read from another process (MEMORY) or is unknown holds no
// credentials: gssencmode=prefer goes on without GSS, require fails with an error naming the type.
func TestUnreadableCacheTypes(t *testing.T) {
	lab := newKerberosLab(t)
	srv := lab.server(t, true, lab.gssHBA(), "hostnogssenc all all 127.0.0.1/32 trust")
	for _, tc := range []struct{ name, want string }{
		{"MEMORY:app", "MEMORY"},
		{"API:", "API"},
		{"XYZ:somewhere", `"XYZ"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kerberos := pgconnector.WithKerberos(pgconnector.Kerberos{Krb5Conf: lab.kdc.Krb5Conf, CCache: tc.name})
			prefer := sql.OpenDB(newConnector(t, aliceDSN(srv, "localhost", "sslmode=disable"), kerberos))
			defer prefer.Close()
			if got := transport(t, prefer); got != "plain" {
				t.Fatalf("gssencmode=prefer: %s, want plain", got)
			}
			require := sql.OpenDB(newConnector(t, aliceDSN(srv, "localhost", "gssencmode=require"), kerberos))
			defer require.Close()
			err := require.Ping()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("gssencmode=require: %v, want an error naming %s", err, tc.want)
			}
			t.Log(err)
		})
	}
}

// kcmConnections counts this process's sockets whose peer is the process pid (SO_PEERCRED):
// its connections to a KCM daemon.
func kcmConnections(t *testing.T, pid int) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		link, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil || !strings.HasPrefix(link, "socket:") {
			continue
		}
		fd, _ := strconv.Atoi(e.Name())
		if cred, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil && int(cred.Pid) == pid {
			n++
		}
	}
	return n
}

// The connection to the KCM daemon goes with the connector: DB.Close closes it, and
// sql.Open("pgconnector")'s driver, asked for a connection directly, leaves none behind.
func TestCredentialCacheKCMClosed(t *testing.T) {
	lab := newKerberosLab(t)
	srv := lab.server(t, true, lab.gssHBA())
	kcm := harness.StartKCMT(t)
	conf := lab.kdc.Krb5Conf + ":" + kcm.Krb5Conf
	if err := kcm.Kinit(lab.kdc, "KCM:", "alice", 0); err != nil {
		t.Fatal(err)
	}
	dsn := aliceDSN(srv, "localhost", "gssencmode=require")
	if n := kcmConnections(t, kcm.Pid()); n != 0 {
		t.Fatalf("%d connections to the KCM daemon before any connector", n)
	}
	db := sql.OpenDB(newConnector(t, dsn, pgconnector.WithKerberos(pgconnector.Kerberos{Krb5Conf: conf, CCache: "KCM:"})))
	if got := transport(t, db); got != "gss" {
		db.Close()
		t.Fatalf("%s, want gss", got)
	}
	if n := kcmConnections(t, kcm.Pid()); n != 1 {
		t.Errorf("%d connections to the KCM daemon with the pool open, want 1", n)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if n := kcmConnections(t, kcm.Pid()); n != 0 {
		t.Errorf("%d connections to the KCM daemon after DB.Close", n)
	}

	t.Setenv("KRB5_CONFIG", conf)
	t.Setenv("KRB5CCNAME", "KCM:")
	conn, err := pgconnector.Driver{}.Open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	if n := kcmConnections(t, kcm.Pid()); n != 0 {
		t.Errorf("%d connections to the KCM daemon after Driver.Open", n)
	}
	if err := conn.Close(); err != nil {
		t.Fatal(err)
	}
	if n := kcmConnections(t, kcm.Pid()); n != 0 {
		t.Errorf("%d connections to the KCM daemon after the connection's Close", n)
	}
}
