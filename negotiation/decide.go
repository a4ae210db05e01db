package negotiation

import (
	"errors"
	"strings"
)

// Method is one way of opening the channel on a socket, in the order libpq tries them.
type Method uint8

const (
	// MethodGSS sends GSSENCRequest (Int32 8, Int32 80877104) and, on 'G', establishes GSSAPI
	// encryption (protocol-flow.html "GSSAPI Session Encryption").
	MethodGSS Method = iota + 1
	// MethodSSL sends SSLRequest (Int32 8, Int32 80877103) and, on 'S', performs the TLS handshake.
	MethodSSL
	// MethodDirectSSL starts the TLS handshake at once with ALPN "postgresql" (sslnegotiation=direct, PostgreSQL 17+).
	MethodDirectSSL
	// MethodPlain sends the StartupMessage in plaintext.
	MethodPlain
)

var methodNames = [...]string{"", "gss", "ssl", "direct-ssl", "plain"}

func (m Method) String() string {
	if int(m) < len(methodNames) && m != 0 {
		return methodNames[m]
	}
	return "unknown"
}

// Transport is the protection of an established connection.
func (m Method) Transport() string {
	switch m {
	case MethodGSS:
		return "gss"
	case MethodSSL, MethodDirectSSL:
		return "tls"
	case MethodPlain:
		return "plain"
	}
	return ""
}

// Answer is what a server answered to SSLRequest or GSSENCRequest, as remembered.
type Answer uint8

const (
	AnswerUnknown Answer = iota // never asked, or forgotten
	AnswerYes                   // 'S' to SSLRequest, 'G' to GSSENCRequest
	AnswerNo                    // 'N' (or, for GSS, a channel that could not be established)
)

func (a Answer) String() string {
	switch a {
	case AnswerYes:
		return "yes"
	case AnswerNo:
		return "no"
	}
	return "unknown"
}

// Known is what the cache remembers about one host (and, for GSS, one client principal).
type Known struct {
	SSL Answer // answer to SSLRequest
	GSS Answer // whether GSSAPI encryption succeeded (AnswerYes) or could not (AnswerNo)
	// GSSGeneration is the credentials generation the GSS answer was learned with: an answer
	// learned with other credentials (before a kinit) does not count.
	GSSGeneration uint64
	// Direct is whether the server takes direct TLS (a ClientHello with ALPN "postgresql" as
	// the first bytes, PostgreSQL 17+: protocol-flow.html "SSL Session Encryption"). AnswerYes
	// is learned from a connection over SSLRequest where the server selected ALPN postgresql
	// and reported server_version 17 or later, or from a direct TLS connection that
	// succeeded; AnswerNo from a direct TLS handshake that failed (a pooler or an older server
	// in front, a server restarted without TLS), which a later SSLRequest connection does not
	// overwrite until it expires.
	Direct Answer
}

// Input is everything the decision depends on. It holds no network state.
type Input struct {
	SSLMode    SSLMode
	GSSEncMode GSSEncMode
	// DirectSSL is sslnegotiation=direct: TLS without SSLRequest.
	DirectSSL bool
	// UnixSocket is true when the host is a Unix-domain socket directory: libpq never
	// requests SSL or GSSAPI encryption over one.
	UnixSocket bool
	// GSSCredentials is true when the client holds Kerberos credentials usable for GSSAPI.
	GSSCredentials bool
	// GSSGeneration identifies the credentials (it changes when the credential cache does).
	GSSGeneration uint64
	// Known is what the cache remembers; the zero value means nothing.
	Known Known
	// NoLearnedDirect keeps SSLRequest for every TLS attempt, whatever Known.Direct says: the
	// wire bytes are then libpq's.
	NoLearnedDirect bool
}

