package gss

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/jcmturner/gofork/encoding/asn1"
	"github.com/jcmturner/gokrb5/v8/asn1tools"
	"github.com/jcmturner/gokrb5/v8/client"
	"github.com/jcmturner/gokrb5/v8/config"
	"github.com/jcmturner/gokrb5/v8/credentials"
	"github.com/jcmturner/gokrb5/v8/gssapi"
	"github.com/jcmturner/gokrb5/v8/iana"
	"github.com/jcmturner/gokrb5/v8/iana/chksumtype"
	"github.com/jcmturner/gokrb5/v8/iana/errorcode"
	"github.com/jcmturner/gokrb5/v8/iana/flags"
	"github.com/jcmturner/gokrb5/v8/iana/keyusage"
	"github.com/jcmturner/gokrb5/v8/iana/msgtype"
	"github.com/jcmturner/gokrb5/v8/iana/nametype"
	"github.com/jcmturner/gokrb5/v8/keytab"
	"github.com/jcmturner/gokrb5/v8/messages"
	"github.com/jcmturner/gokrb5/v8/types"

	"github.com/pgconnector/pgconnector/internal/ccache"
	"github.com/pgconnector/pgconnector/negotiation"
)

// Credentials is a Kerberos client identity: a gokrb5 client, from a
// credential cache or a keytab, with its krb5 configuration. Its String shows
// the principal only.
type Credentials struct {
	cl  *client.Client
	cfg *config.Config
	tgt *tgtEntry // the credential cache's ticket-granting ticket; nil for other credentials
}

// NewCredentials wraps an existing gokrb5 client and its configuration; a
// client without a configuration is given cfg.
func NewCredentials(cl *client.Client, cfg *config.Config) (*Credentials, error) {
	if cl == nil || cl.Credentials == nil {
		return nil, errors.New("gss: NewCredentials: no Kerberos client")
	}
	if cfg == nil {
		return nil, errors.New("gss: NewCredentials: no krb5 configuration")
	}
	if cl.Config == nil {
		cl.Config = cfg
	}
	return &Credentials{cl: cl, cfg: cfg}, nil
}

// CredentialsFromCCache loads a FILE credential cache (as written by kinit)
// with internal/ccache (a regular file of 16 MiB at most, decoded within
// bounds) and builds a client from it. The cache must hold a TGT; it is read
// once and not renewed.
func CredentialsFromCCache(path string, cfg *config.Config, settings ...func(*client.Settings)) (*Credentials, error) {
	if cfg == nil {
		return nil, errors.New("gss: CredentialsFromCCache: no krb5 configuration")
	}
	var cc *credentials.CCache
	c, err := ccache.Resolve("FILE:"+path, ccache.Options{})
	if err == nil {
		cc, err = c.Load(context.Background())
	}
	if err != nil {
		return nil, fmt.Errorf("gss: loading credential cache %s: %w", path, err)
	}
	return CredentialsFromCCacheData(path, cc, cfg, settings...)
}

// CredentialsFromCCacheData builds a client from the credentials of a cache already read
// (internal/ccache reads every type into this form); name names it in errors. The cache must
// hold a TGT for the realm of its default principal.
func CredentialsFromCCacheData(name string, cc *credentials.CCache, cfg *config.Config, settings ...func(*client.Settings)) (*Credentials, error) {
	if cfg == nil {
		return nil, errors.New("gss: CredentialsFromCCacheData: no krb5 configuration")
	}
	cl, err := client.NewFromCCache(cc, cfg, settings...)
	if err != nil {
		return nil, fmt.Errorf("gss: using credential cache %s: %w", name, err)
	}
	// The same entry NewFromCCache took, kept for delegation.
	entry, ok := cc.GetEntry(types.PrincipalName{NameType: nametype.KRB_NT_SRV_INST, NameString: []string{"krbtgt", cc.DefaultPrincipal.Realm}})
	if !ok {
		return nil, fmt.Errorf("gss: credential cache %s holds no ticket-granting ticket", name)
	}
	tgt, err := tgtFromCCache(entry)
	if err != nil {
		return nil, err
	}
	return &Credentials{cl: cl, cfg: cfg, tgt: tgt}, nil
}

