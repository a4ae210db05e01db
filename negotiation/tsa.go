package negotiation

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// TargetSessionAttrs is target_session_attrs (libpq-connect.html#LIBPQ-CONNECT-TARGET-SESSION-ATTRS):
// which kind of server a connection must reach. A server of another kind is left for the next
// host; with PreferStandby, when no host is a standby, every host is tried again in order and any
// server is taken (fe-connect.c, PQconnectPoll, SERVER_TYPE_PREFER_STANDBY_PASS2).
type TargetSessionAttrs uint8

const (
	TargetAny TargetSessionAttrs = iota
	TargetReadWrite
	TargetReadOnly
	TargetPrimary
	TargetStandby
	TargetPreferStandby
)

var tsaNames = [...]string{"any", "read-write", "read-only", "primary", "standby", "prefer-standby"}

func (t TargetSessionAttrs) String() string {
	if int(t) < len(tsaNames) {
		return tsaNames[t]
	}
	return "unknown"
}

// ParseTargetSessionAttrs parses a target_session_attrs value ("" is any).
func ParseTargetSessionAttrs(s string) (TargetSessionAttrs, error) {
	if s == "" {
		return TargetAny, nil
	}
	for i, n := range tsaNames {
		if n == s {
			return TargetSessionAttrs(i), nil
		}
	}
	return TargetAny, fmt.Errorf("invalid target_session_attrs %q", s)
}

// TargetSessionAttrsError is a server that target_session_attrs does not accept. It moves the
// connect on to the next host (not the next address of the same host: it is the same server), and
// it teaches nothing about the server's transport: the cache keeps what it knew.
type TargetSessionAttrsError struct {
	Want TargetSessionAttrs
	// Reason is libpq's: "session is read-only", "session is not read-only", "server is in hot
	// standby mode", "server is not in hot standby mode".
	Reason string
}

func (e *TargetSessionAttrsError) Error() string {
	return e.Reason + " (target_session_attrs=" + e.Want.String() + ")"
}

// validate checks the server of a new connection against t, as libpq does
// (fe-connect.c, PQconnectPoll, CONNECTION_CHECK_TARGET): from the in_hot_standby and
// default_transaction_read_only values the server reported at startup (PostgreSQL 14 and later),
// without a round trip; before 14 with the query libpq sends ("SHOW transaction_read_only" or
// "SELECT pg_catalog.pg_is_in_recovery()").
func (t TargetSessionAttrs) validate(ctx context.Context, c *pgconn.PgConn) error {
	switch t {
	case TargetReadWrite, TargetReadOnly:
		ro, err := readOnly(ctx, c)
		if err != nil {
			return &TargetSessionAttrsError{Want: t, Reason: err.Error()}
		}
		if t == TargetReadWrite && ro {
			return &TargetSessionAttrsError{Want: t, Reason: "session is read-only"}
		}
		if t == TargetReadOnly && !ro {
			return &TargetSessionAttrsError{Want: t, Reason: "session is not read-only"}
		}
	case TargetPrimary, TargetStandby, TargetPreferStandby:
		standby, err := inHotStandby(ctx, c)
		if err != nil {
			return &TargetSessionAttrsError{Want: t, Reason: err.Error()}
		}
		if t == TargetPrimary && standby {
			return &TargetSessionAttrsError{Want: t, Reason: "server is in hot standby mode"}
		}
		if t != TargetPrimary && !standby {
			return &TargetSessionAttrsError{Want: t, Reason: "server is not in hot standby mode"}
		}
	}
	return nil
}

func readOnly(ctx context.Context, c *pgconn.PgConn) (bool, error) {
	dtro, hs := c.ParameterStatus("default_transaction_read_only"), c.ParameterStatus("in_hot_standby")
	if dtro != "" && hs != "" {
		return dtro == "on" || hs == "on", nil
	}
	v, err := queryOne(ctx, c, "SHOW transaction_read_only")
	return v == "on", err
}

func inHotStandby(ctx context.Context, c *pgconn.PgConn) (bool, error) {
	if hs := c.ParameterStatus("in_hot_standby"); hs != "" {
		return hs == "on", nil
	}
	v, err := queryOne(ctx, c, "SELECT pg_catalog.pg_is_in_recovery()")
	return v == "t", err
}

func queryOne(ctx context.Context, c *pgconn.PgConn, sql string) (string, error) {
	res, err := c.Exec(ctx, sql).ReadAll()
	if err != nil {
		return "", fmt.Errorf("%q failed: %w", sql, err)
	}
	if len(res) != 1 || len(res[0].Rows) != 1 || len(res[0].Rows[0]) != 1 {
		return "", fmt.Errorf("%q failed: unexpected result", sql)
	}
	return string(res[0].Rows[0][0]), nil
}
