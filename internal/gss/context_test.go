package gss

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jcmturner/gofork/encoding/asn1"
	"github.com/jcmturner/gokrb5/v8/asn1tools"
	"github.com/jcmturner/gokrb5/v8/client"
	"github.com/jcmturner/gokrb5/v8/config"
	"github.com/jcmturner/gokrb5/v8/credentials"
	"github.com/jcmturner/gokrb5/v8/crypto"
	"github.com/jcmturner/gokrb5/v8/gssapi"
	"github.com/jcmturner/gokrb5/v8/iana"
	"github.com/jcmturner/gokrb5/v8/iana/asnAppTag"
	"github.com/jcmturner/gokrb5/v8/iana/chksumtype"
	"github.com/jcmturner/gokrb5/v8/iana/errorcode"
	"github.com/jcmturner/gokrb5/v8/iana/flags"
	"github.com/jcmturner/gokrb5/v8/iana/keyusage"
	"github.com/jcmturner/gokrb5/v8/iana/msgtype"
	"github.com/jcmturner/gokrb5/v8/iana/nametype"
	"github.com/jcmturner/gokrb5/v8/keytab"
	"github.com/jcmturner/gokrb5/v8/messages"
	"github.com/jcmturner/gokrb5/v8/service"
	"github.com/jcmturner/gokrb5/v8/spnego"
	"github.com/jcmturner/gokrb5/v8/test/testdata"
	"github.com/jcmturner/gokrb5/v8/types"
)

const (
	testRealm = "EXAMPLE.COM"
	testSPN   = "postgres/db.example.com"
)

// A krb5.conf whose only KDC is a closed loopback port, so that a ticket
// missing from the cache fails at once instead of reaching any network.
const testKrb5Conf = `[libdefaults]
  default_realm = EXAMPLE.COM
  dns_lookup_kdc = false
  dns_lookup_realm = false
  udp_preference_limit = 1
[realms]
  EXAMPLE.COM = {
    kdc = 127.0.0.1:1
  }
`