// CredentialsFromKeytab builds a client that logs in as username@realm with
// the key in kt (the AS exchange happens on first use, or with Login).
func CredentialsFromKeytab(username, realm string, kt *keytab.Keytab, cfg *config.Config, settings ...func(*client.Settings)) (*Credentials, error) {
	if cfg == nil {
		return nil, errors.New("gss: CredentialsFromKeytab: no krb5 configuration")
	}
	if kt == nil {
		return nil, errors.New("gss: CredentialsFromKeytab: no keytab")
	}
	if username == "" {
		return nil, errors.New("gss: CredentialsFromKeytab: no user name")
	}
	cl := client.NewWithKeytab(username, realm, kt, cfg, settings...)
	return &Credentials{cl: cl, cfg: cfg}, nil
}

// Client returns the gokrb5 client.
func (c *Credentials) Client() *client.Client { return c.cl }

// Config returns the krb5 configuration.
func (c *Credentials) Config() *config.Config { return c.cfg }

// Principal returns the client principal as name@REALM.
func (c *Credentials) Principal() string {
	return c.cl.Credentials.CName().PrincipalNameString() + "@" + c.cl.Credentials.Realm()
}

// String shows the principal only.
func (c *Credentials) String() string { return "gss.Credentials{" + c.Principal() + "}" }

// GoString is String.
func (c *Credentials) GoString() string { return c.String() }

// NewInitiator is NewInitiator(c.Client(), spn, delegate), except that with delegate the
// ticket-granting ticket of a credential cache is forwarded (a bare gokrb5 client does not
// show it).
func (c *Credentials) NewInitiator(spn string, delegate bool) (*Initiator, error) {
	i, err := NewInitiator(c.cl, spn, delegate)
	if err != nil {
		return nil, err
	}
	i.tgt = c.tgt
	return i, nil
}

// forwarded gets a forwarded ticket-granting ticket for c: a KDC exchange (two for keytab
// credentials), bounded by gokrb5's own timeouts only.
func (c *Credentials) forwarded() delegation { return forwardedFor(c.cl, c.tgt) }

// KerberosError is a KRB-ERROR the acceptor returned instead of an AP-REP.
// Only its error code is kept: its e-text is unauthenticated.
type KerberosError struct {
	Code int32
}

func (e *KerberosError) Error() string {
	return "gss: the server rejected the Kerberos authentication: " + errorcode.Lookup(e.Code)
}

// Is reports whether target is negotiation.ErrGSSRejected: the acceptor refused the AP-REQ.
func (e *KerberosError) Is(target error) bool { return target == negotiation.ErrGSSRejected }

// RFC 4121 §4.1.1 checksum flags requested by libpq for GSS encryption.
const initiatorFlags = gssapi.ContextFlagMutual | gssapi.ContextFlagReplay |
	gssapi.ContextFlagSequence | gssapi.ContextFlagConf | gssapi.ContextFlagInteg

// RFC 4121 §4.1 / RFC 2743 §3.1 token IDs.
const (
	tokAPReq    = 0x0100
	tokAPRep    = 0x0200
	tokKRBError = 0x0300
)

type initiatorState int

const (
	stateInitial initiatorState = iota
	stateSent
	stateDone
	stateFailed
)

func (s initiatorState) String() string {
	switch s {
	case stateInitial:
		return "initial"
	case stateSent:
		return "AP-REQ sent"
	case stateDone:
		return "established"
	default:
		return "failed"
	}
}

// Initiator establishes a Kerberos V5 GSS-API security context as the client,
// with mutual authentication (RFC 4121 §4.1), one Step at a time. It is not
// safe for concurrent use.
type Initiator struct {
	cl    *client.Client
	spn   string
	state initiatorState
	err   error

	sessionKey types.EncryptionKey // the ticket's session key, until done
	subkey     types.EncryptionKey // our initiator subkey
	ctime      time.Time           // authenticator ctime, to the second
	cusec      int
	sendSeq    uint64

	acceptorSubkey    types.EncryptionKey
	hasAcceptorSubkey bool
	recvSeq           uint64

	// ticket, when set, is the service ticket to use (and ticketKey its session key) instead
	// of asking gokrb5's client for one: see newInitiatorWithTicket.
	ticket    *messages.Ticket
	ticketKey types.EncryptionKey

	// Delegation: asked for; the ticket-granting ticket to forward (nil: from an AS exchange);
	// the forwarded ticket when already obtained (deleg set); whether the AP-REQ carried it,
	// else why not.
	delegate  bool
	tgt       *tgtEntry
	deleg     *delegation
	delegSent bool
	delegWhy  error
}

