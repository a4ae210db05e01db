package negotiation

import "sync/atomic"

// The role each host's server showed last (Config.TargetSessionAttrs). libpq and pgx try the
// hosts in order at every connect and check each server's role (fe-connect.c, PQconnectPoll,
// CONNECTION_CHECK_TARGET): a standby listed before the primary costs every read-write connect
// a backend on the standby. The connector remembers what each connection's check saw (from the
// startup's in_hot_standby and default_transaction_read_only on PostgreSQL 14 and later, else
// from libpq's query), and a connect with target_session_attrs tries first, in the string's
// order (or load_balance_hosts' shuffled one), the hosts remembered to be what it wants, then
// the others in order. Every connection still checks the role it got: a stale memory costs at
// most one backend, never a server of the wrong role. A host whose connect fails for another
// reason (refused, gone, a failed authentication) is forgotten, and a check that sees another
// role (a failover) replaces what was remembered. prefer-standby's second pass, which takes any
// server, checks nothing and teaches nothing.

// Bits of a remembered role (0: nothing known).
const (
	roleRO uint32 = 1 << iota
	roleROKnown
	roleStandby
	roleStandbyKnown
)

func encodeRole(r serverRole) uint32 {
	var v uint32
	if r.roKnown {
		v |= roleROKnown
		if r.ro {
			v |= roleRO
		}
	}
	if r.standbyKnown {
		v |= roleStandbyKnown
		if r.standby {
			v |= roleStandby
		}
	}
	return v
}

func decodeRole(v uint32) serverRole {
	return serverRole{roKnown: v&roleROKnown != 0, ro: v&roleRO != 0,
		standbyKnown: v&roleStandbyKnown != 0, standby: v&roleStandby != 0}
}

// hostIndex is h's index in the negotiator's hosts.
func (n *Negotiator) hostIndex(h *Host) int {
	for i := range n.cfg.Hosts {
		if &n.cfg.Hosts[i] == h {
			return i
		}
	}
	return -1
}

// learnRole remembers what a connection to h showed of its server's role.
func (n *Negotiator) learnRole(h *Host, r serverRole) {
	if i := n.hostIndex(h); i >= 0 && n.roles != nil {
		n.roles[i].Store(encodeRole(r))
	}
}

// forgetRole forgets the role of the host at index i.
func (n *Negotiator) forgetRole(i int) {
	if n.roles != nil && n.roles[i].Load() != 0 {
		n.roles[i].Store(0)
	}
}

// roleFirst returns order (indexes of the hosts) with the hosts remembered to be what
// target_session_attrs wants first, each group in its order, appended to dst; and which hosts
// were moved ahead of another (a bit per index, for the trace; hosts past 64 are not marked).
// It returns order itself when no host is remembered to match.
func (n *Negotiator) roleFirst(order, dst []int) ([]int, uint64) {
	if n.roles == nil {
		return order, 0
	}
	var buf [8]bool
	wanted := buf[:0]
	some := false
	for _, i := range order {
		ok, _ := n.cfg.TargetSessionAttrs.matches(decodeRole(n.roles[i].Load()))
		wanted = append(wanted, ok)
		some = some || ok
	}
	if !some {
		return order, 0
	}
	var moved uint64
	other := false
	for k, i := range order {
		switch {
		case !wanted[k]:
			other = true
		default:
			dst = append(dst, i)
			if other && i < 64 {
				moved |= 1 << i
			}
		}
	}
	for k, i := range order {
		if !wanted[k] {
			dst = append(dst, i)
		}
	}
	return dst, moved
}

// rolesFor is the role memory for cfg: one per host when target_session_attrs asks for a role,
// else nil.
func rolesFor(cfg Config) []atomic.Uint32 {
	if cfg.TargetSessionAttrs == TargetAny {
		return nil
	}
	return make([]atomic.Uint32, len(cfg.Hosts))
}
