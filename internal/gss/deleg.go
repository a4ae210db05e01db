package gss

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/jcmturner/gofork/encoding/asn1"
	"github.com/jcmturner/gokrb5/v8/asn1tools"
	"github.com/jcmturner/gokrb5/v8/client"
	"github.com/jcmturner/gokrb5/v8/credentials"
	"github.com/jcmturner/gokrb5/v8/crypto"
	"github.com/jcmturner/gokrb5/v8/iana"
	"github.com/jcmturner/gokrb5/v8/iana/flags"
	"github.com/jcmturner/gokrb5/v8/iana/keyusage"
	"github.com/jcmturner/gokrb5/v8/iana/msgtype"
	"github.com/jcmturner/gokrb5/v8/iana/nametype"
	"github.com/jcmturner/gokrb5/v8/iana/patype"
	"github.com/jcmturner/gokrb5/v8/messages"
	"github.com/jcmturner/gokrb5/v8/types"

	"github.com/pgconnector/pgconnector/negotiation"
)

// Credential delegation (GSS_C_DELEG_FLAG, libpq's gssdelegation=1): the initiator puts a
// forwarded ticket-granting ticket, in a KRB-CRED message, into the authenticator checksum of
// its AP-REQ (RFC 4121 §4.1.1.1), as MIT's krb5 does (lib/gssapi/krb5/init_sec_context.c,
// make_gss_checksum; lib/krb5/krb/fwd_tgt.c, krb5_fwd_tgt_creds). As there, delegation is
// best effort: when the ticket-granting ticket is not forwardable, or the KDC gives no
// forwarded one, the AP-REQ goes without it and the context is established all the same; the
// reason is kept (Initiator.Delegation).

// ErrNotForwardable is the reason delegation is dropped when the ticket-granting ticket lacks
// the forwardable flag (kinit -f, or forwardable = true in krb5.conf, gives one that has it).
// errors.Is(ErrNotForwardable, negotiation.ErrGSSNotForwardable) holds.
var ErrNotForwardable error = notForwardable{}

type notForwardable struct{}

func (notForwardable) Error() string {
	return "gss: the ticket-granting ticket is not forwardable (kinit -f, or forwardable = true in krb5.conf)"
}

func (notForwardable) Is(target error) bool { return target == negotiation.ErrGSSNotForwardable }

// maxDelegLength is MIT's cap on the delegation part: Dlgth + 28 must fit in an int16
// (init_sec_context.c, make_gss_checksum: KRB5_INT16_MAX).
const maxDelegLength = 32767 - 28

// krbCredHook, when set (by tests only), may change the encoded KRB-CRED before it goes into
// the checksum.
var krbCredHook func([]byte) []byte

// tgtEntry is a ticket-granting ticket with what forwarding it needs. Its key is never printed.
type tgtEntry struct {
	ticket    messages.Ticket
	key       types.EncryptionKey
	flags     asn1.BitString
	endTime   time.Time
	renewTill time.Time
}

// tgtFromCCache takes the ticket-granting ticket krbtgt/REALM@REALM of the cache's default
// principal, as NewFromCCache does.
func tgtFromCCache(cred *credentials.Credential) (*tgtEntry, error) {
	var t messages.Ticket
	if err := safeUnmarshal(func() error { return t.Unmarshal(cred.Ticket) }); err != nil {
		return nil, fmt.Errorf("gss: the ticket-granting ticket in the credential cache is malformed: %v", err)
	}
	return &tgtEntry{ticket: t, key: cred.Key, flags: cred.TicketFlags, endTime: cred.EndTime, renewTill: cred.RenewTill}, nil
}

