package pgconnector

import "github.com/pgconnector/pgconnector/negotiation"

// PgxConnOf gives the tests of package pgconnector_test the *pgx.Conn of a driver connection that
// Connector.Connect returned (wrapped by the statement tracer or not); nil for any other.
var PgxConnOf = pgxConnOf

// CacheOf gives the tests the decision cache of a Connector, to set what it remembers.
func CacheOf(c *Connector) *negotiation.Cache { return c.negotiator.Cache() }
