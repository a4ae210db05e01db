package gss

import (
	"errors"
	"strconv"
	"strings"

	"github.com/jcmturner/gokrb5/v8/iana/errorcode"
	"github.com/jcmturner/gokrb5/v8/krberror"

	"github.com/pgconnector/pgconnector/negotiation"
)

// What a failure says about the server (package negotiation's sentinels):
//
//   - negotiation.ErrGSSRejected: Kerberos refused, and will refuse again until something
//     changes: a KRB-ERROR from the acceptor in answer to the AP-REQ (*KerberosError), or a
//     KRB-ERROR from the KDC in answer to the TGS-REQ for the service principal whose code is
//     about the service (serviceErrorCodes).
//   - negotiation.ErrGSSUnverified: a check that only the real server passes failed: the AP-REP
//     (Initiator.Step) or, once the context is established, a wrap token or its packet (the
//     Read of NewConn's conn).
//   - neither: everything else, among them a KDC that cannot be reached or does not answer, a
//     timeout, a reset, the context ending, and KRB-ERRORs about the client's own credentials.

// unverifiedError is err, which is a failed check that only the real server passes:
// errors.Is(e, negotiation.ErrGSSUnverified) holds, errors.Is(e, err) too, and the message is
// err's.
type unverifiedError struct{ err error }

func (e *unverifiedError) Error() string { return e.err.Error() }
func (e *unverifiedError) Unwrap() error { return e.err }

// Is reports whether target is negotiation.ErrGSSUnverified.
func (e *unverifiedError) Is(target error) bool { return target == negotiation.ErrGSSUnverified }

// unverified marks err as a failed check that only the real server passes.
func unverified(err error) error {
	if err == nil || errors.Is(err, negotiation.ErrGSSUnverified) {
		return err
	}
	return &unverifiedError{err}
}

// serviceErrorCodes are the KRB-ERROR codes (RFC 4120 §7.5.9) that, in answer to the TGS-REQ
// for the service principal, are about that service whoever asks, so that asking again cannot
// succeed until the KDC's database changes: negotiation.ErrGSSRejected.
//
//   - KDC_ERR_SERVICE_EXP (2): the server's entry has expired.
//   - KDC_ERR_S_OLD_MAST_KVNO (5): the server's key is encrypted in an old master key.
//   - KDC_ERR_S_PRINCIPAL_UNKNOWN (7): no such service principal (no postgres/host in the
//     realm).
//   - KDC_ERR_ETYPE_NOSUPP (14): no encryption type both the client may use and the service
//     has a key (or session key type) of.
//   - KDC_ERR_SERVICE_REVOKED (19): the server's credentials have been revoked.
//   - KDC_ERR_SERVICE_NOTYET (22): the server's entry is not valid yet.
//   - KDC_ERR_MUST_USE_USER2USER (27): the service principal is for user-to-user only.
//
// Not in the list, so plain errors:
//
//   - the client's own credentials and principal: KDC_ERR_NAME_EXP (1), KDC_ERR_C_OLD_MAST_KVNO
//     (4), KDC_ERR_C_PRINCIPAL_UNKNOWN (6), KDC_ERR_CLIENT_REVOKED (18), KDC_ERR_TGT_REVOKED
//     (20), KDC_ERR_CLIENT_NOTYET (21), KDC_ERR_KEY_EXPIRED (23), the preauthentication codes (24,
//     25), KRB_AP_ERR_TKT_EXPIRED (32: the ticket-granting ticket expired) and the other
//     KRB_AP_ERR_* codes about the TGT and its authenticator (31, 33-47);
//   - codes that name the client or the server without saying which (KDC_ERR_PRINCIPAL_NOT_UNIQUE
//     8, KDC_ERR_NULL_KEY 9) or a policy that may be about either (KDC_ERR_POLICY 12);
//   - codes about what this client put in its request (KDC_ERR_BAD_PVNO 3, KDC_ERR_CANNOT_POSTDATE
//     10, KDC_ERR_NEVER_VALID 11, KDC_ERR_BADOPTION 13, KDC_ERR_SUMTYPE_NOSUPP 15,
//     KDC_ERR_PADATA_TYPE_NOSUPP 16, KDC_ERR_TRTYPE_NOSUPP 17, KDC_ERR_SERVER_NOMATCH 26,
//     KRB_ERR_FIELD_TOOLONG 61);
//   - the path between the client's realm and the service's (KDC_ERR_PATH_NOT_ACCEPTED 28,
//     KDC_ERR_WRONG_REALM 68), which depends on the client's realm, not on the service;
//   - transient trouble of the KDC: KDC_ERR_SVC_UNAVAILABLE (29), KRB_ERR_RESPONSE_TOO_BIG (52),
//     KRB_ERR_GENERIC (60), whose meaning is only in the e-text, which is not read.
var serviceErrorCodes = map[int32]bool{
	errorcode.KDC_ERR_SERVICE_EXP:         true,
	errorcode.KDC_ERR_S_OLD_MAST_KVNO:     true,
	errorcode.KDC_ERR_S_PRINCIPAL_UNKNOWN: true,
	errorcode.KDC_ERR_ETYPE_NOSUPP:        true,
	errorcode.KDC_ERR_SERVICE_REVOKED:     true,
	errorcode.KDC_ERR_SERVICE_NOTYET:      true,
	errorcode.KDC_ERR_MUST_USE_USER2USER:  true,
}