func testConfig(t testing.TB) *config.Config {
	t.Helper()
	cfg, err := config.NewFromString(testKrb5Conf)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// fixture plays the KDC and the acceptor: it holds the service keytab and
// gives the client a credential cache with a TGT and a service ticket, so
// that GetServiceTicket is answered from gokrb5's cache.
type fixture struct {
	kt         *keytab.Keytab
	cl         *client.Client
	sessionKey types.EncryptionKey
}

var testCName = types.PrincipalName{NameType: nametype.KRB_NT_PRINCIPAL, NameString: []string{"alice"}}

// makeTicket encrypts a service ticket with sessionKey for the service key in
// kt of enctype svcEtype. (messages.NewTicket generates the session key
// itself, and a 24-byte one for aes256-cts-hmac-sha384-192.)
func makeTicket(t testing.TB, kt *keytab.Keytab, sname types.PrincipalName, sessionKey types.EncryptionKey, svcEtype int32) messages.Ticket {
	t.Helper()
	now := time.Now().UTC()
	etp := messages.EncTicketPart{
		Flags:     types.NewKrbFlags(),
		Key:       sessionKey,
		CRealm:    testRealm,
		CName:     testCName,
		Transited: messages.TransitedEncoding{Contents: []byte{}},
		AuthTime:  now,
		StartTime: now.Add(-time.Minute),
		EndTime:   now.Add(time.Hour),
		RenewTill: now.Add(time.Hour),
	}
	b, err := asn1.Marshal(etp)
	if err != nil {
		t.Fatal(err)
	}
	b = asn1tools.AddASNAppTag(b, asnAppTag.EncTicketPart)
	skey, kvno, err := kt.GetEncryptionKey(sname, testRealm, 0, svcEtype)
	if err != nil {
		t.Fatal(err)
	}
	ed, err := crypto.GetEncryptedData(b, skey, keyusage.KDC_REP_TICKET, kvno)
	if err != nil {
		t.Fatal(err)
	}
	return messages.Ticket{TktVNO: iana.PVNO, Realm: testRealm, SName: sname, EncPart: ed}
}

func newFixture(t testing.TB, sessionEtype int32) *fixture {
	t.Helper()
	kt := keytab.New()
	for _, e := range allEnctypes {
		if err := kt.AddEntry(testSPN, testRealm, "service password", time.Now().Add(-time.Hour), 1, e); err != nil {
			t.Fatal(err)
		}
	}
	sessionKey := randomKey(t, sessionEtype)
	sname := types.NewPrincipalName(nametype.KRB_NT_SRV_INST, testSPN)
	tkt := makeTicket(t, kt, sname, sessionKey, sessionEtype)
	tktBytes, err := tkt.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	krbtgt := types.PrincipalName{NameType: nametype.KRB_NT_SRV_INST, NameString: []string{"krbtgt", testRealm}}
	tgt := messages.Ticket{TktVNO: iana.PVNO, Realm: testRealm, SName: krbtgt,
		EncPart: types.EncryptedData{EType: 18, KVNO: 1, Cipher: randomBytes(t, 80)}}
	tgtBytes, err := tgt.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	cred := func(server types.PrincipalName, key types.EncryptionKey, tkt []byte) *credentials.Credential {
		c := &credentials.Credential{Key: key, AuthTime: now, StartTime: now.Add(-time.Minute),
			EndTime: now.Add(time.Hour), RenewTill: now.Add(time.Hour), Ticket: tkt}
		c.Client.Realm, c.Client.PrincipalName = testRealm, testCName
		c.Server.Realm, c.Server.PrincipalName = testRealm, server
		return c
	}
	cc := &credentials.CCache{Version: 4}
	cc.DefaultPrincipal.Realm = testRealm
	cc.DefaultPrincipal.PrincipalName = testCName
	cc.Credentials = []*credentials.Credential{
		cred(krbtgt, randomKey(t, 18), tgtBytes),
		cred(sname, sessionKey, tktBytes),
	}
	cl, err := client.NewFromCCache(cc, testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{kt: kt, cl: cl, sessionKey: sessionKey}
}

// accept parses and verifies an AP-REQ token the way a gokrb5 service does,
// independently of this package's framing code, and checks what RFC 4121
// requires of the authenticator.
func (f *fixture) accept(t testing.TB, tok []byte) messages.APReq {
	t.Helper()
	var k spnego.KRB5Token
	if err := k.Unmarshal(tok); err != nil {
		t.Fatalf("AP-REQ token does not parse as a KRB5 mech token: %v", err)
	}
	if !k.IsAPReq() {
		t.Fatal("initiator token is not an AP-REQ")
	}
	settings := service.NewSettings(f.kt, service.DecodePAC(false))
	ok, creds, err := service.VerifyAPREQ(&k.APReq, settings)
	if err != nil || !ok {
		t.Fatalf("VerifyAPREQ: %v, %v", ok, err)
	}
	if got := creds.CName().PrincipalNameString(); got != "alice" {
		t.Errorf("client principal %q", got)
	}
	if !types.IsFlagSet(&k.APReq.APOptions, flags.APOptionMutualRequired) {
		t.Error("AP-REQ without mutual-required")
	}
	a := k.APReq.Authenticator
	if a.Cksum.CksumType != chksumtype.GSSAPI || len(a.Cksum.Checksum) != 24 {
		t.Fatalf("authenticator checksum type %d, %d bytes; want 0x8003, 24", a.Cksum.CksumType, len(a.Cksum.Checksum))
	}
	c := a.Cksum.Checksum
	if binary.LittleEndian.Uint32(c[0:4]) != 16 || !bytes.Equal(c[4:20], make([]byte, 16)) {
		t.Errorf("checksum Lgth/Bnd % x", c[:20])
	}
	// MUTUAL 2 | REPLAY 4 | SEQUENCE 8 | CONF 16 | INTEG 32, no DELEG.
	if fl := binary.LittleEndian.Uint32(c[20:24]); fl != 0x3E {
		t.Errorf("checksum flags %#x, want 0x3e", fl)
	}
	sk := k.APReq.Ticket.DecryptedEncPart.Key
	if a.SubKey.KeyType != sk.KeyType || len(a.SubKey.KeyValue) != len(sk.KeyValue) {
		t.Errorf("initiator subkey %s/%d bytes, session key %s/%d bytes",
			EnctypeName(a.SubKey.KeyType), len(a.SubKey.KeyValue), EnctypeName(sk.KeyType), len(sk.KeyValue))
	}
	if bytes.Equal(a.SubKey.KeyValue, sk.KeyValue) {
		t.Error("initiator subkey equals the session key")
	}
	if a.SeqNumber < 0 || a.SeqNumber > math.MaxUint32 {
		t.Errorf("authenticator sequence number %d", a.SeqNumber)
	}
	return k.APReq
}

// apRepOpts describes the AP-REP the test acceptor sends.
type apRepOpts struct {
	key      types.EncryptionKey  // encrypts the EncAPRepPart
	usage    uint32               // key usage, AP_REP_ENCPART unless set
	ctime    time.Time            // echoed authenticator time
	cusec    int                  // echoed authenticator microseconds
	subkey   *types.EncryptionKey // acceptor subkey, or none
	seq      int64                // acceptor sequence number
	etype    int32                // overrides EncPart.EType if non-zero
	truncate int                  // cut the EncPart cipher to this length if non-zero
}

// makeAPRep builds a framed AP-REP token. gokrb5 has no AP-REP or
// EncAPRepPart Marshal, so it is encoded here with gokrb5's ASN.1 fork.
func makeAPRep(t testing.TB, o apRepOpts) []byte {
	t.Helper()
	enc := messages.EncAPRepPart{CTime: o.ctime, Cusec: o.cusec, SequenceNumber: o.seq}
	if o.subkey != nil {
		enc.Subkey = *o.subkey
	}
	b, err := asn1.Marshal(enc)
	if err != nil {
		t.Fatal(err)
	}
	b = asn1tools.AddASNAppTag(b, asnAppTag.EncAPRepPart)
	usage := o.usage
	if usage == 0 {
		usage = keyusage.AP_REP_ENCPART
	}
	ed, err := crypto.GetEncryptedData(b, o.key, usage, 0)
	if err != nil {
		t.Fatal(err)
	}
	if o.etype != 0 {
		ed.EType = o.etype
	}
	if o.truncate != 0 {
		ed.Cipher = ed.Cipher[:o.truncate]
	}
	rep := messages.APRep{PVNO: iana.PVNO, MsgType: msgtype.KRB_AP_REP, EncPart: ed}
	rb, err := asn1.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	rb = asn1tools.AddASNAppTag(rb, asnAppTag.APREP)
	return frameToken(tokAPRep, rb)
}

func makeKRBError(t testing.TB, code int32, etext string) []byte {
	t.Helper()
	ke := messages.NewKRBError(types.NewPrincipalName(nametype.KRB_NT_SRV_INST, testSPN), testRealm, code, etext)
	b, err := ke.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return frameToken(tokKRBError, b)
}

// start runs the first Step and the test acceptor's verification.
func start(t testing.TB, f *fixture) (*Initiator, messages.APReq) {
	t.Helper()
	ini, err := NewInitiator(f.cl, testSPN, false)
	if err != nil {
		t.Fatal(err)
	}
	if ini.Enctype() != 0 {
		t.Errorf("Enctype before Step = %d, want 0", ini.Enctype())
	}
	tok, done, err := ini.Step(nil)
	if err != nil || done || len(tok) == 0 {
		t.Fatalf("first Step: %d bytes, done=%t, %v", len(tok), done, err)
	}
	return ini, f.accept(t, tok)
}

// goodReply returns the options of a correct AP-REP for apreq.
func goodReply(apreq messages.APReq, subkey *types.EncryptionKey, seq int64) apRepOpts {
	return apRepOpts{key: apreq.Ticket.DecryptedEncPart.Key, ctime: apreq.Authenticator.CTime,
		cusec: apreq.Authenticator.Cusec, subkey: subkey, seq: seq}
}

func TestInitiatorExchange(t *testing.T) {
	for _, sessionEtype := range allEnctypes {
		for _, subEtype := range append([]int32{0}, allEnctypes...) { // 0: no acceptor subkey
			name := fmt.Sprintf("session=%s/acceptor-subkey=%s", EnctypeName(sessionEtype), EnctypeName(subEtype))
			t.Run(name, func(t *testing.T) {
				f := newFixture(t, sessionEtype)
				ini, apreq := start(t, f)
				if ini.Enctype() != sessionEtype {
					t.Errorf("Enctype after the AP-REQ = %d, want %d", ini.Enctype(), sessionEtype)
				}
				if _, err := ini.Wrapper(); err == nil {
					t.Error("Wrapper before the AP-REP succeeded")
				}
				var sub *types.EncryptionKey
				if subEtype != 0 {
					k := randomKey(t, subEtype)
					sub = &k
				}
				const accSeq = 0x1234_5678
				out, done, err := ini.Step(makeAPRep(t, goodReply(apreq, sub, accSeq)))
				if err != nil || !done || out != nil {
					t.Fatalf("second Step: %v, done=%t, %d bytes", err, done, len(out))
				}
				// The acceptor side, from what the acceptor learnt itself.
				accKey, flag, wantEnctype := apreq.Authenticator.SubKey, false, sessionEtype
				if sub != nil {
					accKey, flag, wantEnctype = *sub, true, subEtype
				}
				if ini.Enctype() != wantEnctype {
					t.Errorf("Enctype = %d, want %d", ini.Enctype(), wantEnctype)
				}
				acc, err := NewWrapper(accKey, false, flag, accSeq, uint64(apreq.Authenticator.SeqNumber))
				if err != nil {
					t.Fatal(err)
				}
				w, err := ini.Wrapper()
				if err != nil {
					t.Fatal(err)
				}
				for k := range 3 {
					msg := []byte(fmt.Sprintf("query %d", k))
					tok := mustWrap(t, w, msg)
					if got, err := acc.Unwrap(nil, tok); err != nil || !bytes.Equal(got, msg) {
						t.Fatalf("initiator->acceptor %d: %q, %v", k, got, err)
					}
					if binary.BigEndian.Uint64(tok[8:16]) != uint64(apreq.Authenticator.SeqNumber)+uint64(k) {
						t.Errorf("initiator token %d has sequence number %d", k, binary.BigEndian.Uint64(tok[8:16]))
					}
					if tok[2]&FlagAcceptorSubkey != 0 != flag {
						t.Errorf("AcceptorSubkey flag %t, want %t", tok[2]&FlagAcceptorSubkey != 0, flag)
					}
					reply := []byte(fmt.Sprintf("row %d", k))
					if got, err := w.Unwrap(nil, mustWrap(t, acc, reply)); err != nil || !bytes.Equal(got, reply) {
						t.Fatalf("acceptor->initiator %d: %q, %v", k, got, err)
					}
				}
				// Established: no more tokens.
				if _, done, err := ini.Step(nil); err != nil || !done {
					t.Errorf("Step(nil) after done: %t, %v", done, err)
				}
				if _, _, err := ini.Step([]byte{1}); err == nil {
					t.Error("Step with a token after done succeeded")
				}
				// Printing shows no key material.
				s := fmt.Sprintf("%v %+v %#v %v", ini, ini, ini, w)
				for _, k := range [][]byte{apreq.Authenticator.SubKey.KeyValue, apreq.Ticket.DecryptedEncPart.Key.KeyValue, accKey.KeyValue} {
					if strings.Contains(s, hex.EncodeToString(k)) || strings.Contains(s, fmt.Sprint(k)) {
						t.Fatalf("key material printed: %s", s)
					}
				}
			})
		}
	}
}

// Sequence numbers that old MIT releases encoded as negative 32-bit
// integers are taken modulo 2^32.
func TestInitiatorNegativeSequenceNumber(t *testing.T) {
	f := newFixture(t, 18)
	ini, apreq := start(t, f)
	sub := randomKey(t, 18)
	if _, _, err := ini.Step(makeAPRep(t, goodReply(apreq, &sub, -5))); err != nil {
		t.Fatal(err)
	}
	w, err := ini.Wrapper()
	if err != nil {
		t.Fatal(err)
	}
	acc, err := NewWrapper(sub, false, true, 1<<32-5, uint64(apreq.Authenticator.SeqNumber))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := w.Unwrap(nil, mustWrap(t, acc, []byte("x"))); err != nil || string(got) != "x" {
		t.Fatalf("%q, %v", got, err)
	}
}

func TestInitiatorRejectsBadReplies(t *testing.T) {
	f := newFixture(t, 18)
	rc4 := types.EncryptionKey{KeyType: 23, KeyValue: make([]byte, 16)}
	cases := []struct {
		name  string
		reply func(apreq messages.APReq) []byte
		want  string
	}{
		{"wrong ctime", func(a messages.APReq) []byte {
			o := goodReply(a, nil, 1)
			o.ctime = o.ctime.Add(time.Second)
			return makeAPRep(t, o)
		}, "mutual authentication failed"},
		{"wrong cusec", func(a messages.APReq) []byte {
			o := goodReply(a, nil, 1)
			o.cusec = (o.cusec + 1) % 1000000
			return makeAPRep(t, o)
		}, "mutual authentication failed"},
		{"encrypted with a wrong key", func(a messages.APReq) []byte {
			o := goodReply(a, nil, 1)
			o.key = randomKey(t, 18)
			return makeAPRep(t, o)
		}, "does not decrypt"},
		{"encrypted with the authenticator key usage", func(a messages.APReq) []byte {
			o := goodReply(a, nil, 1)
			o.usage = keyusage.AP_REQ_AUTHENTICATOR
			return makeAPRep(t, o)
		}, "does not decrypt"},
		{"encrypted with the initiator subkey", func(a messages.APReq) []byte {
			o := goodReply(a, nil, 1)
			o.key = a.Authenticator.SubKey
			return makeAPRep(t, o)
		}, "does not decrypt"},
		{"EncPart enctype mismatch", func(a messages.APReq) []byte {
			o := goodReply(a, nil, 1)
			o.etype = 17
			return makeAPRep(t, o)
		}, "aes128-cts-hmac-sha1-96"},
		{"EncPart cipher shorter than a checksum", func(a messages.APReq) []byte {
			o := goodReply(a, nil, 1)
			o.truncate = 5
			return makeAPRep(t, o)
		}, "too short"},
		{"EncPart cipher cut", func(a messages.APReq) []byte {
			o := goodReply(a, nil, 1)
			o.truncate = 40
			return makeAPRep(t, o)
		}, "does not decrypt"},
		{"rc4 acceptor subkey", func(a messages.APReq) []byte {
			return makeAPRep(t, goodReply(a, &rc4, 1))
		}, "rc4-hmac"},
		{"short acceptor subkey", func(a messages.APReq) []byte {
			k := types.EncryptionKey{KeyType: 18, KeyValue: make([]byte, 16)}
			return makeAPRep(t, goodReply(a, &k, 1))
		}, "16 bytes"},
		{"sequence number beyond 32 bits", func(a messages.APReq) []byte {
			return makeAPRep(t, goodReply(a, nil, 1<<40))
		}, "out of range"},
		{"KRB-ERROR", func(messages.APReq) []byte {
			return makeKRBError(t, errorcode.KRB_AP_ERR_SKEW, "unauthenticated e-text")
		}, "KRB_AP_ERR_SKEW"},
		{"AP-REQ echoed back", func(messages.APReq) []byte {
			ini, _ := NewInitiator(f.cl, testSPN, false)
			tok, _, _ := ini.Step(nil)
			return tok
		}, "unexpected acceptor token ID 0100"},
		{"SPNEGO OID", func(a messages.APReq) []byte {
			tok := makeAPRep(t, goodReply(a, nil, 1))
			spnegoOID, _ := asn1.Marshal(gssapi.OIDSPNEGO.OID())
			return asn1tools.AddASNAppTag(append(spnegoOID, tok[2+len(krb5OID):]...), 0)
		}, "not for the Kerberos V5 mechanism"},
		{"length longer than the token", func(a messages.APReq) []byte {
			tok := makeAPRep(t, goodReply(a, nil, 1))
			return tok[:len(tok)-1]
		}, "does not match"},
		{"trailing garbage", func(a messages.APReq) []byte {
			return append(makeAPRep(t, goodReply(a, nil, 1)), 0)
		}, "does not match"},
		{"raw AP-REP without framing", func(a messages.APReq) []byte {
			tok := makeAPRep(t, goodReply(a, nil, 1))
			_, msg, _ := parseToken(tok)
			return msg
		}, "InitialContextToken"},
		{"garbage", func(messages.APReq) []byte { return []byte("garbage, not a token") }, "InitialContextToken"},
		{"framing only", func(messages.APReq) []byte { return []byte{0x60, 0x00} }, "Kerberos V5"},
		{"no TOK_ID", func(messages.APReq) []byte { return asn1tools.AddASNAppTag(bytes.Clone(krb5OID), 0) }, "TOK_ID"},
		{"malformed AP-REP", func(messages.APReq) []byte { return frameToken(tokAPRep, []byte{0x6f, 0x03, 1, 2, 3}) }, "malformed AP-REP"},
		{"malformed KRB-ERROR", func(messages.APReq) []byte { return frameToken(tokKRBError, []byte{0x7e, 0x00}) }, "malformed KRB-ERROR"},
		{"KRB-ERROR under the AP-REP token ID", func(messages.APReq) []byte {
			ke := messages.NewKRBError(types.NewPrincipalName(nametype.KRB_NT_SRV_INST, testSPN), testRealm,
				errorcode.KRB_AP_ERR_BADMATCH, "unauthenticated e-text")
			b, err := ke.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			return frameToken(tokAPRep, b)
		}, "malformed AP-REP"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ini, apreq := start(t, f)
			reply := c.reply(apreq)
			out, done, err := ini.Step(reply)
			if err == nil || done || out != nil {
				t.Fatalf("Step accepted the reply: done=%t, %v", done, err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not mention %q", err, c.want)
			}
			if strings.Contains(err.Error(), "e-text") || (len(reply) >= 8 && strings.Contains(err.Error(), hex.EncodeToString(reply[len(reply)-8:]))) {
				t.Errorf("error repeats the reply: %q", err)
			}
			if _, err2 := ini.Wrapper(); err2 == nil {
				t.Error("Wrapper after a failed Step succeeded")
			}
			// The failure is final, even for a correct reply afterwards.
			if _, _, err2 := ini.Step(makeAPRep(t, goodReply(apreq, nil, 1))); err2 == nil {
				t.Error("Step after a failure succeeded")
			}
		})
	}
}

func TestInitiatorKerberosErrorValue(t *testing.T) {
	f := newFixture(t, 17)
	ini, _ := start(t, f)
	_, _, err := ini.Step(makeKRBError(t, errorcode.KRB_AP_ERR_MODIFIED, "secret-looking text"))
	var ke *KerberosError
	if !errors.As(err, &ke) || ke.Code != errorcode.KRB_AP_ERR_MODIFIED {
		t.Fatalf("error %v, want a *KerberosError with code 41", err)
	}
	if !strings.Contains(err.Error(), "KRB_AP_ERR_MODIFIED") || strings.Contains(err.Error(), "secret-looking") {
		t.Errorf("error text %q", err)
	}
}

// Every prefix of a valid AP-REP is an error, and so is every single-bit
// flip, except in the length octets of explicit ASN.1 tags, which gokrb5's
// ASN.1 decoder does not check: such a flip must leave the parsed reply, and
// so the established context, unchanged. Never a panic.
func TestInitiatorRejectsDamagedAPRep(t *testing.T) {
	f := newFixture(t, 18)
	sub := randomKey(t, 18)
	// The AP-REP's length depends on cusec, a variable-length INTEGER: use
	// initiators whose cusec takes 3 bytes (97% of them), so that every
	// reply has the same layout.
	startLong := func() (*Initiator, messages.APReq) {
		for try := 0; try < 500; try++ {
			ini, a := start(t, f)
			if a.Authenticator.Cusec >= 1<<15 {
				return ini, a
			}
		}
		t.Fatal("no authenticator with cusec >= 32768")
		return nil, messages.APReq{}
	}
	ini, apreq := startLong()
	good := makeAPRep(t, goodReply(apreq, &sub, 99))
	for l := 0; l < len(good); l++ {
		ini, _ := start(t, f)
		if _, _, err := ini.Step(good[:l]); err == nil {
			t.Fatalf("prefix of %d bytes accepted", l)
		}
	}
	if _, _, err := ini.Step(good); err != nil {
		t.Fatal(err)
	}
	accepted := 0
	for bit := 0; bit < len(good)*8; bit++ {
		// Each reply must answer its own initiator's authenticator.
		ini, a := startLong()
		tok := makeAPRep(t, goodReply(a, &sub, 99))
		if len(tok) != len(good) {
			t.Fatalf("AP-REP length changed: %d vs %d", len(tok), len(good))
		}
		orig := tok[bit/8]
		tok[bit/8] ^= 1 << (bit % 8)
		if _, _, err := ini.Step(tok); err != nil {
			continue
		}
		accepted++
		if orig >= 0x80 || bit/8 < 2+len(krb5OID)+2 {
			t.Fatalf("AP-REP with bit %d (byte %#02x at %d) flipped accepted", bit, orig, bit/8)
		}
		w, err := ini.Wrapper()
		if err != nil {
			t.Fatal(err)
		}
		acc, err := NewWrapper(sub, false, true, 99, uint64(a.Authenticator.SeqNumber))
		if err != nil {
			t.Fatal(err)
		}
		if got, err := w.Unwrap(nil, mustWrap(t, acc, []byte("same context"))); err != nil || string(got) != "same context" {
			t.Fatalf("bit %d: accepted flip changed the context: %v", bit, err)
		}
		if _, err := acc.Unwrap(nil, mustWrap(t, w, []byte("back"))); err != nil {
			t.Fatalf("bit %d: accepted flip changed the context: %v", bit, err)
		}
	}
	t.Logf("%d of %d bit flips hit unchecked ASN.1 length octets and left the reply unchanged", accepted, len(good)*8)
}

func TestNewInitiatorRejects(t *testing.T) {
	f := newFixture(t, 18)
	if _, err := NewInitiator(nil, testSPN, false); err == nil {
		t.Error("nil client accepted")
	}
	for _, spn := range []string{"", "postgres", "/host", "postgres/", "postgres/host@REALM", "a\x00/b"} {
		if _, err := NewInitiator(f.cl, spn, false); err == nil {
			t.Errorf("SPN %q accepted", spn)
		}
	}
	noCfg := *f.cl
	noCfg.Config = nil
	if _, err := NewInitiator(&noCfg, testSPN, false); err == nil {
		t.Error("client without configuration accepted")
	}
	ini, err := NewInitiator(f.cl, testSPN, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ini.Step([]byte("unexpected")); err == nil {
		t.Error("first Step with an input token succeeded")
	}
	ini, _ = NewInitiator(f.cl, testSPN, false)
	ini.Step(nil)
	if _, _, err := ini.Step(nil); err == nil {
		t.Error("second Step without the AP-REP succeeded")
	}
}

// A service whose ticket is not cached makes gokrb5 ask the KDC; the test
// configuration's KDC is a closed port, so that fails, with an error naming
// the service.
func TestInitiatorTicketFailure(t *testing.T) {
	f := newFixture(t, 18)
	ini, err := NewInitiator(f.cl, "postgres/other.example.com", false)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = ini.Step(nil)
	if err == nil || !strings.Contains(err.Error(), "postgres/other.example.com") {
		t.Fatalf("Step without a ticket: %v", err)
	}
}

// A session key of an enctype the wrapper cannot use fails at the first
// Step, naming it.
func TestInitiatorUnsupportedSessionKey(t *testing.T) {
	f := newFixture(t, 18)
	cc := &credentials.CCache{Version: 4}
	cc.DefaultPrincipal.Realm = testRealm
	cc.DefaultPrincipal.PrincipalName = testCName
	sname := types.NewPrincipalName(nametype.KRB_NT_SRV_INST, testSPN)
	tkt := makeTicket(t, f.kt, sname, types.EncryptionKey{KeyType: 23, KeyValue: make([]byte, 16)}, 18)
	tb, _ := tkt.Marshal()
	krbtgt := types.PrincipalName{NameType: nametype.KRB_NT_SRV_INST, NameString: []string{"krbtgt", testRealm}}
	tgt := messages.Ticket{TktVNO: 5, Realm: testRealm, SName: krbtgt, EncPart: types.EncryptedData{EType: 18, Cipher: []byte{1}}}
	gb, _ := tgt.Marshal()
	now := time.Now().UTC()
	for _, e := range []struct {
		server types.PrincipalName
		tkt    []byte
		key    types.EncryptionKey
	}{{krbtgt, gb, randomKey(t, 18)}, {sname, tb, types.EncryptionKey{KeyType: 23, KeyValue: make([]byte, 16)}}} {
		c := &credentials.Credential{Key: e.key, StartTime: now.Add(-time.Minute), EndTime: now.Add(time.Hour), Ticket: e.tkt}
		c.Server.Realm, c.Server.PrincipalName = testRealm, e.server
		cc.Credentials = append(cc.Credentials, c)
	}
	cl, err := client.NewFromCCache(cc, testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	ini, err := NewInitiator(cl, testSPN, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ini.Step(nil); err == nil || !strings.Contains(err.Error(), "rc4-hmac") {
		t.Fatalf("rc4 session key: %v", err)
	}
}

func TestCredentials(t *testing.T) {
	cfg := testConfig(t)
	// A real MIT credential cache from gokrb5's test data.
	raw, err := hex.DecodeString(testdata.CCACHE_TEST)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "krb5cc")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := CredentialsFromCCache(path, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Principal(); got != "testuser1@TEST.GOKRB5" {
		t.Errorf("Principal() = %q", got)
	}
	if s := fmt.Sprintf("%v %#v", c, c); !strings.Contains(s, "testuser1@TEST.GOKRB5") || strings.Contains(s, "Key") {
		t.Errorf("String() = %q", s)
	}
	if c.Client() == nil || c.Config() != cfg {
		t.Error("accessors")
	}
	if _, err := c.NewInitiator(testSPN, false); err != nil {
		t.Error(err)
	}
	if _, err := CredentialsFromCCache(filepath.Join(t.TempDir(), "missing"), cfg); err == nil {
		t.Error("missing ccache accepted")
	}
	if err := os.WriteFile(path, []byte("not a ccache"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := CredentialsFromCCache(path, cfg); err == nil {
		t.Error("garbage ccache accepted")
	}
	if _, err := CredentialsFromCCache(path, nil); err == nil {
		t.Error("nil config accepted")
	}

	kt := keytab.New()
	if err := kt.AddEntry("alice", testRealm, "pw", time.Now(), 1, 18); err != nil {
		t.Fatal(err)
	}
	kc, err := CredentialsFromKeytab("alice", testRealm, kt, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := kc.Principal(); got != "alice@EXAMPLE.COM" {
		t.Errorf("keytab Principal() = %q", got)
	}
	if _, err := CredentialsFromKeytab("alice", testRealm, nil, cfg); err == nil {
		t.Error("nil keytab accepted")
	}
	if _, err := CredentialsFromKeytab("", testRealm, kt, cfg); err == nil {
		t.Error("empty user accepted")
	}
	if _, err := NewCredentials(nil, cfg); err == nil {
		t.Error("nil client accepted")
	}
	if _, err := NewCredentials(kc.Client(), nil); err == nil {
		t.Error("nil config accepted")
	}
}

func FuzzInitiatorStep(f *testing.F) {
	fx := newFixture(f, 18)
	_, apreq := start(f, fx)
	sub := randomKey(f, 18)
	good := makeAPRep(f, goodReply(apreq, &sub, 7))
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add(makeKRBError(f, errorcode.KRB_AP_ERR_SKEW, "x"))
	f.Add([]byte{0x60, 0x0b, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x12, 0x01, 0x02, 0x02, 0x02, 0x00})
	f.Fuzz(func(t *testing.T, tok []byte) {
		ini, err := NewInitiator(fx.cl, testSPN, false)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := ini.Step(nil); err != nil {
			t.Fatal(err)
		}
		out, done, err := ini.Step(tok)
		if err == nil && (!done || out != nil) {
			t.Fatalf("success without done: %t, %d bytes", done, len(out))
		}
		if err != nil {
			if _, werr := ini.Wrapper(); werr == nil {
				t.Fatal("Wrapper after a failed Step")
			}
		}
	})
}
