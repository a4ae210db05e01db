package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
)

// waterfallWidth is the width in characters of the waterfall bar of a connect's duration.
const waterfallWidth = 40

// printText prints the report compactly: per connect the decision, the steps as a waterfall (a
// step that is part of the one above it indented, an event drawn as '|' at its time) and the
// result; then the comparison with libpq and pgx.
func printText(w io.Writer, rep *Report) {
	fmt.Fprintf(w, "target %s  sslmode=%s gssencmode=%s\n", rep.Target, rep.SSLMode, rep.GSSEncMode)
	for _, cn := range rep.Connects {
		fmt.Fprintf(w, "\n%s connect: %.2f ms\n", cn.Run, cn.DurationMS)
		for _, d := range cn.Decisions {
			fmt.Fprintf(w, "  decision %s:%d: plan %s", d.Host, d.Port, d.Plan)
			if d.Skipped != "" {
				fmt.Fprintf(w, " (left out: %s, remembered)", d.Skipped)
			}
			switch {
			case d.CacheHit == nil:
				fmt.Fprint(w, ", nothing to remember")
			case *d.CacheHit:
				fmt.Fprint(w, ", cache hit")
			default:
				fmt.Fprint(w, ", cache miss: asks the server")
			}
			if d.DirectLearned {
				fmt.Fprint(w, ", direct TLS (the server is remembered to take it: no SSLRequest)")
			}
			if d.RoleFirst {
				fmt.Fprint(w, ", tried first: its server's remembered role is the one target_session_attrs wants")
			}
			if d.ProbeWaited {
				fmt.Fprint(w, ", waited for another connection's probe")
			}
			if d.Credentials != "" {
				fmt.Fprintf(w, ", Kerberos credentials: %s", d.Credentials)
			}
			fmt.Fprintln(w)
		}
		for _, st := range cn.Steps {
			name := st.Name
			if st.Parent != "" {
				name = "  " + name // a part of the step above: the credential wait, the discovery answer of a startup
			}
			if st.Event {
				fmt.Fprintf(w, "  %-17s %s %11s%s\n", name, strings.Replace(bar(st.StartMS, 0, cn.DurationMS), "#", "|", 1), "", stepNote(st))
				continue
			}
			fmt.Fprintf(w, "  %-17s %s %8.3f ms%s\n", name, bar(st.StartMS, st.DurationMS, cn.DurationMS), st.DurationMS, stepNote(st))
		}
		if cn.Error != "" {
			fmt.Fprintf(w, "  failed at %s: %s\n", cn.FailedStep, cn.Error)
			continue
		}
		fmt.Fprintf(w, "  result: %s:%d over %s, server %s, auth %s%s%s, %d socket(s), %d round trip(s) before startup\n",
			cn.Host, cn.Port, cn.Transport, cn.Server, cn.Auth, saslNote(cn), credentialNote(cn), cn.Sockets, cn.RoundTrips)
	}
	for _, cmp := range rep.Compare {
		oauth := ""
		if cmp.Answers.OAuth {
			oauth = ", SASL OAUTHBEARER asked for"
		}
		fmt.Fprintf(w, "\nper connect to %s:%d, %s (SSLRequest %s, GSSENCRequest %s%s):\n",
			cmp.Host, cmp.Port, cmp.Basis, answer(cmp.Answers.SSL), answer(cmp.Answers.GSS), oauth)
		for _, c := range []Cost{cmp.Libpq, cmp.Pgx} {
			fmt.Fprintf(w, "  %-6s %d socket(s), %d backend(s), %d round trip(s) before startup, %s", c.Client, c.Sockets, c.Backends, c.RoundTrips, c.Transport)
			if c.Note != "" {
				fmt.Fprintf(w, " (%s)", c.Note)
			}
			fmt.Fprintln(w)
		}
	}
}

func answer(a string) string {
	if a == "" {
		return "not asked"
	}
	return "'" + a + "'"
}

// bar draws a step as a run of '#' on a line of waterfallWidth characters spanning the connect.
func bar(start, dur, total float64) string {
	if total <= 0 {
		return strings.Repeat(".", waterfallWidth)
	}
	from := int(start / total * waterfallWidth)
	n := int(dur/total*waterfallWidth + 0.5)
	from = min(max(from, 0), waterfallWidth-1)
	n = min(max(n, 1), waterfallWidth-from)
	return strings.Repeat(".", from) + strings.Repeat("#", n) + strings.Repeat(".", waterfallWidth-from-n)
}

// stepNote is what a step's attributes say, in short.
func stepNote(st Step) string {
	var parts []string
	keys := make([]string, 0, len(st.Attrs))
	for k := range st.Attrs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		parts = append(parts, k+"="+st.Attrs[k])
	}
	if st.Error != "" {
		msg := st.Error
		// pgx's "failed to connect to `user=... database=...`: addr (host): server error: " says
		// again what the connect's lines say.
		for _, sep := range []string{"server error: ", "dial error: "} {
			if i := strings.LastIndex(msg, sep); i >= 0 {
				msg = msg[i+len(sep):]
				break
			}
		}
		parts = append(parts, "error: "+msg)
	}
	if len(parts) == 0 {
		return ""
	}
	return "  " + strings.Join(parts, " ")
}

// saslNote says the SASL mechanism and, for SCRAM, whether the keys were derived (PBKDF2) or came
// from the connector's cache.
func saslNote(cn Connect) string {
	if cn.SASL == "" {
		return ""
	}
	note := " (" + cn.SASL
	if cn.KeyCached != nil {
		if *cn.KeyCached {
			note += ", keys cached"
		} else {
			note += ", keys derived"
		}
	}
	return note + ")"
}

// credentialNote says the credential the application's functions gave (its kind and source) and
// the attempts made again with a fresh one, and why.
func credentialNote(cn Connect) string {
	note := ""
	if cn.Credential != "" {
		note += ", " + cn.Credential
	}
	switch n := len(cn.Retries); n {
	case 0:
	case 1:
		note += ", 1 retry with a fresh credential (" + cn.Retries[0] + ")"
	default:
		note += fmt.Sprintf(", %d retries with a fresh credential (%s)", n, strings.Join(cn.Retries, ", "))
	}
	return note
}
