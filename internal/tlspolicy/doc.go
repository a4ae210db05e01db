// Package tlspolicy holds the rules by which the connector sets up TLS to a PostgreSQL server
// where libpq's behaviour differs from crypto/tls's (libpq-connect.html, "Parameter Key Words";
// fe-secure-openssl.c):
//   - the check of the server's certificate against the root certificate file (sslrootcert) or
//     the system's roots, under sslmode (ServerCheck; see server.go for the rules): the chain
//     must end at a self-signed certificate of the file, as OpenSSL without
//     X509_V_FLAG_PARTIAL_CHAIN (chain.go: the one chain OpenSSL's build_chain builds, to its
//     depth of 100, no signature checked before the chain reaches an anchor of the file; with
//     sslrootcert=system or an application's pool, whose certificates cannot be listed,
//     crypto/x509 looks for the anchor, within its own cap of 100 signature checks), then CRLs,
//     then under verify-full the host name by
//     libpq's rules, the Common Name only without a subjectAltName of the host's kind
//     (hostname.go); the parsed file is reused only while its stat (ctime included) or its
//     content is unchanged (RootCache);
//   - the certificate revocation lists of sslcrl and sslcrldir (CRLStore), which libpq loads
//     into OpenSSL's X509_STORE with X509_V_FLAG_CRL_CHECK | X509_V_FLAG_CRL_CHECK_ALL
//     (initialize_SSL);
//   - the client certificate and key of sslcert, sslkey and sslpassword, read at each connection
//     and sent whatever CAs the server lists (ClientCert; see clientcert.go for the rules);
//   - the key log file of sslkeylogfile (KeyLogFile; libpq 18, SSL_CTX_keylog_cb);
//   - the SNI of sslsni (SNIName; initialize_SSL);
//   - the values and the range of ssl_min_protocol_version and ssl_max_protocol_version
//     (ParseProtocolVersion, ProtocolRangeValid; fe-connect.c, sslVerifyProtocolVersion and
//     sslVerifyProtocolRange).
//
// A CRLStore checks every certificate of a verified chain, the root included, as OpenSSL 3's
// x509_vfy.c does (check_revocation, get_crl_sk, get_crl_score, crl_crldp_check, check_crl,
// cert_crl): each needs a CRL from its issuer (the next certificate, or itself for the
// self-signed root), from the sslcrl file or from the sslcrldir directories, whose files are
// looked up as OpenSSL's by_dir.c looks them up (<issuer name hash>.r0, .r1, ... as "openssl
// rehash" names them; other names are not read; a directory that does not exist has none). A
// chain must end at a self-signed root (one that ends elsewhere fails: "unable to get CRL issuer
// certificate"). CRLs of version 1 (RFC 5280, 5.1.2.1: no version field, as "openssl ca
// -gencrl" writes them without extensions, and as PostgreSQL's SSL tests use them) and of
// version 2 are read alike, as OpenSSL's x_crl.c reads both; crypto/x509 parses version 2 only,
// so a version 1 CRL is handed to it with the version put in, its signature checked over its own
// encoding. The
// CRL chosen is, as OpenSSL chooses, the one in time (thisUpdate <= now <= nextUpdate), in scope
// (the certificate's distribution points, RFC 5280 4.2.1.13, their cRLIssuer and reasons, against
// the CRL's issuingDistributionPoint, 5.2.5), without an unhandled critical extension, and the
// newest, among those whose authorityKeyIdentifier (5.2.1: key identifier, issuer name, serial
// number) matches the issuer's certificate; it must be signed by the issuer's key, the issuer's
// key usage (if any) must allow CRL signing (4.2.1.3), it must be in time (an expired CRL
// fails), and must not list the certificate. CRLs are chosen until they cover every reason of the
// distribution point they match. A certificate without a CRL fails ("unable to get certificate
// CRL"). Names are compared in OpenSSL's canonical form (x509_name_canon).
//
// What differs from libpq (15 to 18, with OpenSSL 3):
//   - The server's certificate list is read up to crypto/tls's bound (256 KiB); OpenSSL refuses
//     a Certificate message above 100 KiB (SSL_CTX_set_max_cert_list's default) with "excessive
//     message size". A longer list is refused for its chain (built alike, to depth 100): one
//     that chains to nothing within the depth says "certificate chain too long".
//   - A CRL whose version is neither v1 nor v2 does not parse (crypto/x509's refusal, kept);
//     OpenSSL 3.0 reads any version number.
//   - sslcrl and the files of sslcrldir may be DER as well as PEM; libpq (OpenSSL's
//     X509_STORE_load_locations) reads PEM only and, given a DER sslcrl, checks no revocation
//     at all. A CRL that does not parse is an error; libpq then silently checks nothing.
//     Certificates in sslcrl count as loaded (they turn the check on, as in libpq) but, unlike
//     in libpq, are not trusted.
//   - Indirect CRLs and CRLs for some reasons only are never used, as by OpenSSL without
//     X509_V_FLAG_EXTENDED_CRL_SUPPORT. A delta CRL (5.2.4) is taken for a complete one as
//     OpenSSL 3.0 takes it (the newest CRL may be a delta, which then decides), and the chain
//     must also pass without delta CRLs, as current OpenSSL checks it: a delta alone, or a newer
//     delta that does not repeat its base's revocations, fails where OpenSSL 3.0 accepts. A
//     certificate with a distribution point of neither name nor cRLIssuer fails the CRL check;
//     OpenSSL refuses such a certificate with or without CRLs.
//
// Reading the files (which files, with what limits, and the messages for one that cannot be
// read) is the caller's: the store reads the directories' files through the ReadFunc it is given.
//
// The rules are tested here in part (the name hash, the distribution points' fuzz target) and as
// a whole beside `openssl verify -crl_check_all` in internal/connstring's tlskeys_test.go
// (TestCRLChecksMatchOpenSSL), where the connection-string keys build the checks; the fixtures
// come from internal/testpki.
package tlspolicy