// tgtFromAS gets a ticket-granting ticket for a client with a keytab or password, with an AS
// exchange of its own: gokrb5 keeps the one it logged in with to itself. The KDC options are
// krb5.conf's (forwardable among them), as for MIT's gss_acquire_cred from a client keytab.
func tgtFromAS(cl *client.Client) (*tgtEntry, error) {
	if !cl.Credentials.HasKeytab() && !cl.Credentials.HasPassword() {
		return nil, errors.New("gss: the ticket-granting ticket of this Kerberos client cannot be read for delegation")
	}
	realm := cl.Credentials.Realm()
	req, err := messages.NewASReqForTGT(realm, cl.Config, cl.Credentials.CName())
	if err != nil {
		return nil, fmt.Errorf("gss: building an AS-REQ: %v", err)
	}
	rep, err := cl.ASExchange(realm, req, 0)
	if err != nil {
		return nil, kdcExchangeError("krbtgt/"+realm, err)
	}
	p := rep.DecryptedEncPart
	return &tgtEntry{ticket: rep.Ticket, key: p.Key, flags: p.Flags, endTime: p.EndTime, renewTill: p.RenewTill}, nil
}

// forwardedTGT is a forwarded ticket-granting ticket and what the KDC said of it.
type forwardedTGT struct {
	ticket messages.Ticket
	part   messages.EncKDCRepPart // key, flags, times, srealm, sname, caddr
	crealm string
	cname  types.PrincipalName
}

// fetchForwardedTGT asks the KDC for a forwarded copy of tgt, as krb5_fwd_tgt_creds
// (lib/krb5/krb/fwd_tgt.c): a TGS-REQ for krbtgt/REALM@REALM with the KDC options of the
// ticket's flags that carry over (FORWARDABLE, PROXIABLE, ALLOW-POSTDATE, RENEWABLE: MIT's
// KDC_TKT_COMMON_MASK) plus FORWARDED, till the ticket's end time, and no addresses. A TGT
// without the forwardable flag gives ErrNotForwardable without asking the KDC.
//
// gokrb5 has no such request: its NewTGSReq takes the options from krb5.conf and computes the
// PA-TGS-REQ checksum over that body, so the body is changed here and the PA-TGS-REQ built
// again (RFC 4120 §7.2.2: checksum of the body, key usage 6, in an authenticator under the TGT
// session key). The reply lands in gokrb5's service-ticket cache under krbtgt/REALM, where no
// service-ticket lookup of ours goes.
func fetchForwardedTGT(cl *client.Client, tgt *tgtEntry) (*forwardedTGT, error) {
	if !types.IsFlagSet(&tgt.flags, flags.Forwardable) {
		return nil, ErrNotForwardable
	}
	realm := cl.Credentials.Realm()
	cname := cl.Credentials.CName()
	sname := types.PrincipalName{NameType: nametype.KRB_NT_SRV_INST, NameString: []string{"krbtgt", realm}}
	spn := "krbtgt/" + realm
	req, err := messages.NewTGSReq(cname, realm, cl.Config, tgt.ticket, tgt.key, sname, false)
	if err != nil {
		return nil, fmt.Errorf("gss: building the TGS-REQ for a forwarded ticket: %v", err)
	}
	opts := types.NewKrbFlags()
	for _, f := range []int{flags.Forwardable, flags.Proxiable, flags.AllowPostDate, flags.Renewable} {
		if types.IsFlagSet(&tgt.flags, f) {
			types.SetFlag(&opts, f)
		}
	}
	types.SetFlag(&opts, flags.Forwarded)
	body := &req.ReqBody
	body.KDCOptions = opts
	body.Addresses = nil
	body.Till = tgt.endTime.UTC()
	body.RTime = time.Time{}
	if types.IsFlagSet(&tgt.flags, flags.Renewable) && !tgt.renewTill.IsZero() {
		body.RTime = tgt.renewTill.UTC()
	}
	bodyBytes, err := body.Marshal()
	if err != nil {
		return nil, fmt.Errorf("gss: encoding the TGS-REQ body: %v", err)
	}
	et, err := crypto.GetEtype(tgt.key.KeyType)
	if err != nil {
		return nil, fmt.Errorf("gss: ticket-granting ticket session key: %v", err)
	}
	sum, err := et.GetChecksumHash(tgt.key.KeyValue, bodyBytes, keyusage.TGS_REQ_PA_TGS_REQ_AP_REQ_AUTHENTICATOR_CHKSUM)
	if err != nil {
		return nil, fmt.Errorf("gss: checksum of the TGS-REQ body: %v", err)
	}
	auth, err := types.NewAuthenticator(tgt.ticket.Realm, cname)
	if err != nil {
		return nil, fmt.Errorf("gss: building the TGS-REQ authenticator: %v", err)
	}
	auth.Cksum = types.Checksum{CksumType: et.GetHashID(), Checksum: sum}
	apreq, err := messages.NewAPReq(tgt.ticket, tgt.key, auth)
	if err != nil {
		return nil, fmt.Errorf("gss: building the PA-TGS-REQ: %v", err)
	}
	apb, err := apreq.Marshal()
	if err != nil {
		return nil, fmt.Errorf("gss: encoding the PA-TGS-REQ: %v", err)
	}
	req.PAData = types.PADataSequence{{PADataType: patype.PA_TGS_REQ, PADataValue: apb}}
	_, rep, err := cl.TGSExchange(req, realm, tgt.ticket, tgt.key, 0)
	if err != nil {
		return nil, kdcExchangeError(spn, err)
	}
	return &forwardedTGT{ticket: rep.Ticket, part: rep.DecryptedEncPart, crealm: realm, cname: cname}, nil
}

