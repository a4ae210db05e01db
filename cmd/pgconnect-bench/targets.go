package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pgconnector/pgconnector/negotiation"
)

// checkTargets compares the run's figures with the targets the benchmark is
// held to, ending with r.WarmDecision. A figure that is missing (a scenario
// not run, a peer that failed) gives no target line.
//
// A ratio of two peers' connections/s is the median of their per-round
// ratios (the rounds ran in turns, so round i of one peer ran next to round i
// of the other), with the smallest and largest shown: on a noisy machine the
// spread says how far a few percent can be trusted.
func checkTargets(r *Report) []Target {
	var ts []Target
	findAs := func(scenario, clients int, peer string, ticket bool, user string) *ConnectResult {
		for i, c := range r.Connect {
			if c.Scenario == scenario && c.Peer == peer && c.Ticket == ticket && c.User == user && (clients == 0 || c.Clients == clients) && c.Errors < c.Conns {
				return &r.Connect[i]
			}
		}
		return nil
	}
	find := func(scenario, clients int, peer string, ticket bool) *ConnectResult {
		return findAs(scenario, clients, peer, ticket, "")
	}
	ratio := func(name string, a, b *ConnectResult, want float64, strict bool) {
		if a == nil || b == nil {
			return
		}
		x, lo, hi := pairedRatio(a, b)
		if x <= 0 {
			return
		}
		t := Target{Name: name, Want: fmt.Sprintf(">= %.2fx", want), Got: ratioText(x, want), Met: x >= want}
		if strict {
			t.Want, t.Met = fmt.Sprintf("> %.2fx (ahead)", want), x > want
		}
		if hi > lo {
			t.Got += fmt.Sprintf(" (rounds %.2f-%.2f)", lo, hi)
		}
		ts = append(ts, t)
	}
	// cpu: a's client CPU per connection over b's, at most want.
	cpu := func(name string, a, b *ConnectResult, want float64) {
		if a == nil || b == nil || a.CPU <= 0 || b.CPU <= 0 {
			return
		}
		x := float64(a.CPU) / float64(b.CPU)
		ts = append(ts, Target{Name: name, Want: fmt.Sprintf("<= %.2fx", want),
			Got: fmt.Sprintf("%.2fx (%s / %s)", x, micros(a.CPU), micros(b.CPU)), Met: x <= want})
	}
	for s := 1; s <= 3; s++ {
		tk := s > 1
		warm := find(s, 0, peerWarm, tk)
		if warm == nil {
			continue
		}
		peer := func(name string) *ConnectResult { return find(s, warm.Clients, name, tk) }
		prefix := fmt.Sprintf("scenario %d: pgconnector warm / ", s)
		ratio(prefix+"libpq default, connections/s", warm, peer(peerLibpqDefault), 1.8, false)
		ratio(prefix+"pgx default, connections/s", warm, peer(peerPgxDefault), 1.8, false)
		// The best explicit setting, gssencmode=disable sslmode=disable, in C (libpq) and in Go
		// (pgx has no gssencmode; pgconnector with both set skips the cache and the probe).
		ratio(prefix+"libpq gssencmode=disable sslmode=disable, connections/s", warm, peer(peerLibpqExplicit), 0.95, false)
		bestGo := peer(peerPgxExplicit)
		if pc := peer(peerPcExplicit); bestGo == nil || pc != nil && pc.ConnsPerSec > bestGo.ConnsPerSec {
			bestGo = pc
		}
		if bestGo != nil {
			ratio(prefix+"best explicit setting in Go ("+bestGo.Peer+"), connections/s", warm, bestGo, 0.95, false)
		}
		ts = append(ts, Target{
			Name: fmt.Sprintf("scenario %d: pgconnector warm, backends per connection", s),
			Want: "1.00", Got: fmt.Sprintf("%.3f", warm.Backends), Met: warm.Backends > 0 && warm.Backends < 1.005,
		})
	}
	if warm, libpq := find(4, 0, peerWarm, true), find(4, 0, peerLibpqDefault, true); warm != nil && libpq != nil && warm.Errors == 0 && libpq.Errors == 0 {
		ts = append(ts, Target{
			Name: "scenario 4: connect latency p50, pgconnector warm vs libpq (GSS)",
			Want: "<= " + latency(libpq.P50), Got: latency(warm.P50), Met: warm.P50 <= libpq.P50,
		})
		ratio("scenario 4: pgconnector warm / libpq default, connections/s (GSS)", warm, libpq, 1.0, false)
	}
	for _, t := range r.Throughput {
		if t.Family != "pgconnector" || t.Error != "" {
			continue
		}
		for _, u := range r.Throughput {
			if u.Family != "libpq" || u.Workload != t.Workload || u.Transport != t.Transport || u.Error != "" {
				continue
			}
			x := t.MBPerSec / u.MBPerSec
			target := Target{
				Name: fmt.Sprintf("scenario 4: %s over %s, pgconnector / psql, MB/s (fastest of each)", t.Workload, t.Transport),
				Want: ">= 1.00x", Got: ratioText(x, 1), Met: x >= 1,
			}
			if t.Transport != "GSS" || !strings.HasPrefix(t.Workload, "COPY") {
				target.Name += " (no target; for the record)"
				target.Want, target.Met = "-", true
			}
			ts = append(ts, target)
		}
	}
	clientsSeen := map[int]bool{}
	for _, c := range r.Connect {
		if c.Scenario != 5 || clientsSeen[c.Clients] {
			continue
		}
		clientsSeen[c.Clients] = true
		for _, tk := range []bool{false, true} {
			label := map[bool]string{false: "no ticket", true: "ticket"}[tk]
			d := find(5, c.Clients, peerDefault, tk)
			prefix := fmt.Sprintf("scenario 5, %s, %s: pgconnector default / ", plural(c.Clients, "client"), label)
			ratio(prefix+"its gssencmode=disable", d, find(5, c.Clients, peerNoGSS, false), 0.98, false)
			ratio(prefix+"libpq default", d, find(5, c.Clients, peerLibpqDefault, tk), 1.0, true)
		}
		d, pgx := find(5, c.Clients, peerDefault, false), find(5, c.Clients, peerPgxExplicit, false)
		prefix := fmt.Sprintf("scenario 5, %s, no ticket: pgconnector default / ", plural(c.Clients, "client"))
		ratio(prefix+"pgx sslmode=disable, connections/s", d, pgx, 1.0, false)
		cpu(prefix+"pgx sslmode=disable, client CPU per connection", d, pgx, 1.05)
	}
	// Scenario 8, through pgbouncer: with the SCRAM role, a warm Connector derives no
	// SaltedPassword per connection, pgx and libpq one each (RFC 7677 section 4: the client may
	// cache the ClientKey); with the trust role, nothing to save, so pgx's pace and CPU.
	for _, clients := range []int{1, 8} {
		for _, user := range []string{userScram, userTrust} {
			d := findAs(8, clients, peerDefault, false, user)
			pgx := findAs(8, clients, peerPgxExplicit, false, user)
			prefix := fmt.Sprintf("scenario 8, %s, %s: pgconnector default / ", user, plural(clients, "client"))
			if user == userScram {
				ratio(prefix+"pgx sslmode=disable, connections/s", d, pgx, 2.5, false)
				ratio(prefix+"libpq default, connections/s", d, findAs(8, clients, peerLibpqDefault, false, user), 6, false)
				cpu(prefix+"pgx sslmode=disable, client CPU per connection", d, pgx, 0.35)
			} else {
				ratio(prefix+"pgx sslmode=disable, connections/s", d, pgx, 1.0, false)
				cpu(prefix+"pgx sslmode=disable, client CPU per connection", d, pgx, 1.05)
			}
		}
	}
	for _, h := range r.ScramHerd {
		if h.Family != "pgconnector" {
			continue
		}
		got := derivationsText(h.Derivations)
		if h.Derivations == nil {
			got += " (the connector exports no " + scramDerivationsMetric + ")"
		}
		if h.Errors > 0 {
			got += fmt.Sprintf(", %d of %d connections failed", h.Errors, h.Clients)
		}
		ts = append(ts, Target{
			Name: fmt.Sprintf("scenario 8, cold herd, %s: SCRAM derivations (PBKDF2) for %d concurrent first connections", h.Peer, h.Clients),
			Want: "1", Got: got, Met: h.Derivations != nil && *h.Derivations == 1 && h.Errors == 0,
		})
	}
	// Scenario 7: GSS wrap and unwrap of the default enctype at 500 MB/s per core or more.
	for _, w := range r.Wrap {
		if w.Enctype != "aes256-cts-hmac-sha1-96" {
			continue
		}
		for _, op := range []struct {
			name        string
			rate, floor float64
		}{{"wrap", w.Wrap, w.FloorWrap}, {"unwrap", w.Unwrap, w.FloorUnwrap}} {
			ts = append(ts, Target{
				Name: fmt.Sprintf("scenario 7: GSS %s, %s, one core, MB/s", op.name, w.Enctype),
				Want: ">= 500",
				Got:  fmt.Sprintf("%.0f (%.2fx its AES-CBC + HMAC floor)", op.rate, op.rate/op.floor),
				Met:  op.rate >= 500,
			})
		}
	}
	for _, h := range r.Herd {
		if h.Family != "pgconnector" {
			continue
		}
		wantGSS := 0
		if h.Ticket {
			wantGSS = 1
		}
		ts = append(ts, Target{
			Name: fmt.Sprintf("scenario 6, %s: probes reaching the server for %d concurrent first connections", h.Server, h.Clients),
			Want: fmt.Sprintf("%d SSLRequest, %d GSSENCRequest", 1, wantGSS),
			Got:  fmt.Sprintf("%d SSLRequest, %d GSSENCRequest", h.SSLRequests, h.GSSENCRequests),
			Met:  h.SSLRequests == 1 && h.GSSENCRequests == wantGSS && h.Errors == 0,
		})
	}
	// Scenario 10: over distance (a one-way delay of 5 ms or more), pgconnector's default is a
	// round trip ahead of libpq's and pgx's defaults (the SSLRequest it learned to leave out),
	// and no slower than libpq with sslnegotiation=direct written (within a fifth of a round
	// trip: the client's own CPU and the machine's noise).
	for _, pc := range r.Connect {
		if pc.Scenario != 10 || pc.Peer != peerDefault || pc.Delay < 5*time.Millisecond || !connectOK(pc) {
			continue
		}
		rtt := float64(2 * pc.Delay)
		for _, o := range r.Connect {
			if o.Scenario != 10 || o.User != pc.User || o.Delay != pc.Delay || !connectOK(o) {
				continue
			}
			ahead := float64(o.P50-pc.P50) / rtt
			var want string
			var met bool
			switch o.Peer {
			case peerLibpqDefault, peerPgxDefault:
				want, met = ">= 0.75 round trips ahead", ahead >= 0.75
			case peerLibpqDirect:
				want, met = ">= -0.20 round trips (no slower)", ahead >= -0.2
			default:
				continue
			}
			ts = append(ts, Target{
				Name: fmt.Sprintf("scenario 10, %s, %v one way: p50 connect vs %s", pc.User, pc.Delay, o.Peer),
				Want: want,
				Got:  fmt.Sprintf("%.2f (%s vs %s)", ahead, millis(pc.P50), millis(o.P50)),
				Met:  met,
			})
		}
	}
	ts = append(ts, stmtTargets(r)...)
	ts = append(ts, fleetTargets(r)...)
	oauthTargets(r, ratio)
	ts = append(ts, oauthGoBenchTarget(r.OAuthGoBench)...)
	return append(ts, r.WarmDecision...)
}

