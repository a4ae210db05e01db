package connstring

// Status says what the connector does with a libpq connection keyword.
type Status uint8

const (
	// Honoured: the key has libpq's meaning.
	Honoured Status = iota + 1
	// NoEffect: the key is accepted and does nothing, for the reason its note gives.
	NoEffect
	// Rejected: a connection string with the key is an error of New.
	Rejected
)

func (s Status) String() string {
	switch s {
	case Honoured:
		return "honoured"
	case NoEffect:
		return "accepted, no effect"
	case Rejected:
		return "rejected"
	}
	return "unknown"
}

// Keyword is one libpq connection keyword (libpq-connect.html, "Parameter Key Words"; the
// PQconninfoOptions table of fe-connect.c) and what the connector does with it.
type Keyword struct {
	Name   string // the key, as in a connection string or a URL query
	Env    string // the environment variable libpq reads for it, or ""
	Since  string // the libpq major version that added it: "15" for every key of 15 and before
	Status Status
	Note   string // how, or why not
}

// Keywords lists every keyword of libpq 15 to 18. None of them is ever sent to the server as a
// run-time parameter unless libpq sends it too (application_name, client_encoding, options and
// replication go in the StartupMessage in both).
func Keywords() []Keyword { return append([]Keyword(nil), keywords...) }

