package scram

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"strings"
)

// The kinds of errors ServerFirst and ServerFinal return, for errors.Is.
var (
	// ErrServerMessage is a server-first-message or server-final-message that breaks RFC 5802
	// section 7's grammar or this client's limits (nonce, salt, iteration count).
	ErrServerMessage = errors.New("SCRAM message from the server is not acceptable")
	// ErrServerError is a server-final-message with an error (e=, RFC 5802 section 7).
	ErrServerError = errors.New("SCRAM error from the server")
	// ErrServerSignature is a server-final-message whose ServerSignature is not the one the keys give
	// (RFC 5802 section 3): the server does not know the password, or it is not the server the
	// client first spoke to.
	ErrServerSignature = errors.New("SCRAM server signature does not match: the server does not know the password")
)

// maxSaltLen bounds the salt (decoded), which becomes part of a cache key. PostgreSQL makes 16-byte
// salts (SCRAM_DEFAULT_SALT_LEN); a secret set by hand may have another length.
const maxSaltLen = 1024

// messageError is an error with its own text and a kind for errors.Is.
type messageError struct {
	text string
	kind error
}

func (e *messageError) Error() string { return e.text }
func (e *messageError) Unwrap() error { return e.kind }

func badMessage(format string, args ...any) error {
	return &messageError{text: fmt.Sprintf(format, args...), kind: ErrServerMessage}
}

// serverFirst is a server-first-message: r=<client nonce><server nonce>,s=<salt, base64>,i=<count>.
type serverFirst struct {
	nonce string // the whole nonce: the client's and the server's
	salt  []byte
	iters int
}

// parseServerFirst reads server-first-message (RFC 5802 section 7) as strictly as libpq's
// read_server_first_message (fe-auth-scram.c): the attributes r, s and i in this order and nothing
// after them; the nonce must extend clientNonce with printable characters; the salt must be base64
// of 1 to maxSaltLen bytes; the iteration count must be decimal digits worth 1 to maxIters.
func parseServerFirst(msg []byte, clientNonce string, maxIters int) (serverFirst, error) {
	s := string(msg)
	if strings.HasPrefix(s, "m=") {
		return serverFirst{}, badMessage("SCRAM server-first-message starts with a mandatory extension (m=), which is not supported (RFC 5802 section 5.1)")
	}
	fields := strings.SplitN(s, ",", 4)
	for i, a := range [...]struct{ name, what string }{{"r", "nonce"}, {"s", "salt"}, {"i", "iteration count"}} {
		if i >= len(fields) || !strings.HasPrefix(fields[i], a.name+"=") {
			return serverFirst{}, badMessage("SCRAM server-first-message has no %s (%s=) where RFC 5802 section 7 puts it", a.what, a.name)
		}
	}
	if len(fields) > 3 {
		return serverFirst{}, badMessage("SCRAM server-first-message goes on after the iteration count (libpq rejects that too)")
	}

	nonce := fields[0][len("r="):]
	if len(nonce) <= len(clientNonce) || nonce[:len(clientNonce)] != clientNonce {
		return serverFirst{}, badMessage("SCRAM server nonce does not extend the client nonce (RFC 5802 section 5.1)")
	}
	for i := len(clientNonce); i < len(nonce); i++ {
		if c := nonce[i]; c < 0x21 || c > 0x7e {
			return serverFirst{}, badMessage("SCRAM server nonce has a byte outside printable ASCII (RFC 5802 section 7)")
		}
	}

	b64 := fields[1][len("s="):]
	if len(b64) > 2*base64.StdEncoding.EncodedLen(maxSaltLen) {
		return serverFirst{}, badMessage("SCRAM salt from the server is longer than %d bytes", maxSaltLen)
	}
	salt, err := base64.StdEncoding.DecodeString(b64)
	switch {
	case err != nil:
		return serverFirst{}, badMessage("SCRAM salt from the server is not valid base64")
	case len(salt) == 0:
		return serverFirst{}, badMessage("SCRAM salt from the server is empty")
	case len(salt) > maxSaltLen:
		return serverFirst{}, badMessage("SCRAM salt from the server is longer than %d bytes", maxSaltLen)
	}

	iters, err := parseIterations(fields[2][len("i="):], maxIters)
	if err != nil {
		return serverFirst{}, err
	}
	return serverFirst{nonce: nonce, salt: salt, iters: iters}, nil
}

// parseIterations reads the iteration count: decimal digits (no sign) worth 1 to maxIters.
func parseIterations(t string, maxIters int) (int, error) {
	if t == "" {
		return 0, badMessage("SCRAM iteration count from the server is empty")
	}
	n, over := 0, false
	for i := 0; i < len(t); i++ {
		c := t[i]
		if c < '0' || c > '9' {
			return 0, badMessage("SCRAM iteration count from the server is not a positive decimal number")
		}
		if n > (math.MaxInt-9)/10 {
			over = true
			continue
		}
		n = n*10 + int(c-'0')
	}
	if over || n > maxIters {
		shown := t
		if len(t) > 20 {
			shown = fmt.Sprintf("of %d digits", len(t))
		}
		return 0, badMessage("SCRAM iteration count %s from the server exceeds the limit of %d", shown, maxIters)
	}
	if n < 1 {
		return 0, badMessage("SCRAM iteration count 0 from the server is below 1 (RFC 5802 section 5.1)")
	}
	return n, nil
}

// parseServerFinal reads server-final-message (RFC 5802 section 7) as libpq's
// read_server_final_message does: "e=<error>", or "v=<base64 ServerSignature>" of the hash's size
// with nothing after it. It returns the ServerSignature of a well-formed verifier, which is left
// to check.
func parseServerFinal(msg []byte) ([]byte, error) {
	s := string(msg)
	switch {
	case strings.HasPrefix(s, "e="):
		v, _, _ := strings.Cut(s[len("e="):], ",")
		return nil, &messageError{text: "SCRAM error from the server: " + serverErrorValue(v), kind: ErrServerError}
	case strings.HasPrefix(s, "v="):
		b64 := s[len("v="):]
		if strings.Contains(b64, ",") {
			return nil, badMessage("SCRAM server-final-message goes on after the verifier (libpq rejects that too)")
		}
		if len(b64) > 2*base64.StdEncoding.EncodedLen(sha256.Size) {
			return nil, badMessage("SCRAM server signature is longer than %d bytes (SHA-256)", sha256.Size)
		}
		sig, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			return nil, badMessage("SCRAM server signature is not valid base64")
		}
		if len(sig) != sha256.Size {
			return nil, badMessage("SCRAM server signature is %d bytes, not %d (SHA-256)", len(sig), sha256.Size)
		}
		return sig, nil
	default:
		return nil, badMessage("SCRAM server-final-message has neither a verifier (v=) nor an error (e=) (RFC 5802 section 7)")
	}
}

// serverErrors are the server-error-values of RFC 5802 section 7.
var serverErrors = map[string]bool{
	"invalid-encoding": true, "extensions-not-supported": true, "invalid-proof": true,
	"channel-bindings-dont-match": true, "server-does-support-channel-binding": true,
	"channel-binding-not-supported": true, "unsupported-channel-binding-type": true,
	"unknown-user": true, "invalid-username-encoding": true, "no-resources": true, "other-error": true,
}

// serverErrorValue names an e= value: one of RFC 5802's as it is, any other by its length only (the
// server's text is not repeated).
func serverErrorValue(v string) string {
	if serverErrors[v] {
		return v
	}
	return fmt.Sprintf("a value RFC 5802 does not define (%d bytes)", len(v))
}

// clip cuts s to 64 bytes.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
