package pgconnector

// PgxConnOf gives the tests of package pgconnector_test the *pgx.Conn of a driver connection that
// Connector.Connect returned (wrapped by the statement tracer or not); nil for any other.
var PgxConnOf = pgxConnOf
