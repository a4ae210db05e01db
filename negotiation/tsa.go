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
// "SELECT pg_catalog.pg_is_in_recovery()"). It returns what it saw of the server's role.
func (t TargetSessionAttrs) validate(ctx context.Context, c *pgconn.PgConn) (serverRole, error) {
	r := roleOf(c)
	switch t {
	case TargetReadWrite, TargetReadOnly:
		if !r.roKnown {
			v, err := queryOne(ctx, c, "SHOW transaction_read_only")
			if err != nil {
				return r, &TargetSessionAttrsError{Want: t, Reason: err.Error()}
			}
			r.roKnown, r.ro = true, v == "on"
		}
		if t == TargetReadWrite && r.ro {
			return r, &TargetSessionAttrsError{Want: t, Reason: "session is read-only"}
		}
		if t == TargetReadOnly && !r.ro {
			return r, &TargetSessionAttrsError{Want: t, Reason: "session is not read-only"}
		}
	case TargetPrimary, TargetStandby, TargetPreferStandby:
		if !r.standbyKnown {
			v, err := queryOne(ctx, c, "SELECT pg_catalog.pg_is_in_recovery()")
			if err != nil {
				return r, &TargetSessionAttrsError{Want: t, Reason: err.Error()}
			}
			r.standbyKnown, r.standby = true, v == "t"
		}
		if t == TargetPrimary && r.standby {
			return r, &TargetSessionAttrsError{Want: t, Reason: "server is in hot standby mode"}
		}
		if t != TargetPrimary && !r.standby {
			return r, &TargetSessionAttrsError{Want: t, Reason: "server is not in hot standby mode"}
		}
	}
	return r, nil
}

// serverRole is what a connection showed of its server's role.
type serverRole struct {
	roKnown, ro           bool // the session is read-only (default_transaction_read_only or hot standby)
	standbyKnown, standby bool // the server is in hot standby
}

// roleOf reads the role a server of PostgreSQL 14 or later reported at startup (in_hot_standby,
// default_transaction_read_only); nothing is known of an older one.
func roleOf(c *pgconn.PgConn) serverRole {
	var r serverRole
	hs := c.ParameterStatus("in_hot_standby")
	if hs == "" {
		return r
	}
	r.standbyKnown, r.standby = true, hs == "on"
	if dtro := c.ParameterStatus("default_transaction_read_only"); dtro != "" {
		r.roKnown, r.ro = true, dtro == "on" || hs == "on"
	}
	return r
}

// matches reports whether a server of role r is one t wants (prefer-standby: a standby), and
// whether r says so at all.
func (t TargetSessionAttrs) matches(r serverRole) (match, known bool) {
	switch t {
	case TargetReadWrite:
		return r.roKnown && !r.ro, r.roKnown
	case TargetReadOnly:
		return r.roKnown && r.ro, r.roKnown
	case TargetPrimary:
		return r.standbyKnown && !r.standby, r.standbyKnown
	case TargetStandby, TargetPreferStandby:
		return r.standbyKnown && r.standby, r.standbyKnown
	}
	return true, true
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
