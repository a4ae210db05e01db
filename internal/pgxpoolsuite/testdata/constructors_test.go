package pgxpool_test

// The suite's constructors (internal/pgxpoolsuite): every pool of pgx's pgxpool tests is built
// through a Connector, as an application using pgconnector builds it. Upstream's
// pgxpool.ParseConfig(s) calls are connectorPoolConfig(s), its pgxpool.New(ctx, s) calls
// connectorPool(ctx, s); pgxpool.NewWithConfig stays, on the configuration the test changed.

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgconnector/pgconnector"
)

// connectorPoolConfig is pgconnector.New(s) and its PgxPoolConfig. The Connector is not closed:
// it lives as long as the test binary (a pool must be closed before its Connector).
func connectorPoolConfig(s string) (*pgxpool.Config, error) {
	c, err := pgconnector.New(s)
	if err != nil {
		return nil, err
	}
	return c.PgxPoolConfig()
}

// connectorPool is pgconnector.New(s) and its OpenPool(ctx).
func connectorPool(ctx context.Context, s string) (*pgxpool.Pool, error) {
	c, err := pgconnector.New(s)
	if err != nil {
		return nil, err
	}
	return c.OpenPool(ctx)
}