// Plan is the outcome of [Decide]: the methods to try, in order. After 'N' to a request the next
// method goes on on the same socket; after any other failure of a method it goes on on a new
// connection (fe-connect.c, select_next_encryption_method and its callers).
type Plan struct {
	methods [4]Method
	n       uint8
	// Skipped lists the methods libpq would have tried and this plan leaves out because of
	// what the cache remembers (each one a round trip, or a connection, saved).
	skipped [2]Method
	nskip   uint8
	// Learns is true when the first request of the plan asks a question whose answer is
	// unknown and would change later plans: concurrent connects should wait for one probe.
	Learns bool
	// use is what the cache did for the plan (CacheUse).
	use CacheUse
	// learnedDirect: the plan's direct TLS comes from Known.Direct, not from sslnegotiation.
	learnedDirect bool
}

// CacheUse is what a plan owes to the answers the cache remembers. It is the one definition of
// pgconnector.cache.hit (the connect span, for the host connected to; the decision event of each
// host) and of the decision cache hit and miss metrics.
type CacheUse uint8

const (
	// CacheUseNone: no remembered answer could have changed or confirmed the plan, so none was
	// looked for: the plan sends neither SSLRequest nor GSSENCRequest first and leaves nothing
	// out (sslmode=disable with GSS impossible or disabled, a Unix socket, sslnegotiation=direct
	// without GSS, sslmode=allow with nothing remembered).
	CacheUseNone CacheUse = iota
	// CacheUseMiss: the plan's first request is GSSENCRequest or SSLRequest, the server is not
	// remembered to accept it, and the cache left nothing out: the connect asks.
	CacheUseMiss
	// CacheUseHit: a remembered answer changed the plan (a method left out: [Plan.Skipped]) or
	// confirmed it (the server is remembered to accept the request the plan sends first: 'G' to
	// GSSENCRequest with the same credentials, 'S' to SSLRequest), or opened it with direct TLS
	// (Known.Direct).
	CacheUseHit
)

func (u CacheUse) String() string {
	switch u {
	case CacheUseMiss:
		return "miss"
	case CacheUseHit:
		return "hit"
	}
	return "none"
}

// Methods returns the methods in order. It does not allocate.
func (p *Plan) Methods() []Method { return p.methods[:p.n] }

// Skipped returns the methods left out because of the cache.
func (p *Plan) Skipped() []Method { return p.skipped[:p.nskip] }

// CacheHit reports whether the plan differs from libpq's because of a remembered answer (a
// method left out): a plan that fails may then be made again without it. It is not
// pgconnector.cache.hit, which also counts a plan a remembered answer confirmed: see
// [Plan.CacheUse].
func (p *Plan) CacheHit() bool { return p.nskip > 0 }

// LearnedDirect reports whether the plan opens TLS with a direct ClientHello because the host is
// remembered to take it (Known.Direct), where libpq would send SSLRequest. SSLRequest then
// follows it in the plan, on a new connection: a failed direct handshake never leads to
// plaintext without the server's own 'N' to SSLRequest.
func (p *Plan) LearnedDirect() bool { return p.learnedDirect }

// CacheUse returns what the plan owes to the cache.
func (p *Plan) CacheUse() CacheUse { return p.use }

func (p Plan) String() string {
	var b strings.Builder
	for i, m := range p.Methods() {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(m.String())
	}
	return b.String()
}

func (p *Plan) add(m Method)  { p.methods[p.n] = m; p.n++ }
func (p *Plan) skip(m Method) { p.skipped[p.nskip] = m; p.nskip++ }

// Errors of the decision, before any socket is opened. They match libpq's messages.
var (
	// ErrGSSNoCredentials: gssencmode=require and the client holds no Kerberos credentials
	// (libpq 17: "GSSAPI encryption required but no credential cache").
	ErrGSSNoCredentials = errors.New("gssencmode=require: GSSAPI encryption is required but no credentials are available")
	// ErrGSSUnixSocket: gssencmode=require on a Unix-domain socket (fe-connect.c,
	// init_allowed_encryption_methods).
	ErrGSSUnixSocket = errors.New("gssencmode=require: GSSAPI encryption is required but it is not supported over a local socket")
	// ErrNoMethod: the modes allow no way to connect (for example gssencmode=require with
	// sslmode=require, when GSS encryption is impossible).
	ErrNoMethod = errors.New("no connection method is allowed by sslmode and gssencmode")
)

