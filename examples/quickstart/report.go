package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// report is what the quickstart measured; the text report prints it, -json prints it as it is.
type report struct {
	Server       string      `json:"server"`            // what was connected to
	Compare      *comparison `json:"compare,omitempty"` // on the throwaway server only
	Cold         connectView `json:"cold"`              // the first pgconnector connect
	Warm         connectView `json:"warm"`              // the median of the later ones
	WarmConnects int         `json:"warm_connects"`
	// TooNoisy: the run's times cannot be compared, for the reasons in Noise (see noisy).
	TooNoisy bool        `json:"too_noisy"`
	Noise    []string    `json:"noise,omitempty"`
	Request  []spanLine  `json:"request"`          // the request's span tree, depth first
	Rounds   []roundView `json:"rounds,omitempty"` // -v
}

// comparison is the table of what each driver cost per connection.
type comparison struct {
	Connections int         `json:"connections_per_driver"`
	Version     int         `json:"postgresql_major"`
	Host        string      `json:"host"`
	Drivers     []driverRow `json:"drivers"` // pgconnector, then pgx stdlib
}

// driverRow is one driver's line of the table: counts per connection, the median in ms.
type driverRow struct {
	Name            string  `json:"driver"`
	Backends        float64 `json:"backends"`     // the server log's "connection received"
	TCPConns        float64 `json:"tcp_conns"`    // TCP connections the proxy accepted
	SSLRequests     float64 `json:"ssl_requests"` // SSLRequests the proxy saw
	RoundTrips      float64 `json:"round_trips"`  // before the first query
	MedianConnectMS float64 `json:"median_connect_ms"`
}

// connectView is one connect of the waterfall.
type connectView struct {
	DurationMS float64    `json:"duration_ms"`
	Transport  string     `json:"transport"`
	CacheHit   bool       `json:"cache_hit"`
	Steps      []stepView `json:"steps"`
}

// stepView is one step (child span) of a connect: offset from the connect's start, duration.
type stepView struct {
	Name       string  `json:"name"` // the span name without "postgresql."
	StartMS    float64 `json:"start_ms"`
	DurationMS float64 `json:"duration_ms"`
	Note       string  `json:"note,omitempty"` // the one attribute worth a glance
}

// spanLine is one span of the request's tree.
type spanLine struct {
	Depth      int     `json:"depth"` // 0 for the request's own span
	Name       string  `json:"name"`
	DurationMS float64 `json:"duration_ms"`
	Detail     string  `json:"detail,omitempty"` // a connect's transport and steps, a statement's text
	tree       string  // the text report's tree drawing before the name
}

// roundView is one -v round: connects from several goroutines at once.
type roundView struct {
	Name       string          `json:"name"` // cold cache, warm cache
	Workers    int             `json:"goroutines"`
	DurationMS float64         `json:"duration_ms"`
	Decisions  []decisionCount `json:"decisions"`
	tree       []string        // the text report's span tree, after the last round
}

// decisionCount is how many connects of a round decided alike.
type decisionCount struct {
	Count    int    `json:"connects"`
	Decision string `json:"decision"`
}

// timings are the connect times that noisy judges.
type timings struct {
	Cold time.Duration   // pgconnector's first connect (its span)
	Warm []time.Duration // pgconnector's later connects (their spans)
	Pgx  []time.Duration // pgx stdlib's connects, on the throwaway server; nil otherwise
}

// maxWarmSpread is the widest spread of the warm connects that noisy accepts: the slower
// quarter's boundary (third quartile) over the faster quarter's (first quartile).
const maxWarmSpread = 2.0

// noisy says why a run's times cannot be compared, a reason each; none when they can. A warm connect does less
// than the cold one (no SSLRequest: a round trip less) and pgconnector less than pgx (one socket
// and backend, not two), so on a quiet machine the warm median is not slower than the cold connect
// and pgconnector's median not slower than pgx's; when one is, or when the middle half of the warm
// connects spans more than maxWarmSpread times (at least 4 of them: fewer have no quartiles worth
// the name), the machine's load, not the connector, decided the times.
func noisy(t timings) []string {
	var reasons []string
	if len(t.Warm) > 0 {
		if w := median(t.Warm); w > t.Cold {
			reasons = append(reasons, fmt.Sprintf("the warm median %s is slower than the cold connect %s", ms(msf(w)), ms(msf(t.Cold))))
		}
	}
	if len(t.Warm) >= 4 {
		q1, q3 := quantile(t.Warm, 0.25), quantile(t.Warm, 0.75)
		if q1 > 0 && float64(q3) > maxWarmSpread*float64(q1) {
			reasons = append(reasons, fmt.Sprintf("the middle half of the warm connects spans %s to %s", ms(msf(q1)), ms(msf(q3))))
		}
	}
	if len(t.Pgx) > 0 {
		pc := median(append([]time.Duration{t.Cold}, t.Warm...))
		if px := median(t.Pgx); pc > px {
			reasons = append(reasons, fmt.Sprintf("pgconnector's median %s is slower than pgx's %s", ms(msf(pc)), ms(msf(px))))
		}
	}
	return reasons
}

