// Package negotiate holds, in its tests only, PostgreSQL's own client suites on transport
// negotiation, Kerberos and host selection, written again as the project's data and run
// beside libpq: each case asserts the outcome the upstream script expects, that psql (libpq)
// against the same server gives it too, and that the connector gives it, on a new Connector
// (cold) and, for the negotiation cases, again on the same one (warm) with no more TCP
// connections than the first.
//
// The upstream files, from postgres/postgres (the project's reference is the REL_18 branch
// point, 2652835d3e; the copies these cases were written from are those of commits 19c6e92b13
// for 005 and 0245f8db36 for 001_auth.pl, 003 and 004):
//
//   - src/interfaces/libpq/t/005_negotiate_encryption.pl (table005_test.go, run005_test.go,
//     negotiate005_test.go): its four tables (user x gssencmode x sslmode x sslnegotiation ->
//     EVENTS and OUTCOME), its server set-up (the roles testuser, ssluser, nossluser,
//     gssuser, nogssuser and localuser, its host, hostssl, hostnossl, hostgssenc and
//     hostnogssenc trust lines, its current_enc() function), its test_matrix cubes and its
//     Unix-socket rows. Each row goes through a proxy of its own (harness.NegotiationProxy),
//     which gives the row's TCP connections and ties the server's log lines to them by
//     port, so that rows run side by side (six at a time) with exact counts. A row asserts:
//     psql's outcome is the table's; the connector's, cold, is the table's and psql's, with
//     the table's events; warm, the same outcome on no more TCP connections than cold.
//   - src/test/kerberos/t/001_auth.pl's client cases (kerberos001_test.go): its pg_hba.conf
//     and pg_ident.conf steps (map=mymap without and with the map, hostgssenc,
//     hostnogssenc, include_realm=0, krb_realm=EXAMPLE.ORG), with the script's realm
//     EXAMPLE.COM, each case through a proxy of its own, one after the other: the outcome
//     and output of psql and the connector are the script's, the server logs the script's
//     messages (log_like) for each, and the connector's second connect opens no more TCP
//     connections than its first. The Connector of "fails without mapping" is kept and
//     connects again in the next step, once the map is there, as a long-lived client would:
//     it must then be GSS-encrypted as psql is.
//   - src/interfaces/libpq/t/003_load_balance_host_list.pl and 004_load_balance_dns.pl
//     (loadbalance_test.go, loadbalance004_linux_test.go): three nodes, load_balance_hosts
//     disable, random (50 connections, each node more than one) and an unknown value, then
//     the first two nodes stopped. 003 names the nodes by a host list (their Unix-socket
//     directories and ports, as the script does on Linux). 004's one name with three
//     addresses, pg-loadbalancetest on 127.0.0.1-3, is in a hosts file of the test's own,
//     bound on /etc/hosts in a mount namespace of a child process
//     (harness.RunInChildProcessWithHosts): psql (getaddrinfo) and the connector (Go's
//     resolver, which it uses for every host; it has no lookup hook) resolve it as on the
//     script's machine. Its node1 is a cluster on 127.0.0.1:P; node2 and node3 are clusters
//     reached at 127.0.0.2:P and 127.0.0.3:P through forwarders of the test.
//
// Where each runs, and why:
//
//   - 005's "GSS and SSL disabled" and "SSL enabled" tables and its Unix-socket rows:
//     PostgreSQL 18 (the registry build of /opt/pgconnector) with psql on libpq 18
//     (harness.Libpq18Env). The events are read from the server log as the script reads
//     them (log_connections, trace_connection_negotiation = on; parse_log_events), and
//     psql's events must be the table's too.
//   - 005's "GSS enabled" and "both enabled" tables, and 001_auth.pl: PostgreSQL 15 from
//     Debian, the only server here built with GSSAPI, with a KDC of the harness and psql on
//     libpq 15 (the libpq 18 here has no GSSAPI). PostgreSQL 15 has no
//     trace_connection_negotiation: 005's events are the proxy's (the requests and the
//     server's one-byte answers) and the log's "connection authorized" (authok) and "no
//     pg_hba.conf entry" (authfail) lines. psql's outcome must be the table's; its events are
//     logged only, libpq 15 differing from the table's libpq 18 in four rows (after an
//     authentication failure under sslmode=allow it tries again: gssuser disable allow with
//     GSS on; nogssuser require allow, GSS on and both on; ssluser require allow, both on).
//     The strings leave out sslnegotiation (libpq 15 does not know it), and the host is
//     localhost, the name of the service principal in the server's keytab
//     (postgres/localhost), where the scripts have names of their own.
//   - 003 and 004: PostgreSQL 18 with psql on libpq 18 (load_balance_hosts is libpq 16's).
//
// Not run, and why:
//
//   - 005's rows with sslnegotiation=direct in the two GSS tables (listed at tableGSSOn005
//     and tableBothOn005): they need PostgreSQL 17+ built with GSSAPI, and a libpq with both
//     sslnegotiation and GSSAPI as the oracle; the 16-18 builds here have no GSSAPI. 005's
//     injection-point cases (backenderror, v2error) need the injection_points extension,
//     which neither build has.
//   - 001_auth.pl on PostgreSQL 15: delegation (gssdeleg, gss_accept_deleg,
//     credentials_delegated, deleg_credentials in the log: PostgreSQL 16), so its queries and
//     messages leave it out; SYSTEM_USER (PostgreSQL 16); the server's own connections
//     through dblink and postgres_fdw. Its require_auth cases are checked against the
//     script's expectation alone: libpq 15 has no require_auth, and the libpq 18 here no
//     GSSAPI.
package negotiate
