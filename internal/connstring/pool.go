package connstring

import (
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PoolConfig returns pgxpool's configuration for the connection string: its pool_* keys
// (pgxpool/pool.go, ParseConfig) read by pgxpool. The error is a *ParseError naming the pool key
// at fault, or an error for a Settings that Parse did not make.
func (s *Settings) PoolConfig() (*pgxpool.Config, error) {
	if s.pgxConnString == nil {
		return nil, errors.New("pgconnector: the Settings were not made by Parse")
	}
	pc, err := pgxpool.ParseConfig(s.pgxConnString())
	if err != nil {
		return nil, poolParseError(err)
	}
	return pc, nil
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