// NewInitiator prepares a context with the service principal spn, written
// "service/host" (for PostgreSQL "postgres/host", host as in the connection
// string). With delegate (GSS_C_DELEG_FLAG), the first Step also gets a
// forwarded ticket-granting ticket from the KDC and sends it in the AP-REQ
// (see deleg.go); a gokrb5 client from a credential cache does not show its
// ticket-granting ticket, so only keytab or password clients can delegate
// here: use Credentials.NewInitiator for a cache. Delegation that cannot be
// done is dropped, as by MIT: Delegation says why.
func NewInitiator(cl *client.Client, spn string, delegate bool) (*Initiator, error) {
	if cl == nil || cl.Credentials == nil {
		return nil, errors.New("gss: NewInitiator: no Kerberos client")
	}
	if cl.Config == nil {
		return nil, errors.New("gss: NewInitiator: the Kerberos client has no krb5 configuration")
	}
	service, host, ok := strings.Cut(spn, "/")
	if !ok || service == "" || host == "" || strings.ContainsAny(spn, "\x00@") {
		return nil, fmt.Errorf("gss: service principal %q is not of the form service/host", spn)
	}
	return &Initiator{cl: cl, spn: spn, delegate: delegate}, nil
}

// newInitiatorWithTicket is NewInitiator with the service ticket for spn already obtained, and
// the forwarded ticket-granting ticket when deleg is not nil (delegation asked), so that the
// first Step asks no KDC.
func newInitiatorWithTicket(cl *client.Client, spn string, tkt messages.Ticket, key types.EncryptionKey, deleg *delegation) (*Initiator, error) {
	i, err := NewInitiator(cl, spn, deleg != nil)
	if err != nil {
		return nil, err
	}
	i.ticket, i.ticketKey = &tkt, key
	i.deleg = deleg
	return i, nil
}

// Delegation reports, once the first Step has built the AP-REQ, whether it carried a forwarded
// ticket-granting ticket (sent), and, when delegation was asked but not sent, why (for
// example ErrNotForwardable, or the KDC's refusal as a *KDCError). Without delegation asked it
// returns false, nil. The reason names no secret.
func (i *Initiator) Delegation() (sent bool, why error) { return i.delegSent, i.delegWhy }

// String shows the target and the state, no key material.
func (i *Initiator) String() string {
	return fmt.Sprintf("gss.Initiator{%s, %s}", i.spn, i.state)
}

// GoString is String.
func (i *Initiator) GoString() string { return i.String() }

// Step advances context establishment. The first call takes no input and
// returns the AP-REQ token (done = false); the second takes the acceptor's
// token and returns done = true with no output token once the AP-REP is
// verified. A KRB-ERROR from the acceptor is a *KerberosError
// (negotiation.ErrGSSRejected); any other failure of the acceptor's token is
// negotiation.ErrGSSUnverified (errors.Is). Any error ends the context: later
// calls return it again.
func (i *Initiator) Step(inputToken []byte) (outputToken []byte, done bool, err error) {
	switch i.state {
	case stateInitial:
		if len(inputToken) != 0 {
			return nil, false, i.fail(errors.New("gss: the first Step takes no input token"))
		}
		out, err := i.initSecContext()
		if err != nil {
			return nil, false, i.fail(err)
		}
		i.state = stateSent
		return out, false, nil
	case stateSent:
		if len(inputToken) == 0 {
			return nil, false, i.fail(unverified(errors.New("gss: expected the acceptor's AP-REP token, got none")))
		}
		if err := i.processReply(inputToken); err != nil {
			if _, rejected := err.(*KerberosError); !rejected {
				err = unverified(err)
			}
			return nil, false, i.fail(err)
		}
		i.state = stateDone
		i.sessionKey = types.EncryptionKey{}
		return nil, true, nil
	case stateDone:
		if len(inputToken) != 0 {
			return nil, true, errors.New("gss: token received after the context was established")
		}
		return nil, true, nil
	default:
		return nil, false, i.err
	}
}

