// Package negotiate holds, in its tests only, PostgreSQL's own client suites on transport
// negotiation, written again as the project's data and run beside libpq: each case asserts
// the outcome the upstream script expects, that psql (libpq) on the same server gives it
// too, and that the connector gives it, on a new Connector (cold) and on the same one a
// second time (warm).
//
// The upstream files, read from postgres/postgres (the REL_18 branch point is 2652835d3e; the
// text was read at 19c6e92b13 for 005):
//
//   - src/interfaces/libpq/t/005_negotiate_encryption.pl: its four tables (user x gssencmode x
//     sslmode x sslnegotiation -> EVENTS and OUTCOME) in table005_test.go, with its server
//     set-up (the roles testuser, ssluser, nossluser, gssuser, nogssuser and localuser, its
//     host, hostssl, hostnossl, hostgssenc and hostnogssenc trust lines, its current_enc()
//     function) and its test_matrix cubes. Each row goes through a proxy of its own
//     (harness.NegotiationProxy), which gives the row's TCP connections and ties the server's
//     log lines to them by port, so that rows run side by side with exact counts. A row
//     asserts: psql's outcome is the table's; the connector's, cold, is the table's with the
//     table's events; warm, the same outcome on no more TCP connections than cold.
//
// Where each table runs, and why:
//
//   - "GSS and SSL disabled" and "SSL enabled" (GSS disabled): PostgreSQL 18, the registry
//     build of /opt/pgconnector, with psql on libpq 18 (harness.Libpq18Env). The events are
//     read from the server log as the script reads them (log_connections,
//     trace_connection_negotiation = on; parse_log_events), and psql's events must be the
//     table's too. The Unix-socket rows run there as well, one after the other.
//   - "GSS enabled" (SSL off) and "both enabled": PostgreSQL 15 from Debian, the only server
//     here built with GSSAPI, with a KDC of the harness and psql on libpq 15, without
//     sslnegotiation (libpq 15 does not know it). PostgreSQL 15 has no
//     trace_connection_negotiation: the events are the proxy's (the requests and the
//     server's one-byte answers) and the log's "connection authorized" (authok) and "no
//     pg_hba.conf entry" (authfail) lines. psql's outcome must be the table's; its events are
//     logged only, libpq 15 differing from the table's libpq 18 in four rows (after an
//     authentication failure under sslmode=allow it tries again: gssuser disable allow with
//     GSS on; nogssuser require allow, GSS on and both; ssluser require allow, both).
//   - Not run: the rows with sslnegotiation=direct of the two GSS tables (listed at
//     tableGSSOn005 and tableBothOn005). They need PostgreSQL 17+ built with GSSAPI, and a
//     libpq with both sslnegotiation and GSSAPI as oracle; the 16-18 builds here have no
//     GSSAPI. The script's injection-point cases (backenderror, v2error) need the
//     injection_points extension, which neither build has.
//
// The host name: the script's enc-test-localhost.postgresql.example.com (with
// hostaddr=127.0.0.1) on the SSL tables; localhost on the GSS tables, the name of the
// service principal in the server's keytab (postgres/localhost).
package negotiate