// millis formats d in milliseconds with two decimals.
func millis(d time.Duration) string {
	return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
}

// plural is "1 client", "2 clients".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// ratioText formats a ratio with two decimals, or three where two would
// round a miss up to the target (0.997 is not 1.00).
func ratioText(x, want float64) string {
	if x < want && fmt.Sprintf("%.2f", x) == fmt.Sprintf("%.2f", want) {
		return fmt.Sprintf("%.3fx", x)
	}
	return fmt.Sprintf("%.2fx", x)
}

// pairedRatio is a's connections/s over b's: the median of the per-round
// ratios and their range when both have the same rounds, else the ratio of
// the pooled figures (lo = hi = that).
func pairedRatio(a, b *ConnectResult) (median, lo, hi float64) {
	if len(a.RoundRates) < 2 || len(a.RoundRates) != len(b.RoundRates) {
		if b.ConnsPerSec <= 0 {
			return 0, 0, 0
		}
		x := a.ConnsPerSec / b.ConnsPerSec
		return x, x, x
	}
	rs := make([]float64, 0, len(a.RoundRates))
	for i, ra := range a.RoundRates {
		if rb := b.RoundRates[i]; ra > 0 && rb > 0 {
			rs = append(rs, ra/rb)
		}
	}
	if len(rs) == 0 {
		return 0, 0, 0
	}
	return medianRange(rs)
}

// warmDecision measures the warm decision path (a cache lookup and Decide)
// the way BenchmarkWarmDecision in negotiation/ does, and returns its
// targets: no allocation, under a microsecond.
func warmDecision() []Target {
	c := negotiation.NewCache(time.Minute)
	k := negotiation.Key{Host: "db.example", Port: 5432}
	c.SetSSL(k, negotiation.AnswerNo)
	var bad bool
	res := testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			p, _ := negotiation.Decide(negotiation.Input{SSLMode: negotiation.SSLModePrefer,
				GSSEncMode: negotiation.GSSEncModePrefer, Known: c.Known(k)})
			if p.Methods()[0] != negotiation.MethodPlain {
				bad = true
			}
		}
	})
	ns := float64(res.T.Nanoseconds()) / float64(max(res.N, 1))
	return []Target{
		{Name: "warm decision path (cache lookup + Decide): allocations", Want: "0", Got: fmt.Sprint(res.AllocsPerOp()), Met: res.AllocsPerOp() == 0 && !bad},
		{Name: "warm decision path: time", Want: "< 1 µs", Got: fmt.Sprintf("%.0f ns", ns), Met: ns < 1000 && !bad},
	}
}
