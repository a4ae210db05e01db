package harness

// SetClientCRL makes the server check client certificates against the certificate revocation
// lists crlPEM (PEM "X509 CRL" blocks: ssl_crl_file, a file in the data directory) and reloads
// it, returning once new connections are checked with them; nil removes the setting. PostgreSQL
// loads them into the store of ssl_ca_file (be-secure-openssl.c, be_tls_init, with
// X509_V_FLAG_CRL_CHECK | X509_V_FLAG_CRL_CHECK_ALL): set the client CA first (SetClientCA), and
// give a CRL of each CA of the client's chain. A revoked client certificate then fails the
// handshake with the TLS alert certificate_revoked. The server must have TLS (Options.TLS or
// SetSSL(true)); a file the server cannot load is an error, and the previous setting stays.
func (p *Postgres) SetClientCRL(crlPEM []byte) error {
	return p.setTLSFile("SetClientCRL", "ssl_crl_file", "client_crl.pem", crlPEM)
}