// KDCError is a KRB-ERROR the KDC answered a request of gokrb5 with. Only its code is kept:
// its e-text is unauthenticated and never shown. It is negotiation.ErrGSSRejected (errors.Is)
// when it answers the TGS-REQ for the service principal and its code is about the service.
type KDCError struct {
	// Code is the KRB-ERROR's error-code (RFC 4120 §7.5.9).
	Code int32
	// Request is what was asked: "a ticket for <service principal>" (a TGS-REQ), "the
	// ticket-granting ticket" (an AS-REQ) or "a ticket for krbtgt/<realm>" (a TGS-REQ for a
	// cross-realm or renewed ticket-granting ticket).
	Request string
	// Service is true when the request was the TGS-REQ for the service principal.
	Service bool
}

func (e *KDCError) Error() string {
	return "gss: the KDC refused " + e.Request + ": " + errorcode.Lookup(e.Code)
}

// Is reports whether target is negotiation.ErrGSSRejected and e says the service cannot get a
// ticket.
func (e *KDCError) Is(target error) bool {
	return target == negotiation.ErrGSSRejected && e.Service && serviceErrorCodes[e.Code]
}

// The text gokrb5 v8 gives the innermost entry of a krberror.Krberror (root cause KDC_Error)
// when an exchange gets a KRB-ERROR: TGSExchange and ASExchange pass the messages.KRBError
// through krberror.Errorf, which keeps only its text, "KRB Error: " + errorcode.Lookup(code),
// then " - " + e-text when there is one. So the code is read back from the text, which starts
// with what gokrb5 itself writes; the e-text, which comes last, is never read nor passed on.
// TestKDCErrorsFromARealKDC holds this to the gokrb5 in go.mod.
const (
	gokrb5TGSKRBError = krberror.KDCError + ": TGS Exchange Error: kerberos error response from KDC when requesting for "
	gokrb5ASKRBError  = krberror.KDCError + ": AS Exchange Error: kerberos error response from KDC: "
	gokrb5KRBError    = "KRB Error: "
)

// kdcExchangeError turns an error of gokrb5's GetServiceTicket for spn (a TGS exchange,
// preceded for keytab credentials by an AS exchange) into this package's error: a *KDCError
// for a KRB-ERROR, else a plain error with gokrb5's text, cut before any e-text.
func kdcExchangeError(spn string, err error) error {
	if err == nil {
		return nil
	}
	var ke krberror.Krberror
	if errors.As(err, &ke) && ke.RootCause == krberror.KDCError && len(ke.EText) > 0 {
		inner := ke.EText[len(ke.EText)-1]
		switch {
		case strings.HasPrefix(inner, gokrb5TGSKRBError):
			rest := inner[len(gokrb5TGSKRBError):]
			// rest is "<principal>: KRB Error: ...": the principal is ours, or a krbtgt.
			if after, ok := strings.CutPrefix(rest, spn+": "+gokrb5KRBError); ok {
				if code, ok := krbErrorCode(after); ok {
					return &KDCError{Code: code, Request: "a ticket for " + spn, Service: true}
				}
			}
			if i := strings.Index(rest, ": "+gokrb5KRBError); i > 0 && strings.HasPrefix(rest, "krbtgt/") {
				if code, ok := krbErrorCode(rest[i+2+len(gokrb5KRBError):]); ok {
					return &KDCError{Code: code, Request: "a ticket for " + rest[:i]}
				}
			}
		case strings.HasPrefix(inner, gokrb5ASKRBError+gokrb5KRBError):
			if code, ok := krbErrorCode(inner[len(gokrb5ASKRBError)+len(gokrb5KRBError):]); ok {
				return &KDCError{Code: code, Request: "the ticket-granting ticket"}
			}
		}
	}
	return errors.New("gss: no service ticket for " + spn + ": " + withoutEText(err.Error()))
}

// krbErrorCode reads the code at the start of s, which follows "KRB Error: " in gokrb5's text of
// a KRB-ERROR: errorcode.Lookup's "(7) KDC_ERR_..." or "Unknown ErrorCode 99".
func krbErrorCode(s string) (int32, bool) {
	var digits string
	if rest, ok := strings.CutPrefix(s, "("); ok {
		if digits, _, ok = strings.Cut(rest, ")"); !ok {
			return 0, false
		}
	} else if rest, ok := strings.CutPrefix(s, "Unknown ErrorCode "); ok {
		digits = rest
		if i := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
			digits = rest[:i]
		}
	} else {
		return 0, false
	}
	if digits == "" || digits[0] == '+' || digits[0] == '-' {
		return 0, false
	}
	n, err := strconv.ParseInt(digits, 10, 32)
	if err != nil {
		return 0, false
	}
	return int32(n), true
}

// withoutEText cuts a gokrb5 error text after the first KRB-ERROR code it quotes, so that the
// e-text that follows it (and anything after) is dropped.
func withoutEText(s string) string {
	i := strings.Index(s, gokrb5KRBError)
	if i < 0 {
		return s
	}
	head, rest := s[:i], s[i+len(gokrb5KRBError):]
	if code, ok := krbErrorCode(rest); ok {
		return head + "KRB-ERROR " + errorcode.Lookup(code)
	}
	return head + "KRB-ERROR (its text is not shown)"
}
