package gss

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/jcmturner/gofork/encoding/asn1"
	"github.com/jcmturner/gokrb5/v8/config"
	"github.com/jcmturner/gokrb5/v8/crypto"
	"github.com/jcmturner/gokrb5/v8/iana/chksumtype"
	"github.com/jcmturner/gokrb5/v8/iana/flags"
	"github.com/jcmturner/gokrb5/v8/iana/keyusage"
	"github.com/jcmturner/gokrb5/v8/keytab"
	"github.com/jcmturner/gokrb5/v8/messages"
	"github.com/jcmturner/gokrb5/v8/service"
	"github.com/jcmturner/gokrb5/v8/spnego"
	"github.com/jcmturner/gokrb5/v8/types"

	"github.com/pgconnector/pgconnector/internal/harness"
)

// delegRealm is a harness KDC with alice (a forwardable and a non-forwardable ticket-granting
// ticket, her keytab), postgres/localhost, and the keytabs of the service and of krbtgt.
type delegRealm struct {
	kdc          *harness.KDC
	fwdCCache    string // forwardable TGT (kinit -f)
	plainCCache  string // not forwardable (the harness's default)
	aliceKeytab  string
	svc, krbtgt  *keytab.Keytab
	forwardConf  string // krb5.conf with forwardable = true
	missingCache string
}