// keywords is the table. A new keyword is a row here (its Env is then read with libpq's
// precedence, and the key is kept from the server unless sentToServer says otherwise), what it
// does in Parse (settings.go, or tlskeys.go for a TLS key), a row in docs/connection-strings.md
// (TestDocsKeywordTable), a value that parses in TestNoLibpqKeyIsSentToTheServer, and a case
// beside psql in the root's conformance tests (TestKeywordsMatchPsql), which name what libpq
// version they need.
var keywords = []Keyword{
	{"host", "PGHOST", "15", Honoured, "names, IP addresses or Unix-socket directories, comma-separated; with hostaddr, names the server for Kerberos, TLS and .pgpass"},
	{"hostaddr", "PGHOSTADDR", "15", Honoured, "numeric addresses, one per host, used without DNS; an empty entry resolves its host; an address for a Unix-socket host is an error"},
	{"port", "PGPORT", "15", Honoured, "one for all hosts or one per host"},
	{"dbname", "PGDATABASE", "15", Honoured, "a connection string in dbname is not expanded (libpq expands it only for PQconnectdbParams' expand_dbname)"},
	{"user", "PGUSER", "15", Honoured, ""},
	{"password", "PGPASSWORD", "15", Honoured, "never shown in errors or spans"},
	{"passfile", "PGPASSFILE", "15", Honoured, "read at each connect and looked up for each host apart, by its name (else hostaddr) and port, as libpq: a host without an entry gets no password, never another host's; a file that is not a plain file or that group or others may access is ignored, as libpq; over 1 MiB is an error"},
	{"require_auth", "PGREQUIREAUTH", "16", Honoured, "read as libpq 18 reads it (no white space trimmed), a bad value refused with libpq's reason; a GSS-encrypted channel satisfies gss; a refusal fails the connect"},
	{"channel_binding", "PGCHANNELBINDING", "15", Honoured, "a refusal fails the connect"},
	{"connect_timeout", "PGCONNECT_TIMEOUT", "15", Honoured, "per host and address, as libpq 17"},
	{"client_encoding", "PGCLIENTENCODING", "15", Honoured, "sent to the server; auto means UTF8, the only encoding pgx reads"},
	{"options", "PGOPTIONS", "15", Honoured, "sent to the server"},
	{"application_name", "PGAPPNAME", "15", Honoured, "sent to the server"},
	{"fallback_application_name", "", "15", Honoured, "sent as application_name when none is given"},
	{"keepalives", "", "15", Honoured, "0 turns TCP keepalives off; without any keepalive key, pgx's dialer (a probe after 5 minutes idle), with one, the others take the system's defaults as in libpq"},
	{"keepalives_idle", "", "15", Honoured, "seconds (TCP_KEEPIDLE)"},
	{"keepalives_interval", "", "15", Honoured, "seconds (TCP_KEEPINTVL)"},
	{"keepalives_count", "", "15", Honoured, "probes (TCP_KEEPCNT)"},
	{"tcp_user_timeout", "", "15", Honoured, "milliseconds (TCP_USER_TIMEOUT, Linux)"},
	{"replication", "", "15", Honoured, "sent to the server; database/sql cannot speak the replication protocol"},
	{"gssencmode", "PGGSSENCMODE", "15", Honoured, "disable, prefer (default), require"},
	{"sslmode", "PGSSLMODE", "15", Honoured, ""},
	{"requiressl", "PGREQUIRESSL", "15", Honoured, "deprecated: 1 means sslmode=require, else prefer; a later sslmode in the string wins; PGREQUIRESSL only when nothing else sets sslmode; an error in a service file, as libpq"},
	{"sslnegotiation", "PGSSLNEGOTIATION", "17", Honoured, "direct with sslmode disable, allow or prefer is an error, as libpq 17; direct TLS where the server selects no ALPN postgresql is refused, nothing sent (libpq 17); without it, postgres (SSLRequest) except for hosts learned to take direct TLS (see The cache)"},
	{"sslcompression", "PGSSLCOMPRESSION", "15", NoEffect, "servers since PostgreSQL 14 refuse TLS compression, and libpq ignores it too"},
	{"sslcert", "PGSSLCERT", "15", Honoured, "PEM, the certificate then its chain; read at each connection (a replaced file is used); no such file: no certificate, sslkey unread; sent whatever CAs the server lists"},
	{"sslkey", "PGSSLKEY", "15", Honoured, "files only (no OpenSSL engine); PEM or DER (PKCS#1, SEC 1, PKCS#8), encrypted PEM (legacy or PKCS#8) with sslpassword; refused with group or world access (0640 when root owns it), as libpq"},
	{"sslkeylogfile", "", "18", Honoured, "TLS key log in NSS format, appended (mode 0600) to a regular file only (a FIFO or device gets nothing); a line that cannot be written is dropped"},
	{"sslpassword", "", "15", Honoured, "never shown; decrypts an encrypted PEM sslkey; an encrypted key without it fails (libpq would prompt on the terminal); no environment variable, as libpq"},
	{"sslcertmode", "PGSSLCERTMODE", "16", Honoured, "require fails the connect when no certificate was sent"},
	{"sslrootcert", "PGSSLROOTCERT", "15", Honoured, "read at each connection, default ~/.postgresql/root.crt; when it exists the server is verified under every sslmode (require acts as verify-ca; prefer and allow go on in plaintext when it does not verify), as libpq; verify-ca and verify-full without it fail before the TLS handshake (root certificate file \"...\" does not exist): the system roots are never used unless sslrootcert=system, which means sslmode=verify-full when sslmode is not given and is an error with a weaker one, as libpq 16"},
	{"sslcrl", "PGSSLCRL", "15", Honoured, "checked on every certificate of a verified chain (OpenSSL's CRL_CHECK_ALL), at each handshake; default ~/.postgresql/root.crl; PEM or DER; a file that exists but cannot be read fails the connect (libpq then checks nothing)"},
	{"sslcrldir", "PGSSLCRLDIR", "15", Honoured, "files named as openssl rehash names them; a missing directory fails verification, as in libpq"},
	{"sslsni", "PGSSLSNI", "15", Honoured, "0: no SNI (verify-full still checks the host name); never sent for an IP address, as libpq"},
	{"requirepeer", "PGREQUIREPEER", "15", Honoured, "Unix sockets, SO_PEERCRED (Linux); a mismatch fails the connect"},
	{"ssl_min_protocol_version", "PGSSLMINPROTOCOLVERSION", "15", Honoured, "TLSv1 to TLSv1.3, any letter case; default TLSv1.2"},
	{"ssl_max_protocol_version", "PGSSLMAXPROTOCOLVERSION", "15", Honoured, ""},
	{"min_protocol_version", "PGMINPROTOCOLVERSION", "18", Honoured, "as pgx; a server that offers less fails the connect, no other host, as libpq 18"},
	{"max_protocol_version", "PGMAXPROTOCOLVERSION", "18", Honoured, "as pgx"},
	{"krbsrvname", "PGKRBSRVNAME", "15", Honoured, ""},
	{"gsslib", "PGGSSLIB", "15", Honoured, "gssapi is the only library off Windows: sspi is an error, any other value is ignored as libpq ignores it"},
	{"gssdelegation", "PGGSSDELEGATION", "16", Honoured, "0 or 1 (a value starting with 1 is on, any other off, as libpq reads it); 1 forwards a forwardable ticket-granting ticket (kinit -f) in the GSS context, encrypted or not; without one the connection goes without, as libpq with MIT krb5; servers keep it from PostgreSQL 16 with gss_accept_delegation = on"},
	{"scram_client_key", "", "18", Rejected, "SCRAM pass-through keys are not supported"},
	{"scram_server_key", "", "18", Rejected, "SCRAM pass-through keys are not supported"},
	{"service", "PGSERVICE", "15", Honoured, "servicefile, else PGSERVICEFILE, else ~/.pg_service.conf, then $PGSYSCONFDIR/pg_service.conf, read as libpq reads them"},
	{"target_session_attrs", "PGTARGETSESSIONATTRS", "15", Honoured, "any, read-write, read-only, primary, standby, prefer-standby; from the server's reported state, without a query on PostgreSQL 14+"},
	{"load_balance_hosts", "PGLOADBALANCEHOSTS", "16", Honoured, "disable, random"},
	{"oauth_issuer", "", "18", Honoured, "an https issuer identifier, or its /.well-known/openid-configuration or oauth-authorization-server URI (then no discovery message: the token goes in the first message); the issuer of the server's discovery URI must equal it byte for byte, else no token is sent, as libpq"},
	{"oauth_client_id", "", "18", Honoured, "the device flow's client; not required with a token function (libpq 18 requires it whatever supplies the token)"},
	{"oauth_client_secret", "", "18", Honoured, "never shown; sent only to the issuer's token endpoint"},
	{"oauth_scope", "", "18", Honoured, "replaces the scope the server asks for"},
}

// sentToServer are the libpq keys that libpq itself puts in the StartupMessage.
var sentToServer = map[string]bool{"application_name": true, "client_encoding": true, "options": true, "replication": true}