// krbCredInfo is RFC 4120 §5.8.1 KrbCredInfo. gokrb5's own tags srealm as an IA5String, which
// is not the GeneralString (Realm) the RFC and MIT want.
type krbCredInfo struct {
	Key       types.EncryptionKey `asn1:"explicit,tag:0"`
	PRealm    string              `asn1:"generalstring,optional,explicit,tag:1"`
	PName     types.PrincipalName `asn1:"optional,explicit,tag:2"`
	Flags     asn1.BitString      `asn1:"optional,explicit,tag:3"`
	AuthTime  time.Time           `asn1:"generalized,optional,explicit,tag:4"`
	StartTime time.Time           `asn1:"generalized,optional,explicit,tag:5"`
	EndTime   time.Time           `asn1:"generalized,optional,explicit,tag:6"`
	RenewTill time.Time           `asn1:"generalized,optional,explicit,tag:7"`
	SRealm    string              `asn1:"generalstring,optional,explicit,tag:8"`
	SName     types.PrincipalName `asn1:"optional,explicit,tag:9"`
	CAddr     types.HostAddresses `asn1:"optional,explicit,tag:10"`
}

// encKrbCredPart is RFC 4120 §5.8.1 EncKrbCredPart, without APPLICATION 29 (added on
// encoding) and without nonce and addresses, as MIT's krb5_mk_ncred in GSS-API (timestamp
// and usec always set).
type encKrbCredPart struct {
	TicketInfo []krbCredInfo `asn1:"explicit,tag:0"`
	Timestamp  time.Time     `asn1:"generalized,optional,explicit,tag:2"`
	Usec       int           `asn1:"optional,explicit,tag:3"`
}

// krbCred is RFC 4120 §5.8.1 KRB-CRED without APPLICATION 22; Tickets carries its own
// context tag [2] (gokrb5's asn1 ignores field tags on a RawValue).
type krbCred struct {
	PVNO    int `asn1:"explicit,tag:0"`
	MsgType int `asn1:"explicit,tag:1"`
	Tickets asn1.RawValue
	EncPart types.EncryptedData `asn1:"explicit,tag:3"`
}

func kerberosTime(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC().Truncate(time.Second)
}