func (i *Initiator) fail(err error) error {
	i.state = stateFailed
	i.err = err
	i.sessionKey = types.EncryptionKey{}
	i.subkey = types.EncryptionKey{}
	i.acceptorSubkey = types.EncryptionKey{}
	return err
}

// krb5OID is the DER encoding of 1.2.840.113554.1.2.2.
var krb5OID = func() []byte {
	b, err := asn1.Marshal(gssapi.OIDKRB5.OID())
	if err != nil {
		panic("gss: cannot encode the Kerberos V5 mechanism OID: " + err.Error())
	}
	return b
}()

// initSecContext gets the service ticket and builds the framed AP-REQ.
func (i *Initiator) initSecContext() ([]byte, error) {
	tkt, sessionKey := messages.Ticket{}, types.EncryptionKey{}
	if i.ticket != nil {
		tkt, sessionKey = *i.ticket, i.ticketKey
		i.ticket, i.ticketKey = nil, types.EncryptionKey{}
	} else {
		var err error
		if tkt, sessionKey, err = i.cl.GetServiceTicket(i.spn); err != nil {
			return nil, kdcExchangeError(i.spn, err)
		}
	}
	et, info, err := checkKey(sessionKey)
	if err != nil {
		return nil, fmt.Errorf("gss: service ticket for %s: session key: %w", i.spn, err)
	}
	rnd := make([]byte, info.keyLen)
	if _, err := rand.Read(rnd); err != nil {
		return nil, fmt.Errorf("gss: generating a subkey: %w", err)
	}
	subkey := types.EncryptionKey{KeyType: sessionKey.KeyType, KeyValue: et.RandomToKey(rnd)}

	// NewAuthenticator sets ctime/cusec and a random 30-bit sequence number.
	auth, err := types.NewAuthenticator(i.cl.Credentials.Realm(), i.cl.Credentials.CName())
	if err != nil {
		return nil, fmt.Errorf("gss: building the authenticator: %w", err)
	}
	var cred []byte
	if i.delegate {
		cred, i.delegWhy = i.krbCred(sessionKey)
		i.delegSent = cred != nil
	}
	auth.Cksum = types.Checksum{CksumType: chksumtype.GSSAPI, Checksum: gssChecksum(initiatorFlags, cred)}
	auth.SubKey = subkey
	// messages.NewAPReq, with the authenticator encrypted by encryptMessage
	// (usage 11, RFC 4120 §5.5.1: the service is never krbtgt here).
	authBytes, err := auth.Marshal()
	if err != nil {
		return nil, fmt.Errorf("gss: encoding the authenticator: %w", err)
	}
	encAuth, err := encryptMessage(et, sessionKey.KeyValue, keyusage.AP_REQ_AUTHENTICATOR, authBytes)
	if err != nil {
		return nil, fmt.Errorf("gss: encrypting the authenticator: %w", err)
	}
	apreq := messages.APReq{
		PVNO:      iana.PVNO,
		MsgType:   msgtype.KRB_AP_REQ,
		APOptions: types.NewKrbFlags(),
		Ticket:    tkt,
		EncryptedAuthenticator: types.EncryptedData{
			EType: sessionKey.KeyType, KVNO: tkt.EncPart.KVNO, Cipher: encAuth,
		},
	}
	types.SetFlag(&apreq.APOptions, flags.APOptionMutualRequired)
	b, err := apreq.Marshal()
	if err != nil {
		return nil, fmt.Errorf("gss: encoding the AP-REQ: %w", err)
	}

	i.sessionKey = sessionKey
	i.subkey = subkey
	// The AP-REP echoes ctime as a GeneralizedTime, which has no fraction.
	i.ctime = auth.CTime.Truncate(time.Second)
	i.cusec = auth.Cusec
	i.sendSeq = uint64(auth.SeqNumber)
	return frameToken(tokAPReq, b), nil
}