// Decide returns the ordered methods for one host. It is pure: same input, same plan.
//
// The table, from fe-connect.c (PostgreSQL 17, init_allowed_encryption_methods):
//   - over a Unix socket only plaintext is tried; gssencmode=require is an error;
//   - GSS is allowed unless gssencmode=disable, and tried first, only with client credentials
//     (without them prefer skips it with no round trip, require is an error before dialing);
//   - SSL is allowed unless sslmode=disable or gssencmode=require;
//   - plaintext is allowed when sslmode is disable, allow or prefer and gssencmode is not require;
//   - after GSS, sslmode=allow tries plaintext then SSL, every other mode SSL then plaintext.
//
// What the cache adds, never for a mode that requires the method:
//   - gssencmode=prefer and GSS remembered as failing with the same credentials: GSS is skipped;
//   - sslmode=prefer or allow and SSLRequest remembered as refused ('N'): SSL is skipped;
//   - under any sslmode that allows TLS, without sslnegotiation=direct, a server remembered to
//     accept SSLRequest and direct TLS gets direct TLS first, one round trip fewer, and
//     SSLRequest after it (sslnegotiation=direct written by the user keeps libpq's rules).
func Decide(in Input) (Plan, error) {
	var p Plan
	if in.UnixSocket {
		if in.GSSEncMode == GSSEncModeRequire {
			return p, ErrGSSUnixSocket
		}
		p.add(MethodPlain)
		return p, nil
	}

	gssKnown := in.Known.GSS
	if in.Known.GSSGeneration != in.GSSGeneration {
		gssKnown = AnswerUnknown // learned with other credentials
	}
	gssAllowed := in.GSSEncMode != GSSEncModeDisable
	sslAllowed := in.SSLMode != SSLModeDisable && in.GSSEncMode != GSSEncModeRequire
	plainAllowed := !in.SSLMode.requiresTLS() && in.GSSEncMode != GSSEncModeRequire

	if gssAllowed {
		switch {
		case !in.GSSCredentials:
			if in.GSSEncMode == GSSEncModeRequire {
				return p, ErrGSSNoCredentials
			}
		case in.GSSEncMode == GSSEncModePrefer && gssKnown == AnswerNo:
			p.skip(MethodGSS)
		default:
			p.add(MethodGSS)
			p.Learns = in.GSSEncMode == GSSEncModePrefer && gssKnown == AnswerUnknown
		}
	}

	ssl := MethodSSL
	if in.DirectSSL {
		ssl = MethodDirectSSL
	}
	if sslAllowed && ssl == MethodSSL && !in.SSLMode.requiresTLS() && in.Known.SSL == AnswerNo {
		p.skip(MethodSSL)
		sslAllowed = false
	}
	learnSSL := sslAllowed && ssl == MethodSSL && in.Known.SSL == AnswerUnknown

	direct := sslAllowed && ssl == MethodSSL && !in.NoLearnedDirect && in.Known.SSL == AnswerYes && in.Known.Direct == AnswerYes
	addSSL := func() {
		if direct {
			p.add(MethodDirectSSL)
			p.learnedDirect = true
		}
		p.add(ssl)
	}

	if in.SSLMode == SSLModeAllow {
		if plainAllowed {
			p.add(MethodPlain)
		}
		if sslAllowed {
			addSSL()
		}
	} else {
		if sslAllowed {
			addSSL()
			if p.n == 1 && learnSSL && in.SSLMode == SSLModePrefer {
				p.Learns = true
			}
		}
		if plainAllowed {
			p.add(MethodPlain)
		}
	}
	if p.n == 0 {
		return p, ErrNoMethod
	}
	switch first := p.methods[0]; {
	case p.nskip > 0, first == MethodDirectSSL && p.learnedDirect:
		p.use = CacheUseHit
	case first == MethodGSS:
		p.use = CacheUseMiss
		if gssKnown == AnswerYes {
			p.use = CacheUseHit
		}
	case first == MethodSSL:
		p.use = CacheUseMiss
		if in.Known.SSL == AnswerYes {
			p.use = CacheUseHit
		}
	}
	return p, nil
}
