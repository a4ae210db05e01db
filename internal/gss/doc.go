// Package gss implements the client side of PostgreSQL's GSSAPI session
// encryption (gssencmode) in pure Go on top of github.com/jcmturner/gokrb5/v8.
//
// It has three parts:
//
//   - Wrapper: RFC 4121 §4.2.6.2 Wrap tokens with confidentiality (TOK_ID
//     05 04, Sealed flag), which gokrb5 lacks (its gssapi.WrapToken is
//     integrity-only). It is the RFC 3961 "encrypt" of the enctype with the
//     RFC 4121 key usages 22 (acceptor seal) and 24 (initiator seal). The
//     keys Ke and Ki are derived once per Wrapper and direction (RFC 3961
//     DK with the standard library's AES and a cached n-fold for RFC 3962,
//     gokrb5's KDF-HMAC-SHA2 for RFC 8009); the per-message AES-CBC-CTS and
//     truncated HMAC use the standard library. Derivation and encryption
//     are checked against gokrb5's DeriveKey, EncryptMessage and
//     DecryptMessage in the tests.
//   - Initiator: Kerberos V5 GSS-API context establishment with mutual
//     authentication (RFC 4121 §4.1): it builds the AP-REQ itself, so that it
//     knows its sequence number and subkey, and verifies the AP-REP, which
//     gokrb5 does not do; the authenticator and the AP-REP use the same
//     encryption as the wrap tokens.
//   - NewConn: PostgreSQL's packet framing of wrap tokens (Int32 length plus
//     one token, 16384 bytes at most per packet), as a net.Conn; and
//     WriteToken/ReadToken for the context-establishment tokens.
//
// Errors say, where they can, what a failure means for the server, with the
// sentinels of package negotiation (errors.go): ErrGSSRejected for a
// KRB-ERROR from the acceptor or, about the service, from the KDC;
// ErrGSSUnverified for an AP-REP, wrap token or packet that fails a check the
// real server passes. Client.ServiceTicket waits for the KDC no longer than
// its context (client.go, Client.ticket).
//
// Only the AES enctypes are supported: aes128-cts-hmac-sha1-96 (17),
// aes256-cts-hmac-sha1-96 (18), aes128-cts-hmac-sha256-128 (19) and
// aes256-cts-hmac-sha384-192 (20).
//
// Nothing in this package puts a key, a ticket or a session key into an
// error, a log line or a String result; nor the e-text of a KRB-ERROR
// (unauthenticated).
package gss
