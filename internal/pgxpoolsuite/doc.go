// Package pgxpoolsuite holds, in its tests only, pgx v5.13.0's own pgxpool tests
// (pgxpool/*_test.go: 71 tests in eight files) run with every pool built through a Connector.
// TestPgxpoolSuite reads the test files from the module cache (the pgx version of go.mod),
// writes them into a module of its own in a temporary directory with these changes and no
// other, and runs them there against a PostgreSQL 15 of internal/harness:
//
//   - pgxpool.ParseConfig(s) becomes connectorPoolConfig(s), pgconnector.New(s) and its
//     PgxPoolConfig(), and pgxpool.New(ctx, s) becomes connectorPool(ctx, s), New(s) and
//     OpenPool(ctx) (testdata/constructors_test.go). pgxpool.NewWithConfig stays, on the
//     configuration the test changed (its DialFunc, BeforeConnect, ShouldPing, MinConns...);
//     the tests' pgx.Connect calls (the controlling connections of a few tests) stay pgx's;
//   - pgx's internal/pgmock, which one test imports, is copied beside them as a package of the
//     temporary module (another module cannot import an internal package); a file whose only
//     use of the pgxpool package was pgxpool.New loses that import.
//
// The names, bodies and assertions of the tests are upstream's. The run passes when all 71
// pass, none skipped, within the run's timeout (two of them use testing/synctest: a connect
// that left its bubble would hang there).
package pgxpoolsuite
