package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A peer is one client configuration: a program (pgbench for libpq, or a Go
// client process of this program) and the connection string it is given.
type peer struct {
	Name   string // as shown in tables
	Family string // "libpq", "pgx", "lib/pq", "pgconnector"
	Kind   string // kindPgbench or a Go client kind (child.go)
	DSN    string
	Warm   bool // Go peers: one unmeasured connection first (fills pgconnector's cache)
	// WarmConns, for Go peers, is the unmeasured connections before the storm (at least one with
	// Warm): see clientSpec.WarmConns.
	WarmConns int
	// Env is extra environment of the peer's process (for pgbench, the LD_LIBRARY_PATH of the
	// libpq it loads).
	Env []string
}

// kindPgbench runs the peer as pgbench -C (libpq).
const kindPgbench = "pgbench"

// outcome is what one run of a peer measured, before it is turned into a
// ConnectResult.
type outcome struct {
	conns, errors int
	firstErr      string
	seconds       float64 // duration of the storm
	latencies     []time.Duration
	cpu           time.Duration
	logical       int   // logical connections the server saw, for per-connection figures
	bytes         int64 // bulk workloads
	transport     string
}

// add merges the outcome of another round of the same peer.
func (o *outcome) add(r outcome) {
	o.conns += r.conns
	o.errors += r.errors
	if o.firstErr == "" {
		o.firstErr = r.firstErr
	}
	o.seconds += r.seconds
	o.latencies = append(o.latencies, r.latencies...)
	o.cpu += r.cpu
	o.logical += r.logical
}

// runner starts client processes: pgbench, psql, and this program as a Go
// client.
type runner struct {
	self    string // this program, re-executed as a Go client
	pgbench string
	env     []string // base environment of client processes (no PG*, KRB5*)
	tmp     string
	pin     *pinning // nil: clients and servers share the CPUs
}

// envWith is the environment of a client process: the base one plus extra
// (KDC.Env: with or without a ticket).
func (r *runner) envWith(extra []string) []string {
	return append(slices.Clone(r.env), extra...)
}

// connectRun starts peer p against dsn with clients concurrent clients and
// conns logical connections, with krbEnv (KDC.Env) in its environment. mark
// is called just before the measured part starts, done just after it ends.
func (r *runner) connectRun(ctx context.Context, p peer, krbEnv []string, clients, conns int, mark func()) (outcome, error) {
	env := append(r.envWith(krbEnv), p.Env...)
	switch p.Kind {
	case kindPgbench:
		return r.pgbenchRun(ctx, p, env, clients, conns, mark)
	case kindLibpqOAuth:
		return r.libpqOAuthRun(ctx, p, clients, conns, mark)
	}
	spec := clientSpec{Kind: p.Kind, Peer: p.Name, DSN: p.DSN, Workload: workConnect, Clients: clients, Conns: conns, Warm: p.Warm, WarmConns: p.WarmConns}
	res, err := r.child(ctx, env, spec, mark)
	if err != nil {
		return outcome{}, err
	}
	return fromChild(res), nil
}

func fromChild(res clientResult) outcome {
	o := outcome{
		conns: res.Conns, errors: res.Errors, firstErr: res.Error, seconds: res.Seconds,
		cpu: time.Duration(res.CPU), logical: res.Conns, bytes: res.Bytes, transport: res.Transport,
	}
	for _, l := range res.Latencies {
		o.latencies = append(o.latencies, time.Duration(l))
	}
	return o
}

// child runs this program as a Go client process with spec. The process
// prepares (warm-up), says ready; mark is called, the process is told to go,
// and its result is read when it ends.
func (r *runner) child(ctx context.Context, env []string, spec clientSpec, mark func()) (clientResult, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Minute)
	defer cancel()
	cmd := r.pin.command(ctx, r.self)
	cmd.Env = append(env, childEnv+"=1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return clientResult{}, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return clientResult{}, err
	}
	if err := cmd.Start(); err != nil {
		return clientResult{}, fmt.Errorf("starting a client process: %w", err)
	}
	fail := func(err error) (clientResult, error) {
		_ = stdin.Close()
		_ = cmd.Wait()
		return clientResult{}, fmt.Errorf("client %s/%s: %w: %s", spec.Kind, spec.Workload, err, shortError(stderr.String()))
	}
	out := bufio.NewScanner(stdout)
	out.Buffer(make([]byte, 1<<20), 256<<20)
	b, _ := json.Marshal(spec)
	if _, err := fmt.Fprintf(stdin, "%s\n", b); err != nil {
		return fail(err)
	}
	if !out.Scan() || out.Text() != "ready" {
		return fail(errors.New("did not get ready"))
	}
	mark()
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		return fail(err)
	}
	if !out.Scan() {
		return fail(errors.New("no result"))
	}
	var res clientResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		return fail(err)
	}
	_ = stdin.Close()
	if err := cmd.Wait(); err != nil {
		return fail(err)
	}
	return res, nil
}

var (
	pgbenchTPS       = regexp.MustCompile(`(?m)^tps = ([0-9.]+)`)
	pgbenchProcessed = regexp.MustCompile(`(?m)^number of transactions actually processed: (\d+)/(\d+)`)
	pgbenchFailed    = regexp.MustCompile(`(?m)^number of failed transactions: (\d+)`)
)