func newDelegRealm(t *testing.T) *delegRealm {
	t.Helper()
	k := harness.StartKDCT(t, harness.KDCOptions{})
	if _, err := k.AddPrincipal("alice"); err != nil {
		t.Fatal(err)
	}
	if err := k.AddServicePrincipals("postgres", "localhost"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	r := &delegRealm{kdc: k, fwdCCache: filepath.Join(dir, "fwd.ccache"), plainCCache: filepath.Join(dir, "plain.ccache"),
		aliceKeytab: filepath.Join(dir, "alice.keytab"), forwardConf: filepath.Join(dir, "krb5.conf"),
		missingCache: filepath.Join(dir, "none.ccache")}
	if err := k.KinitForwardable(r.fwdCCache, "alice", 0); err != nil {
		t.Fatal(err)
	}
	if err := k.Kinit(r.plainCCache, "alice", 0); err != nil {
		t.Fatal(err)
	}
	if err := k.Keytab(r.aliceKeytab, "alice"); err != nil {
		t.Fatal(err)
	}
	if err := k.WriteKrb5Conf(r.forwardConf, harness.Krb5ConfOptions{Forwardable: true}); err != nil {
		t.Fatal(err)
	}
	load := func(name string, principal string) *keytab.Keytab {
		path := filepath.Join(dir, name)
		if err := k.Keytab(path, principal); err != nil {
			t.Fatal(err)
		}
		kt, err := keytab.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		return kt
	}
	r.svc = load("svc.keytab", "postgres/localhost")
	r.krbtgt = load("krbtgt.keytab", "krbtgt/"+k.Realm)
	return r
}

// delegSeen is what the test acceptor found in an AP-REQ.
type delegSeen struct {
	flags uint32
	cred  []byte // the KRB-CRED, nil without DELEG
	apreq messages.APReq
}

// accept is a GSS acceptor on gokrb5's service side: it verifies the AP-REQ with the service
// keytab (ticket and authenticator decrypted), reads the 0x8003 checksum strictly, and returns
// its flags and delegation.
func (r *delegRealm) accept(t *testing.T, tok []byte) delegSeen {
	t.Helper()
	var k spnego.KRB5Token
	if err := k.Unmarshal(tok); err != nil || !k.IsAPReq() {
		t.Fatalf("not an AP-REQ token: %v", err)
	}
	ok, creds, err := service.VerifyAPREQ(&k.APReq, service.NewSettings(r.svc, service.DecodePAC(false)))
	if err != nil || !ok {
		t.Fatalf("VerifyAPREQ: %v, %v", ok, err)
	}
	if got := creds.CName().PrincipalNameString(); got != "alice" {
		t.Errorf("client principal %q", got)
	}
	a := k.APReq.Authenticator
	c := a.Cksum.Checksum
	if a.Cksum.CksumType != chksumtype.GSSAPI || len(c) < 24 {
		t.Fatalf("authenticator checksum type %#x, %d bytes", a.Cksum.CksumType, len(c))
	}
	if binary.LittleEndian.Uint32(c[0:4]) != 16 || !bytes.Equal(c[4:20], make([]byte, 16)) {
		t.Errorf("checksum Lgth/Bnd % x", c[:20])
	}
	seen := delegSeen{flags: binary.LittleEndian.Uint32(c[20:24]), apreq: k.APReq}
	rest := c[24:]
	if seen.flags&^delegFlag != 0x3E {
		t.Errorf("checksum flags %#x, want 0x3e with or without DELEG", seen.flags)
	}
	if seen.flags&delegFlag == 0 {
		if len(rest) != 0 {
			t.Errorf("%d bytes after the flags without DELEG", len(rest))
		}
		return seen
	}
	if len(rest) < 4 {
		t.Fatalf("DELEG with %d bytes after the flags", len(rest))
	}
	if opt := binary.LittleEndian.Uint16(rest[0:2]); opt != 1 {
		t.Errorf("DlgOpt %d, want 1", opt)
	}
	if n := int(binary.LittleEndian.Uint16(rest[2:4])); n != len(rest)-4 || n+28 > 32767 {
		t.Fatalf("Dlgth %d, %d bytes follow", n, len(rest)-4)
	}
	seen.cred = rest[4:]
	return seen
}

// checkForwarded decodes the KRB-CRED as an acceptor does (the enc-part with the service
// ticket's session key, key usage 14), and checks the forwarded ticket against the krbtgt key:
// alice's, FORWARDED, and the KrbCredInfo consistent with it.
func (r *delegRealm) checkForwarded(t *testing.T, seen delegSeen) {
	t.Helper()
	var kc messages.KRBCred
	if err := kc.Unmarshal(seen.cred); err != nil {
		t.Fatalf("KRB-CRED does not decode: %v", err)
	}
	if kc.PVNO != 5 || kc.MsgType != 22 || len(kc.Tickets) != 1 {
		t.Fatalf("KRB-CRED pvno %d msg-type %d, %d tickets", kc.PVNO, kc.MsgType, len(kc.Tickets))
	}
	sessionKey := seen.apreq.Ticket.DecryptedEncPart.Key
	if kc.EncPart.EType != sessionKey.KeyType {
		t.Errorf("enc-part etype %d, session key %d", kc.EncPart.EType, sessionKey.KeyType)
	}
	pt, err := crypto.DecryptEncPart(kc.EncPart, sessionKey, keyusage.KRB_CRED_ENCPART)
	if err != nil {
		t.Fatalf("EncKrbCredPart does not decrypt with the session key in usage 14: %v", err)
	}
	// Realms are GeneralStrings (0x1b), not IA5Strings: prealm [1] and srealm [8].
	realm := r.kdc.Realm
	for _, tag := range []byte{0xa1, 0xa8} {
		want := append([]byte{tag, byte(len(realm) + 2), 0x1b, byte(len(realm))}, realm...)
		if !bytes.Contains(pt, want) {
			t.Errorf("EncKrbCredPart has no [%d] GeneralString %s", tag-0xa0, realm)
		}
	}
	var enc encKrbCredPart
	if _, err := asn1.UnmarshalWithParams(pt, &enc, "application,explicit,tag:29"); err != nil {
		t.Fatalf("EncKrbCredPart does not decode: %v", err)
	}
	if len(enc.TicketInfo) != 1 {
		t.Fatalf("%d KrbCredInfo", len(enc.TicketInfo))
	}
	if d := time.Since(enc.Timestamp); d < -time.Minute || d > time.Minute {
		t.Errorf("timestamp %v", enc.Timestamp)
	}
	info := enc.TicketInfo[0]
	tgtName := "krbtgt/" + realm
	if info.SName.PrincipalNameString() != tgtName || info.SRealm != realm {
		t.Errorf("KrbCredInfo names %s@%s", info.SName.PrincipalNameString(), info.SRealm)
	}
	if info.PName.PrincipalNameString() != "alice" || info.PRealm != realm {
		t.Errorf("KrbCredInfo client %s@%s", info.PName.PrincipalNameString(), info.PRealm)
	}
	if !types.IsFlagSet(&info.Flags, flags.Forwarded) || !types.IsFlagSet(&info.Flags, flags.Forwardable) {
		t.Errorf("KrbCredInfo flags % x: want FORWARDED and FORWARDABLE", info.Flags.Bytes)
	}
	tkt := kc.Tickets[0]
	if tkt.SName.PrincipalNameString() != tgtName || tkt.Realm != realm {
		t.Errorf("forwarded ticket for %s@%s", tkt.SName.PrincipalNameString(), tkt.Realm)
	}
	if err := tkt.DecryptEncPart(r.krbtgt, nil); err != nil {
		t.Fatalf("the forwarded ticket does not decrypt with the krbtgt key: %v", err)
	}
	p := tkt.DecryptedEncPart
	if p.CName.PrincipalNameString() != "alice" || p.CRealm != realm {
		t.Errorf("forwarded ticket names %s@%s", p.CName.PrincipalNameString(), p.CRealm)
	}
	if !types.IsFlagSet(&p.Flags, flags.Forwarded) {
		t.Errorf("forwarded ticket flags % x: no FORWARDED", p.Flags.Bytes)
	}
	if p.Key.KeyType != info.Key.KeyType || !bytes.Equal(p.Key.KeyValue, info.Key.KeyValue) {
		t.Error("KrbCredInfo key is not the forwarded ticket's session key")
	}
	if !p.EndTime.Equal(info.EndTime) {
		t.Errorf("KrbCredInfo endtime %v, ticket %v", info.EndTime, p.EndTime)
	}
}

// establish runs session.Establish for host against the test acceptor on a pipe, which checks
// the AP-REQ and answers with an AP-REP; it returns what the acceptor saw and the session.
func (r *delegRealm) establish(t *testing.T, c *Client) (delegSeen, *session) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, _, err := c.ServiceTicket(ctx, "localhost")
	if err != nil {
		t.Fatal(err)
	}
	client, server := net.Pipe()
	defer client.Close()
	defer server.Close()
	done := make(chan error, 1)
	go func() {
		_, err := s.Establish(ctx, client)
		done <- err
	}()
	tok, err := ReadToken(server, MaxAuthPacket)
	if err != nil {
		t.Fatal(err)
	}
	seen := r.accept(t, tok)
	if err := WriteToken(server, makeAPRep(t, goodReply(seen.apreq, nil, 7))); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Establish: %v", err)
	}
	return seen, s.(*session)
}

