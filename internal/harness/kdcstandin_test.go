package harness

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jcmturner/gokrb5/v8/config"
)

// kdcRequest is what a Kerberos client sends over TCP: a length, then the message (here not a
// real one: the stand-in does not parse it).
func kdcRequest() []byte {
	msg := []byte("\x6a\x03\x02\x01\x05 not really an AS-REQ")
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(msg))), msg...)
}

func TestKDCStandInSilent(t *testing.T) {
	s := KDCStandInT(t, KDCSilent)
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(kdcRequest()); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	n, err := c.Read(make([]byte, 16))
	var ne net.Error
	if n != 0 || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("Read = %d, %v; want a timeout with nothing read (no answer, connection open)", n, err)
	}
	if got := s.Accepted(); got != 1 {
		t.Errorf("Accepted() = %d, want 1", got)
	}

	u, err := net.Dial("udp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	if _, err := u.Write(kdcRequest()[4:]); err != nil {
		t.Fatal(err)
	}
	u.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if n, err := u.Read(make([]byte, 16)); n != 0 || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("UDP Read = %d, %v; want a timeout (no answer, and no ICMP port unreachable)", n, err)
	}
	if got := s.Datagrams(); got != 1 {
		t.Errorf("Datagrams() = %d, want 1", got)
	}

	// Close ends the connection it held open, and frees the port for TCP and UDP.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 16)); err == nil {
		t.Error("the connection is still open after Close")
	}
	if _, err := net.DialTimeout("tcp", s.Addr(), time.Second); err == nil {
		t.Error("the stand-in still accepts connections after Close")
	}
	p, err := net.ListenPacket("udp", s.Addr())
	if err != nil {
		t.Fatalf("the UDP port is still bound after Close: %v", err)
	}
	p.Close()
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestKDCStandInReset(t *testing.T) {
	s := KDCStandInT(t, KDCReset)
	for i := range 2 {
		c, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Write(kdcRequest())
		if err == nil {
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, err = c.Read(make([]byte, 16))
		}
		c.Close()
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("connection %d: %v, want connection reset by peer", i+1, err)
		}
	}
	if got := s.Accepted(); got != 2 {
		t.Errorf("Accepted() = %d, want 2", got)
	}
}

func TestStartKDCStandInRejectsUnknownMode(t *testing.T) {
	if s, err := StartKDCStandIn(KDCStandInMode(7)); err == nil || !strings.Contains(err.Error(), "unknown mode 7") {
		if s != nil {
			s.Close()
		}
		t.Fatalf("StartKDCStandIn(7): %v", err)
	}
}

// The krb5.conf of a stand-in names it as the realm's only KDC, as gokrb5 reads it.
func TestKDCStandInKrb5Conf(t *testing.T) {
	s := KDCStandInT(t, KDCSilent)
	path := filepath.Join(t.TempDir(), "krb5.conf")
	if err := s.WriteKrb5Conf(path, "STANDIN.TEST"); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.LibDefaults.DefaultRealm != "STANDIN.TEST" || cfg.LibDefaults.UDPPreferenceLimit != 1 {
		t.Errorf("default_realm %q, udp_preference_limit %d", cfg.LibDefaults.DefaultRealm, cfg.LibDefaults.UDPPreferenceLimit)
	}
	n, kdcs, err := cfg.GetKDCs("STANDIN.TEST", true)
	if err != nil || n != 1 || kdcs[1] != s.Addr() {
		t.Errorf("GetKDCs = %d, %v, %v; want only %s", n, kdcs, err, s.Addr())
	}
	if err := s.WriteKrb5Conf(path, "lower.case"); err == nil {
		t.Error("an invalid realm was accepted")
	}
}

// KDC.WriteKrb5Conf keeps the realm and changes its KDCs and encryption types: MIT's kinit,
// which tries the KDCs in the order listed, gets its ticket from the real KDC listed after a
// stand-in that resets, having tried the stand-in first. (With the stand-in alone, kinit goes
// on retrying for some 17 s before it gives up: not tried here.)
func TestKDCWriteKrb5ConfWithStandIn(t *testing.T) {
	k := StartKDCT(t, KDCOptions{})
	if _, err := k.AddPrincipal("alice"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	kt := filepath.Join(dir, "alice.keytab")
	if err := k.Keytab(kt, "alice"); err != nil {
		t.Fatal(err)
	}
	s := KDCStandInT(t, KDCReset)
	both := filepath.Join(dir, "both.conf")
	if err := k.WriteKrb5Conf(both, Krb5ConfOptions{KDCs: []string{s.Addr(), k.Addr()}, Enctypes: []string{EnctypeAES128SHA1}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ccache := filepath.Join(dir, "alice.ccache")
	env := append(append(CleanEnv(), k.Env(ccache)...), "KRB5_CONFIG="+both)
	if _, _, err := runKrb5(ctx, env, "", k.progs.kinit, "-k", "-t", "FILE:"+kt, k.Principal("alice")); err != nil {
		t.Fatalf("kinit with the stand-in first, then the real KDC: %v", err)
	}
	if s.Accepted() != 1 {
		t.Errorf("the stand-in listed first accepted %d connections, want 1", s.Accepted())
	}
	// The ticket's session key is of the only encryption type the client asked for.
	out, _, err := runKrb5(ctx, env, "", k.progs.klist, "-e")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "Etype (skey, tkt): "+EnctypeAES128SHA1+", ") {
		t.Errorf("klist -e:\n%s\nwant a session key of %s", out, EnctypeAES128SHA1)
	}
	b, err := os.ReadFile(both)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"default_realm = " + k.Realm, "kdc = " + s.Addr() + "\n        kdc = " + k.Addr(), "default_tgs_enctypes = " + EnctypeAES128SHA1 + "\n"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("krb5.conf lacks %q:\n%s", want, b)
		}
	}
	if err := k.WriteKrb5Conf(both, Krb5ConfOptions{KDCs: []string{"no port"}}); err == nil {
		t.Error("a KDC address without a port was accepted")
	}
	if err := k.WriteKrb5Conf(both, Krb5ConfOptions{Enctypes: []string{"des-cbc-crc"}}); err == nil {
		t.Error("an unsupported encryption type was accepted")
	}
}
