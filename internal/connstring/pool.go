package connstring

import (
	"errors"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// parsePgx is pgx's one parse of the string: pgxpool.ParseConfig (pgxpool/pool.go), which is
// pgx.ParseConfig followed by the reading of pgxpool's keys from what pgx left in RuntimeParams.
// pgx's configuration keeps those keys in RuntimeParams, as pgx.ParseConfig leaves them:
// database/sql and ConnectPgx send them, pgxpool does not. A bad pgxpool key is an error of
// PoolConfig alone: pgx's configuration is then parsed a second time, without pgxpool (the
// only case where the string is parsed twice).
func (v *values) parsePgx(s string) (cfg *pgx.ConnConfig, pool *pgxpool.Config, poolErr, err error) {
	err = withoutPgxService(s, func(s string) (err error) {
		pool, err = pgxpool.ParseConfig(s)
		return err
	})
	if err != nil {
		if poolErr = poolParseError(err); poolErr.(*ParseError).Key == "" {
			return nil, nil, nil, err // not one of pgxpool's keys: pgx's own error
		}
		err = withoutPgxService(s, func(s string) (err error) {
			cfg, err = pgx.ParseConfig(s)
			return err
		})
		return cfg, nil, poolErr, err
	}
	cfg = pool.ConnConfig
	pool.ConnConfig = nil
	for k := range poolKeys {
		if val, _, ok := v.get(k, "", false); ok {
			cfg.RuntimeParams[k] = val
		}
	}
	return cfg, pool, nil, nil
}

// PoolConfig returns pgxpool's configuration for the connection string, with cc as its
// ConnConfig: the pool_* keys (pgxpool/pool.go, ParseConfig) as Parse read them, and removed
// from cc.RuntimeParams (they are not for the server). The error is a *ParseError naming the pool
// key at fault, or an error for a Settings that Parse did not make.
func PoolConfig(s *Settings, cc *pgx.ConnConfig) (*pgxpool.Config, error) {
	if s.poolErr != nil {
		return nil, s.poolErr
	}
	if s.pool == nil {
		return nil, errors.New("pgconnector: the Settings were not made by Parse")
	}
	pc := *s.pool
	for k := range poolKeys {
		delete(cc.RuntimeParams, k)
	}
	pc.ConnConfig = cc
	return &pc, nil
}

// poolKeys says what each pgxpool key must be, for poolParseError.
var poolKeys = map[string]string{
	"pool_max_conns":                "an integer of at least 1",
	"pool_min_conns":                "an integer",
	"pool_min_idle_conns":           "an integer",
	"pool_max_conn_lifetime":        "a duration (1h, 30m, 90s)",
	"pool_max_conn_idle_time":       "a duration (1h, 30m, 90s)",
	"pool_health_check_period":      "a duration (1h, 30m, 90s)",
	"pool_max_conn_lifetime_jitter": "a duration (1h, 30m, 90s)",
	"pool_ping_timeout":             "a duration (1h, 30m, 90s)",
}

// poolParseError is a *ParseError for what pgxpool.ParseConfig rejected: one of its keys (the
// rest parsed in New). pgx's message is not shown: it may quote the connection string.
func poolParseError(err error) *ParseError {
	var pce *pgconn.ParseConfigError
	if errors.As(err, &pce) {
		bare := *pce
		bare.ConnString = ""
		msg := bare.Error()
		for k, must := range poolKeys {
			if strings.Contains(msg, k+" ") || strings.HasSuffix(msg, k) {
				return &ParseError{Key: k, msg: "invalid " + k + ": must be " + must}
			}
		}
	}
	return &ParseError{msg: "invalid connection string for pgxpool (pgx's message is not shown: it may quote a value)"}
}