// krbCred returns the KRB-CRED to delegate with the service ticket's session key, getting the
// forwarded ticket-granting ticket first unless the initiator was given it; or nil and why not.
func (i *Initiator) krbCred(sessionKey types.EncryptionKey) ([]byte, error) {
	d := i.deleg
	if d == nil {
		r := forwardedFor(i.cl, i.tgt)
		d = &r
	}
	i.deleg, i.tgt = nil, nil
	if d.err != nil {
		return nil, d.err
	}
	cred, err := marshalKRBCred(d.fwd, sessionKey, time.Now())
	if err != nil {
		return nil, err
	}
	if krbCredHook != nil {
		cred = krbCredHook(cred)
	}
	if len(cred) > maxDelegLength {
		return nil, fmt.Errorf("gss: the KRB-CRED of the forwarded ticket is %d bytes, more than the %d the checksum can hold", len(cred), maxDelegLength)
	}
	return cred, nil
}

// frameToken wraps a Kerberos message in the RFC 2743 §3.1
// InitialContextToken framing: [APPLICATION 0] { OID, TOK_ID, message }.
func frameToken(tokID uint16, msg []byte) []byte {
	inner := make([]byte, 0, len(krb5OID)+2+len(msg))
	inner = append(inner, krb5OID...)
	inner = binary.BigEndian.AppendUint16(inner, tokID)
	inner = append(inner, msg...)
	return asn1tools.AddASNAppTag(inner, 0)
}

// parseToken undoes frameToken, checking the framing strictly.
func parseToken(b []byte) (tokID uint16, msg []byte, err error) {
	if len(b) < 2 || b[0] != 0x60 {
		return 0, nil, errors.New("gss: acceptor token is not a GSS-API InitialContextToken (no 0x60 tag)")
	}
	length, n, err := derLength(b[1:])
	if err != nil {
		return 0, nil, err
	}
	rest := b[1+n:]
	if length != len(rest) {
		return 0, nil, fmt.Errorf("gss: acceptor token length %d does not match its %d content bytes", length, len(rest))
	}
	if !bytes.HasPrefix(rest, krb5OID) {
		return 0, nil, errors.New("gss: acceptor token is not for the Kerberos V5 mechanism")
	}
	rest = rest[len(krb5OID):]
	if len(rest) < 2 {
		return 0, nil, errors.New("gss: acceptor token has no TOK_ID")
	}
	return binary.BigEndian.Uint16(rest), rest[2:], nil
}

// derLength parses a DER length, returning it and the bytes it used.
func derLength(b []byte) (int, int, error) {
	if len(b) == 0 {
		return 0, 0, errors.New("gss: acceptor token truncated in its length")
	}
	if b[0] < 0x80 {
		return int(b[0]), 1, nil
	}
	n := int(b[0] & 0x7f)
	if n == 0 || n > 3 || len(b) < 1+n {
		return 0, 0, errors.New("gss: acceptor token has an invalid length encoding")
	}
	v := 0
	for _, c := range b[1 : 1+n] {
		v = v<<8 | int(c)
	}
	return v, 1 + n, nil
}