// median is the middle value of d (the upper one of an even count, as the table's), 0 for none.
func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// quantile is the q-quantile of d (0 <= q <= 1) by the nearest rank below, 0 for none.
func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[int(q*float64(len(s)-1))]
}

// ms formats a time in milliseconds with two decimals.
func ms(v float64) string { return fmt.Sprintf("%.2fms", v) }

// printText prints the report as text: the table, the waterfall, the noise warning, the request's
// span tree and, with -v, the rounds.
func printText(w io.Writer, rep *report) {
	if c := rep.Compare; c != nil {
		fmt.Fprintf(w, "\n%d new connections per driver, one after the other, same DSN (sslmode unset =\n", c.Connections)
		fmt.Fprintf(w, "prefer), PostgreSQL %d on %s without TLS; per connection:\n", c.Version, c.Host)
		fmt.Fprintf(w, "%-12s %9s %10s %12s %12s %15s\n", "", "backends", "TCP conns", "SSLRequests", "round trips", "median connect")
		for _, r := range c.Drivers {
			fmt.Fprintf(w, "%-12s %9.2f %10.2f %12.2f %12.2f %15s\n", r.Name, r.Backends, r.TCPConns, r.SSLRequests, r.RoundTrips, ms(r.MedianConnectMS))
		}
		fmt.Fprintln(w, "(backends: the server log's \"connection received\"; TCP conns, SSLRequests: a proxy;")
		fmt.Fprintln(w, " round trips before the first query: TCP handshakes + SSLRequests + startups)")
	}
	printWaterfall(w, rep)
	if rep.TooNoisy {
		fmt.Fprintln(w, "\nthis run was too noisy to compare times (the machine is busy): re-run it; the counts")
		fmt.Fprintln(w, "do not depend on it. Why:")
		for _, r := range rep.Noise {
			fmt.Fprintln(w, "  "+r)
		}
	}
	fmt.Fprintln(w, "\nspans of one request (db.QueryRowContext(ctx) with the request's span in ctx):")
	for _, l := range rep.Request {
		line := fmt.Sprintf("%s%s %s", l.tree, l.Name, ms(l.DurationMS))
		if l.Detail != "" {
			line += "  " + l.Detail
		}
		if utf8.RuneCountInString(line) > 96 {
			line = string([]rune(line)[:95]) + "…"
		}
		fmt.Fprintln(w, line)
	}
	for _, r := range rep.Rounds {
		fmt.Fprintf(w, "\n== %s: %d goroutines connected in %v\n", r.Name, r.Workers,
			time.Duration(r.DurationMS*float64(time.Millisecond)).Round(time.Millisecond))
		for _, d := range r.Decisions {
			fmt.Fprintf(w, "   %2d connect(s): %s\n", d.Count, d.Decision)
		}
		if r.tree != nil {
			fmt.Fprintln(w, "\n== span tree")
			for _, l := range r.tree {
				fmt.Fprintln(w, l)
			}
		}
	}
}

// printWaterfall prints the steps of the cold connect and of the median warm one, one line each,
// with a bar on a common time scale.
func printWaterfall(w io.Writer, rep *report) {
	const width = 40
	scale := max(rep.Cold.DurationMS, rep.Warm.DurationMS)
	later := fmt.Sprintf("the median of the %d later ones (warm)", rep.WarmConnects)
	if rep.WarmConnects == 1 {
		later = "the second one (warm)"
	}
	fmt.Fprintf(w, "\nconnect waterfall, pgconnector: the first connect (cold) and\n%s; offset from the\n", later)
	fmt.Fprintln(w, "connect's start, duration, on the slower one's scale:")
	for _, c := range []struct {
		label string
		v     connectView
	}{{"cold", rep.Cold}, {"warm", rep.Warm}} {
		fmt.Fprintf(w, "%s %8s  transport=%s cache.hit=%t\n", c.label, ms(c.v.DurationMS), c.v.Transport, c.v.CacheHit)
		for _, st := range c.v.Steps {
			from, n := 0, 1
			if scale > 0 {
				from = int(width * st.StartMS / scale)
				n = max(1, int(width*st.DurationMS/scale))
			}
			from = min(max(from, 0), width-1)
			n = min(n, width-from)
			bar := strings.Repeat(" ", from) + strings.Repeat("#", n) + strings.Repeat(" ", width-from-n)
			note := ""
			if st.Note != "" {
				note = " " + st.Note
			}
			fmt.Fprintf(w, "  %-15s %8s %8s |%s|%s\n", st.Name, "+"+ms(st.StartMS), ms(st.DurationMS), bar, note)
		}
	}
}