// marshalKRBCred encodes fwd as a KRB-CRED (RFC 4120 §5.8) whose EncKrbCredPart is encrypted
// with key, the service ticket's session key, in key usage 14 (KRB_CRED_ENCPART), as MIT's
// initiator does (it hides its send subkey so that krb5_mk_ncred takes the session key).
func marshalKRBCred(fwd *forwardedTGT, key types.EncryptionKey, now time.Time) ([]byte, error) {
	p := fwd.part
	info := krbCredInfo{
		Key: p.Key, PRealm: fwd.crealm, PName: fwd.cname, Flags: p.Flags,
		AuthTime: kerberosTime(p.AuthTime), StartTime: kerberosTime(p.StartTime),
		EndTime: kerberosTime(p.EndTime), RenewTill: kerberosTime(p.RenewTill),
		SRealm: p.SRealm, SName: p.SName,
	}
	if len(p.CAddr) > 0 {
		info.CAddr = p.CAddr
	}
	enc, err := asn1.Marshal(encKrbCredPart{
		TicketInfo: []krbCredInfo{info},
		Timestamp:  kerberosTime(now),
		Usec:       now.Nanosecond() / 1000,
	})
	if err != nil {
		return nil, fmt.Errorf("gss: encoding EncKrbCredPart: %v", err)
	}
	enc = asn1tools.AddASNAppTag(enc, 29)
	et, _, err := checkKey(key)
	if err != nil {
		return nil, fmt.Errorf("gss: session key: %w", err)
	}
	cipher, err := encryptMessage(et, key.KeyValue, keyusage.KRB_CRED_ENCPART, enc)
	clear(enc) // it holds the forwarded ticket's session key
	if err != nil {
		return nil, fmt.Errorf("gss: encrypting EncKrbCredPart: %v", err)
	}
	tkt, err := fwd.ticket.Marshal()
	if err != nil {
		return nil, fmt.Errorf("gss: encoding the forwarded ticket: %v", err)
	}
	seq, err := asn1.Marshal(asn1.RawValue{Class: asn1.ClassUniversal, Tag: asn1.TagSequence, IsCompound: true, Bytes: tkt})
	if err != nil {
		return nil, fmt.Errorf("gss: encoding the tickets: %v", err)
	}
	b, err := asn1.Marshal(krbCred{
		PVNO:    iana.PVNO,
		MsgType: msgtype.KRB_CRED,
		Tickets: asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 2, IsCompound: true, Bytes: seq},
		EncPart: types.EncryptedData{EType: key.KeyType, Cipher: cipher},
	})
	if err != nil {
		return nil, fmt.Errorf("gss: encoding KRB-CRED: %v", err)
	}
	return asn1tools.AddASNAppTag(b, 22), nil
}

// gssChecksum builds the RFC 4121 §4.1.1 authenticator checksum (type 0x8003) without
// channel bindings: Lgth (16, u32 LE), Bnd (16 zero bytes), Flags (u32 LE); with deleg (a
// KRB-CRED), also the DELEG flag, DlgOpt 1 (u16 LE), Dlgth (u16 LE) and the KRB-CRED. deleg
// must be at most maxDelegLength bytes.
func gssChecksum(fl uint32, deleg []byte) []byte {
	n := 24
	if deleg != nil {
		n += 4 + len(deleg)
		fl |= delegFlag
	}
	c := make([]byte, 24, n)
	binary.LittleEndian.PutUint32(c[0:4], 16) // Lgth: length of Bnd
	// c[4:20]: Bnd, zero: no channel bindings
	binary.LittleEndian.PutUint32(c[20:24], fl)
	if deleg != nil {
		c = binary.LittleEndian.AppendUint16(c, 1) // DlgOpt: KRB5_GSS_FOR_CREDS_OPTION
		c = binary.LittleEndian.AppendUint16(c, uint16(len(deleg)))
		c = append(c, deleg...)
	}
	return c
}

// delegFlag is GSS_C_DELEG_FLAG in the checksum's Flags.
const delegFlag = 1

// delegation is the outcome of getting a forwarded ticket-granting ticket: one of the two.
type delegation struct {
	fwd *forwardedTGT
	err error // why there is none
}

// forwardedFor gets a forwarded ticket-granting ticket for the credentials: from tgt when
// given (a credential cache's), else with an AS exchange (keytab credentials).
func forwardedFor(cl *client.Client, tgt *tgtEntry) delegation {
	if tgt == nil {
		var err error
		if tgt, err = tgtFromAS(cl); err != nil {
			return delegation{err: err}
		}
	}
	fwd, err := fetchForwardedTGT(cl, tgt)
	return delegation{fwd: fwd, err: err}
}

// safeUnmarshal runs a gokrb5 decoder, which may panic on malformed input.
func safeUnmarshal(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("malformed input (%v)", r)
		}
	}()
	return f()
}
