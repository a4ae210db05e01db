// Package stdlibsuite holds, in its tests only, the database/sql conformance suite of the
// connector: what the database/sql tests of pgx v5.13.0's driver (stdlib/sql_test.go,
// stdlib/sql_go1.27_test.go) check, written again here and run on two pools side by side, one
// of pgx's driver (sql.Open("pgx", dsn)) and one of the connector (pgconnector.New(dsn) with a
// tracer provider whose spans record, then OpenDB, so that database/sql gets the statement
// tracer's connections, statements, rows and transactions, not pgx's), and a third, the
// connector with two sqlmw.NullInterceptor (pgconnector.WithInterceptor), whose wrappers are
// in the way too. Each case asserts what upstream expects and that the drivers give the same
// result; a difference fails the case, naming what differs.
//
// Every case runs against PostgreSQL 15 and 18 (internal/harness, Options.Major), most of them
// in each of pgx's query exec modes as the connection string's default_query_exec_mode, as
// upstream runs them. The cases:
//
//   - queries and execs: a prepared statement's query and exec, rows closed unread, exec and
//     query on the pool, fifty goroutines on one pool, a scan plan per column, a NULL argument,
//     a syntax error as *pgconn.PgError, a deferred constraint trigger's error at Scan, a
//     statement ended by its deadline, ping and prepare, one text prepared twice and deallocated
//     with its last close;
//   - values: bytea and text into []byte and sql.RawBytes, Go slices as array arguments (NULL
//     elements included), arrays and ranges through pgx's type map as an sql.Scanner, types
//     database/sql has no value for as text, json in and out, scans into any and *any, scalar
//     conversions (string, []byte, *string, sql.RawBytes, a named string), an sql.Scanner's
//     error, nil destinations (bounded by a watchdog: a regression fails, it does not hang);
//   - column types: DatabaseTypeName, Length, DecimalSize, Nullable and ScanType;
//   - transactions: rollback and commit, the isolation levels and read only, a canceled
//     context, a transaction left open (by a statement, or on the pgx.Conn) discarded;
//   - pgx beyond database/sql, on the *pgx.Conn under a connection (pgx's through conn.Raw and
//     *stdlib.Conn, the connector's through pgconnector.PgxConn): a query, COPY FROM and TO,
//     large objects; and idle connections whose backends were terminated, replaced on reuse.
//
// Beyond upstream's cases: each pgx.QueryExecMode passed as a query's first argument,
// pgx.NamedArgs, several statements in one text (the rows of the first, no NextResultSet; the
// extended protocol's refusal), a context canceled while rows are read (pgx closes the
// connection, database/sql discards it), the slice, bytea and column-type cases' extra values,
// COPY, large objects.
//
// Go 1.27's database/sql hands scans to a driver.RowsColumnScanner, which pgx's rows are: the
// cases of sql_go1.27_test.go that rely on it (arrays into []string, []int64, []*string,
// [][]int32, []sql.NullString, pgtype.FlatArray and pgtype.Array; ranges and multiranges into
// pgtype.Range and pgtype.Multirange; pgtype.FlatArray[byte] and pgtype.PreallocBytes; nil
// pointers that database/sql before 1.27 dereferences) are in scan_go1.27_test.go; its other
// cases (booleans into strings, values into any, scalar conversions, scanner errors, the nil
// destinations database/sql refuses itself) hold on Go 1.26 too and run on both. Before Go 1.27
// an array into a Go slice is database/sql's error, the same for both (scan_go1.26_test.go).
//
// Not here:
//   - upstream's tests of pgx's own driver API, which the connector does not offer:
//     TestSQLOpen (the driver names "pgx" and "pgx/v5"), TestSQLOpenFromPool
//     (stdlib.OpenDBFromPool), TestRegisterConnConfig, TestOptionBeforeAfterConnect,
//     TestResetSessionHookCalled, TestOptionShouldPing_HookCalledOnReuse (stdlib's options;
//     the connector's WithBeforeConnect, WithAfterConnect and WithResetSession are tested in
//     the root package) and TestRandomizeHostOrderFunc; TestConnRaw's conversion to
//     *stdlib.Conn is the connector's pgconnector.PgxConn here;
//   - its package-internal tests, of unexported code: column_type_length_internal_test.go
//     (ColumnTypeLength on fake rows; its cases are columns of a real table here) and
//     sql_go1.27_internal_test.go (isSQLScanDestination, whose choices the scan cases see);
//     its benchmarks;
//   - its CockroachDB skips. No case needs the extensions, types or settings of pgx's
//     testsetup: the objects a case uses (tables, a trigger function) it makes itself,
//     temporary or named after the run, on the harness's servers.
package stdlibsuite