// gssdelegation=1 with a forwardable ticket-granting ticket from a credential cache: the
// AP-REQ carries DELEG and a KRB-CRED of a forwarded TGT that a real KDC issued, which the
// acceptor decrypts and the krbtgt key opens; the forwarded ticket is asked for once per
// credentials.
func TestDelegationForwardsTGT(t *testing.T) {
	r := newDelegRealm(t)
	c := validClient(t, ClientConfig{Krb5Conf: r.kdc.Krb5Conf, CCache: r.fwdCCache, Delegate: true})
	seen, s := r.establish(t, c)
	if seen.flags&delegFlag == 0 {
		t.Fatal("no DELEG flag with gssdelegation=1 and a forwardable TGT")
	}
	r.checkForwarded(t, seen)
	if sent, why := s.Delegation(); !sent || why != nil {
		t.Errorf("Delegation() = %v, %v", sent, why)
	}
	first := s.deleg.fwd

	// The next context reuses the forwarded ticket, and the checksum holds a fresh KRB-CRED.
	seen2, s2 := r.establish(t, c)
	r.checkForwarded(t, seen2)
	if s2.deleg.fwd != first {
		t.Error("a second forwarded TGT was fetched for the same credentials")
	}
	if bytes.Equal(seen.cred, seen2.cred) {
		t.Error("the same KRB-CRED bytes twice")
	}

	// New credentials (kinit again): a new forwarded ticket.
	time.Sleep(10 * time.Millisecond)
	if err := r.kdc.KinitForwardable(r.fwdCCache, "alice", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Credentials(context.Background()); err != nil {
		t.Fatal(err)
	}
	seen3, s3 := r.establish(t, c)
	r.checkForwarded(t, seen3)
	if s3.deleg.fwd == first {
		t.Error("the forwarded TGT of the old credentials was used after kinit")
	}
}

// gssdelegation=0 (the default) never delegates, even with a forwardable TGT.
func TestDelegationOff(t *testing.T) {
	r := newDelegRealm(t)
	c := validClient(t, ClientConfig{Krb5Conf: r.kdc.Krb5Conf, CCache: r.fwdCCache})
	seen, s := r.establish(t, c)
	if seen.flags&delegFlag != 0 || seen.cred != nil {
		t.Errorf("flags %#x, %d bytes of KRB-CRED with gssdelegation=0", seen.flags, len(seen.cred))
	}
	if sent, why := s.Delegation(); sent || why != nil || s.deleg != nil {
		t.Errorf("Delegation() = %v, %v", sent, why)
	}
}

// A TGT without the forwardable flag: no delegation, the context is established, and the
// session says why.
func TestDelegationNotForwardable(t *testing.T) {
	r := newDelegRealm(t)
	c := validClient(t, ClientConfig{Krb5Conf: r.kdc.Krb5Conf, CCache: r.plainCCache, Delegate: true})
	seen, s := r.establish(t, c)
	if seen.flags&delegFlag != 0 || seen.cred != nil {
		t.Errorf("flags %#x, %d bytes of KRB-CRED with a TGT that is not forwardable", seen.flags, len(seen.cred))
	}
	if sent, why := s.Delegation(); sent || !errors.Is(why, ErrNotForwardable) {
		t.Errorf("Delegation() = %v, %v; want false, ErrNotForwardable", sent, why)
	}
}

// Keytab credentials: the TGT comes from an AS exchange with krb5.conf's options, so it is
// forwardable only with forwardable = true.
func TestDelegationFromKeytab(t *testing.T) {
	r := newDelegRealm(t)
	t.Run("forwardable = true", func(t *testing.T) {
		c := validClient(t, ClientConfig{Krb5Conf: r.forwardConf, CCache: r.missingCache, ClientKeytab: r.aliceKeytab, Delegate: true})
		seen, s := r.establish(t, c)
		if seen.flags&delegFlag == 0 {
			_, why := s.Delegation()
			t.Fatalf("no DELEG flag: %v", why)
		}
		r.checkForwarded(t, seen)
	})
	t.Run("forwardable = false", func(t *testing.T) {
		c := validClient(t, ClientConfig{Krb5Conf: r.kdc.Krb5Conf, CCache: r.missingCache, ClientKeytab: r.aliceKeytab, Delegate: true})
		seen, s := r.establish(t, c)
		if seen.flags&delegFlag != 0 {
			t.Error("DELEG with a TGT that is not forwardable")
		}
		if _, why := s.Delegation(); !errors.Is(why, ErrNotForwardable) {
			t.Errorf("Delegation() why = %v", why)
		}
	})
}

// Credentials.NewInitiator with delegate: the initiator fetches the forwarded TGT itself.
func TestInitiatorDelegates(t *testing.T) {
	r := newDelegRealm(t)
	cfg, err := config.Load(r.kdc.Krb5Conf)
	if err != nil {
		t.Fatal(err)
	}
	creds, err := CredentialsFromCCache(r.fwdCCache, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ini, err := creds.NewInitiator("postgres/localhost", true)
	if err != nil {
		t.Fatal(err)
	}
	tok, _, err := ini.Step(nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := r.accept(t, tok)
	r.checkForwarded(t, seen)
	if sent, why := ini.Delegation(); !sent || why != nil {
		t.Errorf("Delegation() = %v, %v", sent, why)
	}
	// A bare gokrb5 client from a cache does not show its TGT: no delegation, and why.
	ini, err = NewInitiator(creds.Client(), "postgres/localhost", true)
	if err != nil {
		t.Fatal(err)
	}
	tok, _, err = ini.Step(nil)
	if err != nil {
		t.Fatal(err)
	}
	if seen := r.accept(t, tok); seen.flags&delegFlag != 0 {
		t.Error("DELEG from a bare credential-cache client")
	}
	if sent, why := ini.Delegation(); sent || why == nil {
		t.Errorf("Delegation() = %v, %v", sent, why)
	}
}

// The forwarded-TGT exchange: one for concurrent callers of one credentials generation, and a
// caller whose context ends stops waiting for a KDC that does not answer.
func TestDelegationExchange(t *testing.T) {
	r := newDelegRealm(t)
	t.Run("shared", func(t *testing.T) {
		c := validClient(t, ClientConfig{Krb5Conf: r.kdc.Krb5Conf, CCache: r.fwdCCache, Delegate: true})
		const n = 8
		got := make(chan *session, n)
		errs := make(chan error, n)
		for range n {
			go func() {
				s, _, err := c.ServiceTicket(context.Background(), "localhost")
				if err != nil {
					errs <- err
					return
				}
				got <- s.(*session)
			}()
		}
		var first *forwardedTGT
		for range n {
			select {
			case err := <-errs:
				t.Fatal(err)
			case s := <-got:
				if s.deleg == nil || s.deleg.fwd == nil {
					t.Fatalf("no forwarded TGT: %+v", s.deleg)
				}
				if first == nil {
					first = s.deleg.fwd
				} else if s.deleg.fwd != first {
					t.Error("concurrent callers got forwarded TGTs of different exchanges")
				}
			}
		}
	})
	t.Run("silent KDC", func(t *testing.T) {
		s := harness.KDCStandInT(t, harness.KDCSilent)
		conf := filepath.Join(t.TempDir(), "krb5.conf")
		if err := r.kdc.WriteKrb5Conf(conf, harness.Krb5ConfOptions{KDCs: []string{s.Addr()}}); err != nil {
			t.Fatal(err)
		}
		c := validClient(t, ClientConfig{Krb5Conf: conf, CCache: r.fwdCCache, Delegate: true})
		cur := c.cur.Load()
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, _, err := c.delegation(ctx, cur)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("delegation with a silent KDC: %v", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("returned after %v, the context ended after 300ms", d)
		}
		canceled, cancel2 := context.WithCancel(context.Background())
		cancel2()
		if _, _, err := c.delegation(canceled, cur); !errors.Is(err, context.Canceled) {
			t.Errorf("delegation with a canceled context: %v", err)
		}
	})
}
