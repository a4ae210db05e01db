package connstring

// Empty values. libpq reads a key given an empty value as that value, from every source the
// connector reads: a keyword/value string's key='' (fe-connect.c, conninfo_parse), a URL's
// ?key= (conninfo_uri_parse_params), a service file's "key=" (parseServiceFile) and an
// environment variable set to "" (conninfo_add_defaults takes a variable that is set as the
// value; only conninfo_array_parse, of PQconnectdbParams, skips empty values). What libpq 18
// then does with "" depends on the key:
//   - the keys of refusedEmpty are refused before anything is sent, with libpq's message
//     (emptyMessage), and service (readService: `definition of service "" not found`);
//   - application_name, fallback_application_name, client_encoding, options and replication
//     are not sent to the server (build_startup_packet sends only values that are not empty;
//     an empty application_name is still chosen over fallback_application_name): runtimeParams
//     drops them, and libpqRewrites gives pgx PGAPPNAME="" as application_name='';
//   - hostaddr and the OAuth keys are as if not given (Settings.hostaddrs, libpqKeys);
//   - sslsni is off, the TLS protocol versions have no bound, sslrootcert, sslcrl, sslcert and
//     sslkey are the files under ~/.postgresql (tlskeys.go);
//   - the others are as if not given, as pgx takes them too: host, port, user, dbname,
//     password, passfile, require_auth, requirepeer, gsslib, gssdelegation, sslcompression,
//     sslkeylogfile; requiressl means sslmode=prefer.
//
// pgx took an empty mode for its default: an empty sslmode for prefer, which goes on in
// plaintext after the server's "N", password and all. checkEmpty refuses what libpq refuses,
// before pgx parses anything. The root's TestEmptyValuesMatchLibpq18 holds libpq 18's outcome
// for every keyword and source and checks the connector against it.

// refusedEmpty are the keywords whose empty value libpq 18 refuses before it connects, each with
// the rest of the connector's message: what the value must be.
var refusedEmpty = map[string]string{
	// fe-connect.c, pqConnectOptions2: "invalid %s value: \"%s\"".
	"sslmode":              "must be " + oneOf(sslModes),
	"sslcertmode":          "must be " + oneOf(sslCertModes),
	"sslnegotiation":       "must be one of postgres, direct",
	"gssencmode":           "must be one of disable, prefer, require",
	"channel_binding":      "must be " + oneOf(channelBindings),
	"target_session_attrs": "must be " + oneOf(targetSessionAttrs),
	"load_balance_hosts":   "must be one of disable, random",
	"min_protocol_version": "must be " + oneOf(protocolVersions),
	"max_protocol_version": "must be " + oneOf(protocolVersions),
	// pqParseIntParam: "invalid integer value \"%s\" for connection option \"%s\"", when a
	// connect to a TCP address starts, before anything is sent (for a Unix socket libpq reads
	// none of these; the connector refuses them whatever the hosts, as any bad value of them).
	"connect_timeout":     "must be a whole number of seconds, 0 or more",
	"keepalives":          "must be an integer",
	"keepalives_idle":     "must be an integer",
	"keepalives_interval": "must be an integer",
	"keepalives_count":    "must be an integer",
	"tcp_user_timeout":    "must be an integer",
	// pqConnectOptions2: the decoded key must be SCRAM_MAX_KEY_LEN bytes.
	"scram_client_key": "SCRAM pass-through keys are not supported",
	"scram_server_key": "SCRAM pass-through keys are not supported",
}

// emptyMessage is libpq 18's message for an empty value of key, one of refusedEmpty's.
func emptyMessage(key string) string {
	switch key {
	case "connect_timeout", "keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count", "tcp_user_timeout":
		return `invalid integer value "" for connection option "` + key + `"`
	case "scram_client_key":
		return "invalid SCRAM client key length: 0"
	case "scram_server_key":
		return "invalid SCRAM server key length: 0"
	}
	return "invalid " + key + ` value: ""`
}

// checkEmpty refuses the first keyword of refusedEmpty whose value, with libpq's precedence
// (the string, then the service file, then the environment, a variable set to "" included), is
// empty; the message is libpq's, then where the value came from and what it must be.
func (v *values) checkEmpty() *ParseError {
	for _, k := range keywords {
		rest, refused := refusedEmpty[k.Name]
		if !refused {
			continue
		}
		if k.Name == "sslmode" {
			// requiressl in the string is an sslmode, unless a later sslmode replaces it.
			if _, ok := v.inString("requiressl"); ok && !v.after("requiressl", "sslmode") {
				continue
			}
		}
		val, src, ok := v.get(k.Name, k.Env, true)
		if !ok || val != "" {
			continue
		}
		msg := emptyMessage(k.Name)
		switch {
		case src.env != "":
			msg += " (from " + src.env + ")"
		case src.service:
			msg += " (from the service file)"
		}
		return &ParseError{Key: k.Name, Env: src.env, msg: msg + ": " + rest}
	}
	return nil
}
