// Package auth holds, in its tests only, PostgreSQL 18's authentication suites replayed through the
// connector and through psql on libpq 18 side by side, against a PostgreSQL 18 cluster of the
// harness: src/test/authentication/t/001_password.pl and 002_saslprep.pl of postgres/postgres at
// the REL_18 branch point (commit 2652835d3e), written down as this project's own data (roles and
// their passwords, the pg_hba method of each step, connection strings, expected outcomes and,
// where the scripts check them, libpq's messages). Each row asserts the scripts' outcome for the
// connector and for libpq, and, where the script names libpq's message, that both say it.
//
// What differs from the scripts, and why:
//
//   - The scripts connect over a Unix socket with "local" lines of pg_hba.conf; the harness keeps
//     its sockets trusted for itself, so the rows connect over TCP to 127.0.0.1 with the same
//     methods on "host" lines.
//   - The scripts' environment (PGPASSWORD, PGCHANNELBINDING, PGDATABASE, whose default the test
//     framework sets to postgres) is given as the keywords it stands for (password,
//     channel_binding, dbname): the rows run in parallel in one process.
//   - 001_password.pl's password-file rows (PGPASSFILE) are not here: the password file is
//     internal/suites/files'. Its pg_hba regular-expression rows, which read their password from
//     that file, get it as password=pass, what the file gives them.
//   - 001_password.pl's checks of the server log (log_like, log_unlike) and of SYSTEM_USER and the
//     \password of psql are not connection rows: they are left out.
//   - 001_password.pl's rows are followed by rows of this project on require_auth's SASL
//     mechanisms (!scram-sha-256,!oauth; oauth; !oauth) and on white space in require_auth.
//   - 002_saslprep.pl's rows are followed by rows of this project: the passwords where the order of
//     PostgreSQL's SASLprep (src/common/saslprep.c) differs from RFC 4013's, each set on the server
//     and logged into with the same text (libpq succeeds) and with RFC 4013's preparation of it
//     (libpq fails: PostgreSQL used the text as it is).
//
// Beyond the scripts, TestSASLprepMatchesServer holds the connector's SASLprep to the server's
// own (the same src/common/saslprep.c as libpq's) over 11,000 passwords: at every edge of the RFC
// 3454 tables and every 16th code point of the Basic Multilingual Plane, the SCRAM secret the
// server stores for a password must be the one the connector derives from it.
package auth
