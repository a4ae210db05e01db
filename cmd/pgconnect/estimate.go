package main

// What libpq and pgx would have spent on the same server, estimated from the server's answers
// that pgconnector observed. Neither remembers anything between connections, so the estimate is
// the same for every connection, cold or warm.

// Answers are what a server answered pgconnector's requests on one host.
type Answers struct {
	// SSL is the answer to SSLRequest: "S", "N", or "" when it was never asked.
	SSL string `json:"ssl,omitempty"`
	// GSS is the answer to GSSENCRequest: "G", "N", or "" when it was never asked.
	GSS string `json:"gss,omitempty"`
	// GSSEstablished is true when GSS encryption was established and the startup accepted on it;
	// with GSS "G" and GSSEstablished false, the server (pg_hba without a hostgssenc line, no
	// keytab) refused GSS after 'G'.
	GSSEstablished bool `json:"gss_established,omitempty"`
	// OAuth is true when the server asked for SASL OAUTHBEARER (a pg_hba oauth line, PostgreSQL
	// 18).
	OAuth bool `json:"oauth,omitempty"`
}

// Modes are the client's modes and whether it holds Kerberos credentials.
type Modes struct {
	SSLMode     string // disable, allow, prefer, require, verify-ca, verify-full
	GSSEncMode  string // disable, prefer, require
	Credentials bool   // a Kerberos ticket (or keytab) is at hand: libpq sends GSSENCRequest only then
}

// Cost is one client's estimated connect to the host: sockets opened (each one a server backend:
// the postmaster forks one per accepted connection), round trips before the StartupMessage (one
// per TCP handshake, SSLRequest, GSSENCRequest, TLS handshake with TLS 1.3, and GSS context), and
// the transport it would end on.
type Cost struct {
	Client     string `json:"client"`
	Transport  string `json:"transport"` // plain, tls, gss, or "fails"
	Sockets    int    `json:"sockets"`
	Backends   int    `json:"backends"`
	RoundTrips int    `json:"round_trips"`
	Note       string `json:"note,omitempty"`
}

// EstimateLibpq applies libpq's rules (libpq-connect.html, sslmode and gssencmode; fe-connect.c,
// PQconnectPoll: CONNECTION_GSS_STARTUP, CONNECTION_SSL_STARTUP):
//
//	GSSENCRequest first when gssencmode is not disable and credentials are at hand
//	  'G' and established      -> GSS encryption, no SSLRequest
//	  'G' and refused later    -> gssencmode=prefer: close, new socket without GSS (2nd backend)
//	  'N'                      -> SSLRequest on the same socket
//	SSLRequest when sslmode is prefer, require or verify-* (allow: plaintext first)
//	  'S'                      -> TLS handshake
//	  'N'                      -> prefer: plaintext startup on the same socket; require: fails
//	OAUTHBEARER asked for      -> everything again: a discovery exchange with an empty token on
//	                              the first connection, the token on a second (fe-auth-oauth.c;
//	                              measured with libpq 18.4: two backends per connect, one only
//	                              when oauth_issuer is the issuer's .well-known URI)
func EstimateLibpq(m Modes, a Answers) Cost {
	c := estimateLibpq(m, a)
	if !a.OAuth || c.Transport == "fails" {
		return c
	}
	c.Sockets *= 2
	c.Backends *= 2
	c.RoundTrips *= 2
	return withNote(c, "OAUTHBEARER: an empty token first, then a new connection with the token, on every connect; one when oauth_issuer is the issuer's .well-known URI")
}

func estimateLibpq(m Modes, a Answers) Cost {
	c := Cost{Client: "libpq", Sockets: 1, RoundTrips: 1}
	if m.GSSEncMode != "disable" && m.Credentials {
		c.RoundTrips++ // GSSENCRequest
		switch {
		case a.GSS == "G" && a.GSSEstablished:
			c.RoundTrips++ // GSS context
			c.Transport = "gss"
			c.Backends = c.Sockets
			return c
		case a.GSS == "G":
			c.RoundTrips++ // GSS context, refused at or after it
			if m.GSSEncMode == "require" {
				return fail(c, "GSS encryption required, refused by the server")
			}
			c.Sockets++
			c.RoundTrips++ // TCP handshake of the second socket
			c.Note = "GSS refused after 'G': a new connection without GSS"
		case a.GSS == "N":
			if m.GSSEncMode == "require" {
				return fail(c, "GSS encryption required, server answered N")
			}
		}
	} else if m.GSSEncMode == "require" {
		return fail(c, "GSS encryption required, no credentials")
	}
	return sslStep(c, m, a, false)
}

// EstimatePgx applies pgx v5's rules (pgconn.ParseConfig and connectPreferred): no GSS encryption
// at all (gssencmode is not a pgx key: sent as a run-time parameter, the server rejects it,
// 42704); sslmode=prefer is a TLS attempt and, on 'N', a fallback configuration that dials again
// without TLS (a second socket and backend); sslmode=allow the reverse order. OAUTHBEARER costs
// nothing more: pgx (v5.9+) sends the token of its OAuthTokenProvider in the first message.
func EstimatePgx(m Modes, a Answers) Cost {
	c := Cost{Client: "pgx", Sockets: 1, RoundTrips: 1}
	if m.GSSEncMode == "require" {
		return fail(c, "pgx has no GSS encryption")
	}
	c = sslStep(c, m, a, true)
	if a.GSSEstablished && c.Transport != "fails" {
		c.Note = "no GSS encryption in pgx: gets in only if pg_hba has a line without hostgssenc"
	}
	if a.OAuth && c.Transport != "fails" {
		c = withNote(c, "OAUTHBEARER: the token first with OAuthTokenProvider, which it calls on every connect")
	}
	return c
}

// withNote adds note to c's.
func withNote(c Cost, note string) Cost {
	if c.Note != "" {
		note = c.Note + "; " + note
	}
	c.Note = note
	return c
}

func sslStep(c Cost, m Modes, a Answers, pgx bool) Cost {
	switch m.SSLMode {
	case "disable", "allow":
		c.Transport = "plain"
	default: // prefer, require, verify-ca, verify-full
		c.RoundTrips++ // SSLRequest
		switch a.SSL {
		case "S":
			c.RoundTrips++ // TLS handshake
			c.Transport = "tls"
		case "N":
			if m.SSLMode != "prefer" {
				return fail(c, "sslmode="+m.SSLMode+", server answered N")
			}
			c.Transport = "plain"
			if pgx {
				c.Sockets++
				c.RoundTrips++ // TCP handshake of the fallback socket
				c.Note = "'N' to SSLRequest: closes and dials again without TLS"
			}
		default:
			c.Transport = "unknown"
			c.Note = "the server's answer to SSLRequest is unknown (not asked)"
		}
	}
	c.Backends = c.Sockets
	return c
}

func fail(c Cost, why string) Cost {
	c.Transport = "fails"
	c.Note = why
	c.Backends = c.Sockets
	return c
}
