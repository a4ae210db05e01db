// Package files holds, in its tests only, PostgreSQL's client suites of the files libpq reads
// beside the connection string, written as the project's own tables and run through the
// connector and through psql on libpq 18 against a PostgreSQL 18 server of internal/harness;
// each case asserts upstream's outcome and that the connector's is libpq's:
//
//   - the service files: every case of src/interfaces/libpq/t/006_service.pl (postgres/postgres
//     at commit 2c7bd2ba507e, a PostgreSQL 18 version of the file): service and PGSERVICE with PGSERVICEFILE (1_1 to
//     1_3 and their failures), a missing PGSERVICEFILE, and $PGSYSCONFDIR/pg_service.conf (2_1
//     to 2_3 and their failures), the connection's target only in the service file (the
//     environment names a server that is not running); and, beyond it, a nested service
//     (parseServiceFile's "nested service specifications" error);
//   - the password file: the password-file cases of src/test/authentication/t/001_password.pl
//     (at commit 0245f8db36f3; PostgreSQL 18's file has the same part): a line of more than five fields (its fifth is the password), "p\ass" (the
//     backslash dropped), a long comment line, the pg_hba user and database regular expressions
//     with the password from the file; and, beyond it, lines libpq does not trim (white space
//     before the host, after the password), which github.com/jackc/pgpassfile, the connector's
//     former reader, trimmed.
//
// pg_hba's "local" lines of 001_password.pl are "host" lines here (the harness trusts its Unix
// socket), which changes nothing for the password file: its entries match any host and port.
// 006_service.pl's later cases (the servicefile keyword, nested servicefile) are libpq 19's:
// libpq 18 has no servicefile keyword.
package files