// processReply verifies the acceptor's AP-REP (or reports its KRB-ERROR).
func (i *Initiator) processReply(tok []byte) error {
	tokID, msg, err := parseToken(tok)
	if err != nil {
		return err
	}
	switch tokID {
	case tokAPRep:
	case tokKRBError:
		var ke messages.KRBError
		if err := ke.Unmarshal(msg); err != nil {
			return errors.New("gss: the acceptor sent a malformed KRB-ERROR token")
		}
		return &KerberosError{Code: ke.ErrorCode}
	default:
		return fmt.Errorf("gss: unexpected acceptor token ID %04x, want an AP-REP (0200)", tokID)
	}

	// gokrb5's ASN.1 decoder does not hold the outer length to the data.
	if len(msg) < 2 || msg[0] != 0x6f {
		return errors.New("gss: malformed AP-REP: not an [APPLICATION 15]")
	}
	if l, n, err := derLength(msg[1:]); err != nil || l != len(msg)-1-n {
		return errors.New("gss: malformed AP-REP: inconsistent length")
	}
	var rep messages.APRep
	// (The tag check above also keeps gokrb5 from answering a KRB-ERROR
	// found here with the KRB-ERROR itself, unauthenticated text included.)
	if err := rep.Unmarshal(msg); err != nil {
		return fmt.Errorf("gss: malformed AP-REP: %v", err)
	}
	if rep.PVNO != iana.PVNO { // gokrb5 checks the message type only
		return fmt.Errorf("gss: AP-REP with protocol version %d, want %d", rep.PVNO, iana.PVNO)
	}
	if rep.EncPart.EType != i.sessionKey.KeyType {
		return fmt.Errorf("gss: AP-REP encrypted with %s, but the session key is %s",
			EnctypeName(rep.EncPart.EType), EnctypeName(i.sessionKey.KeyType))
	}
	et, _, err := checkEnctype(rep.EncPart.EType)
	if err != nil {
		return err
	}
	if min := et.GetConfounderByteSize() + et.GetHMACBitLength()/8; len(rep.EncPart.Cipher) < min {
		return fmt.Errorf("gss: AP-REP encrypted part is %d bytes, too short", len(rep.EncPart.Cipher))
	}
	pt, err := decryptMessage(et, i.sessionKey.KeyValue, keyusage.AP_REP_ENCPART, rep.EncPart.Cipher)
	if err != nil {
		return errors.New("gss: the AP-REP does not decrypt with the session key: mutual authentication failed")
	}
	var enc messages.EncAPRepPart
	if err := enc.Unmarshal(pt); err != nil {
		return fmt.Errorf("gss: malformed AP-REP encrypted part: %v", err)
	}
	if !enc.CTime.Equal(i.ctime) || enc.Cusec != i.cusec {
		return errors.New("gss: the AP-REP does not echo our authenticator's time: mutual authentication failed")
	}
	if enc.Subkey.KeyType != 0 || len(enc.Subkey.KeyValue) != 0 {
		if _, _, err := checkKey(enc.Subkey); err != nil {
			return fmt.Errorf("gss: acceptor subkey: %w", err)
		}
		i.acceptorSubkey = types.EncryptionKey{KeyType: enc.Subkey.KeyType, KeyValue: bytes.Clone(enc.Subkey.KeyValue)}
		i.hasAcceptorSubkey = true
	}
	seq, err := seqNumber(enc.SequenceNumber)
	if err != nil {
		return err
	}
	i.recvSeq = seq
	return nil
}

// seqNumber converts an AP-REP seq-number (UInt32, RFC 4120) to the wrap
// token sequence space. Old MIT releases encoded it as a signed 32-bit
// integer, so negative values are taken modulo 2^32.
func seqNumber(v int64) (uint64, error) {
	switch {
	case v >= 0 && v <= math.MaxUint32:
		return uint64(v), nil
	case v < 0 && v >= math.MinInt32:
		return uint64(uint32(int32(v))), nil
	}
	return 0, fmt.Errorf("gss: AP-REP sequence number %d out of range", v)
}

// Wrapper returns the message protection for the established context: the
// acceptor's subkey if it sent one (flag AcceptorSubkey), else our initiator
// subkey; our sequence numbers start at the authenticator's, the acceptor's
// at the AP-REP's. Each call returns a new Wrapper with fresh counters: call
// it once per context.
func (i *Initiator) Wrapper() (*Wrapper, error) {
	if i.state != stateDone {
		return nil, fmt.Errorf("gss: the security context is not established (%s)", i.state)
	}
	if i.hasAcceptorSubkey {
		return NewWrapper(i.acceptorSubkey, true, true, i.sendSeq, i.recvSeq)
	}
	return NewWrapper(i.subkey, true, false, i.sendSeq, i.recvSeq)
}

// Enctype returns the enctype of the key that protects messages: the
// acceptor subkey's once the context is established with one, otherwise the
// session key's (and our subkey's); 0 before the first Step.
func (i *Initiator) Enctype() int32 {
	if i.hasAcceptorSubkey {
		return i.acceptorSubkey.KeyType
	}
	return i.subkey.KeyType
}
