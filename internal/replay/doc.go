// Package replay hands a PostgreSQL session that is already established (authenticated, at its
// first ReadyForQuery) to a client that insists on opening it itself: pgx.ConnectConfig, which
// pgxpool calls for every connection and which cannot take an established *pgconn.PgConn.
//
// The client is given a [Conn] as the result of its dial. It writes its StartupMessage, which
// the Conn swallows (the server has had one already), and reads the server's greeting again as
// [Greeting] encodes it from what the real session received: NegotiateProtocolVersion when the
// server negotiated one, AuthenticationOk, every ParameterStatus, BackendKeyData and
// ReadyForQuery. From then on every byte goes to and from the established connection unchanged
// (a TLS connection, a GSSAPI-encrypting one or a plain socket).
//
// The client's later CancelRequest dials are not connects: [CancelConn] takes the CancelRequest
// the client writes and hands it to a function that sends it the way the real session's own
// client would have (on a socket of its own, encrypted as that session's was).
//
// [Recorder] watches the real session's startup for the one message [Greeting] cannot rebuild
// from pgconn.HijackedConn: NegotiateProtocolVersion.
package replay