// pgbenchRun runs pgbench -C (a new libpq connection per transaction) with
// the script "select 1", clients clients and threads, conns transactions in
// all, and the per-transaction log, from which the connect latencies come.
// pgbench opens one connection of its own before the clients start (to
// print the server version): it is counted in logical and cpu covers it.
func (r *runner) pgbenchRun(ctx context.Context, p peer, env []string, clients, conns int, mark func()) (outcome, error) {
	dir, err := os.MkdirTemp(r.tmp, "pgbench-")
	if err != nil {
		return outcome{}, err
	}
	defer os.RemoveAll(dir)
	script := filepath.Join(dir, "select1.sql")
	if err := os.WriteFile(script, []byte("select 1;\n"), 0o644); err != nil {
		return outcome{}, err
	}
	perClient := max(1, conns/clients)
	args := []string{"-n", "-C", "-c", strconv.Itoa(clients), "-j", strconv.Itoa(clients),
		"-t", strconv.Itoa(perClient), "-f", script, "--log", "--log-prefix", filepath.Join(dir, "txn"), p.DSN}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Minute)
	defer cancel()
	cmd := r.pin.command(ctx, r.pgbench, args...)
	cmd.Env = env
	cmd.Dir = dir
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	mark()
	start := time.Now()
	runErr := cmd.Run()
	wall := time.Since(start).Seconds()
	if cmd.ProcessState == nil {
		return outcome{}, fmt.Errorf("pgbench: %w", runErr)
	}
	o := outcome{
		conns:   perClient * clients,
		seconds: wall,
		cpu:     cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(),
	}
	processed := 0
	if m := pgbenchProcessed.FindStringSubmatch(stdout.String()); m != nil {
		processed, _ = strconv.Atoi(m[1])
	}
	if m := pgbenchFailed.FindStringSubmatch(stdout.String()); m != nil {
		failed, _ := strconv.Atoi(m[1])
		processed -= failed
	}
	o.errors = o.conns - processed
	o.logical = o.conns + 1 // pgbench's own first connection
	// pgbench's tps leaves out its start and its own first connection: the
	// storm's duration is the processed transactions over it.
	if m := pgbenchTPS.FindStringSubmatch(stdout.String()); m != nil && processed > 0 {
		if tps, _ := strconv.ParseFloat(m[1], 64); tps > 0 {
			o.seconds = float64(processed) / tps
		}
	}
	if o.errors > 0 || runErr != nil {
		o.firstErr = firstLine(stderr.String())
		if o.firstErr == "" && runErr != nil {
			o.firstErr = runErr.Error()
		}
	}
	if processed == 0 && o.firstErr == "" {
		return outcome{}, fmt.Errorf("pgbench processed nothing: %s", shortError(stdout.String()+stderr.String()))
	}
	if o.latencies, err = pgbenchLatencies(dir); err != nil {
		return outcome{}, err
	}
	return o, nil
}

// firstLine is the first line of s that says what went wrong.
func firstLine(s string) string {
	for line := range strings.Lines(s) {
		line = strings.TrimSpace(line)
		if strings.Contains(line, "error") || strings.Contains(line, "FATAL") || strings.Contains(line, "failed") {
			return shortError(strings.TrimPrefix(line, "pgbench: "))
		}
	}
	return shortError(s)
}

// pgbenchLatencies reads pgbench's per-transaction logs in dir (one file per
// thread; each line: client_id transaction_no latency_us script_no
// end_epoch_s end_us, see "Per-Transaction Logging" in the pgbench manual)
// and returns the connect latency of each transaction after a client's
// first: its start (end - latency) minus the previous transaction's end.
// Under -C that gap is pgbench closing the previous connection (PQfinish)
// and opening the next (doConnect): the same span that the Go clients
// measure (see storm in child.go).
func pgbenchLatencies(dir string) ([]time.Duration, error) {
	files, err := filepath.Glob(filepath.Join(dir, "txn.*"))
	if err != nil {
		return nil, err
	}
	type txn struct{ start, end int64 } // µs since the epoch
	byClient := map[int][]txn{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		for line := range strings.Lines(string(data)) {
			fields := strings.Fields(line)
			if len(fields) < 6 {
				continue
			}
			client, err1 := strconv.Atoi(fields[0])
			lat, err2 := strconv.ParseInt(fields[2], 10, 64)
			sec, err3 := strconv.ParseInt(fields[4], 10, 64)
			usec, err4 := strconv.ParseInt(fields[5], 10, 64)
			if err := errors.Join(err1, err2, err3, err4); err != nil {
				return nil, fmt.Errorf("pgbench log %s: %q: %w", filepath.Base(f), strings.TrimSpace(line), err)
			}
			end := sec*1e6 + usec
			byClient[client] = append(byClient[client], txn{start: end - lat, end: end})
		}
	}
	var out []time.Duration
	for _, txns := range byClient {
		slices.SortFunc(txns, func(a, b txn) int { return int(a.end - b.end) })
		for i := 1; i < len(txns); i++ {
			out = append(out, time.Duration(txns[i].start-txns[i-1].end)*time.Microsecond)
		}
	}
	return out, nil
}

// percentile returns the q-quantile (0 < q <= 1) of ds by the nearest-rank
// method; 0 for no data. ds is sorted in place.
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(math.Ceil(q*float64(len(ds)))) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}
