package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/pgconnector/pgconnector/internal/harness"
)

// fullGSS is scenario 4: a server whose pg_hba lets alice in only over GSS
// encryption. First the connection storm, then the bulk transfers over GSS
// and, with a hostssl line added, over TLS, each by psql and by pgconnector.
func (l *lab) fullGSS(ctx context.Context) error {
	gssLine := "hostgssenc all all 127.0.0.1/32 gss include_realm=0 krb_realm=" + l.kdc.Realm
	pg, err := startServer(ctx, "scenario 4 server (hostgssenc only, TLS on)", harness.Options{
		TLS: true,
		GSS: &harness.GSSOptions{KDC: l.kdc, Keytab: true},
		HBA: []string{gssLine},
	})
	if err != nil {
		return err
	}
	defer stopServer(pg)
	if err := pg.CreateRole("alice"); err != nil {
		return err
	}
	dsn := fmt.Sprintf("host=%s port=%d user=alice dbname=%s connect_timeout=20", pg.Host, pg.Port, pg.Database)
	peers := []peer{
		{Name: peerLibpqDefault, Family: "libpq", Kind: kindPgbench, DSN: dsn},
		{Name: peerPgxDefault, Family: "pgx", Kind: kindPgx, DSN: dsn},
		{Name: "lib/pq sslmode=prefer", Family: "lib/pq", Kind: kindPq, DSN: dsn + " sslmode=prefer"},
		{Name: "pgconnector cold", Family: "pgconnector", Kind: kindPgconnectorCold, DSN: dsn},
		{Name: peerWarm, Family: "pgconnector", Kind: kindPgconnector, DSN: dsn, Warm: true},
	}
	if err := l.storm(ctx, 4, pgCounter{pg}, peers, allTickets(len(peers)), l.cfg.clients, l.cfg.gssConns, l.cfg.rounds); err != nil {
		return err
	}
	if l.cfg.copyMiB == 0 && l.cfg.byteaMiB == 0 {
		return nil
	}
	if err := pg.SetHBA(gssLine, "hostssl all all 127.0.0.1/32 gss include_realm=0 krb_realm="+l.kdc.Realm); err != nil {
		return err
	}
	return l.bulk(ctx, pg, dsn)
}

// bulk runs the throughput workloads of scenario 4.
func (l *lab) bulk(ctx context.Context, pg *harness.Postgres, dsn string) error {
	type workload struct {
		name, kind, query, file string
		want                    int64 // bytea: length of the text result
	}
	var works []workload
	if l.cfg.copyMiB > 0 {
		// One row is a line of 1024 bytes in COPY's text format: an 8-digit
		// id, a tab, 1014 letters, a newline.
		rows := l.cfg.copyMiB * 1024
		err := pg.ExecAdmin(ctx, fmt.Sprintf(`CREATE TABLE public.bench_copy AS
			SELECT lpad(g::text, 8, '0') AS id, repeat(chr(97 + g %% 26), 1014) AS pad
			FROM generate_series(1, %d) AS g;
			GRANT SELECT ON public.bench_copy TO alice`, rows))
		if err != nil {
			return err
		}
		works = append(works, workload{
			name: fmt.Sprintf("COPY out %d MiB", l.cfg.copyMiB), kind: workCopy,
			query: "COPY public.bench_copy TO STDOUT",
		})
	}
	if l.cfg.byteaMiB > 0 {
		file, want, err := writeByteaSQL(l.r.tmp, l.cfg.byteaMiB<<20)
		if err != nil {
			return err
		}
		works = append(works, workload{
			name: fmt.Sprintf("bytea %d MiB round trip", l.cfg.byteaMiB), kind: workBytea, file: file, want: want,
		})
	}
	transports := []struct{ name, extra string }{
		{"GSS", ""},
		{"TLS", " gssencmode=disable sslmode=require"},
	}
	env := l.r.envWith(l.ticket)
	for _, tr := range transports {
		got, err := harness.Psql(ctx, l.ticket, dsn+tr.extra, transportQuery)
		if err != nil {
			return fmt.Errorf("psql over %s: %w", tr.name, err)
		}
		if want := map[string]string{"GSS": "t|f", "TLS": "f|t"}[tr.name]; got != want {
			return fmt.Errorf("psql over %s: pg_stat_gssapi/pg_stat_ssl say %q, want %q", tr.name, got, want)
		}
	}
	for _, w := range works {
		for _, tr := range transports {
			best := map[string]ThroughputResult{}
			for rep := range max(1, l.cfg.bulkReps) {
				for _, family := range []string{"libpq", "pgconnector"} {
					var r ThroughputResult
					if family == "libpq" {
						r = l.psqlBulk(ctx, env, dsn+tr.extra, w.kind, w.query, w.file, w.want)
						r.Peer = "psql (libpq)"
					} else {
						spec := clientSpec{Kind: kindPgconnector, DSN: dsn + tr.extra, Workload: w.kind, Clients: 1,
							Query: w.query, File: w.file, Want: w.want}
						res, err := l.r.child(ctx, env, spec, func() {})
						if err != nil {
							return err
						}
						if res.Transport != tr.name && res.Error == "" {
							return fmt.Errorf("pgconnector over %s: the server says the connection is %s", tr.name, res.Transport)
						}
						r = ThroughputResult{Peer: "pgconnector", Bytes: res.Bytes, Seconds: res.Seconds,
							CPU: time.Duration(res.CPU), Error: res.Error}
					}
					r.Workload, r.Family, r.Transport = w.name, family, tr.name
					if r.Seconds > 0 && r.Error == "" {
						r.MBPerSec = float64(r.Bytes) / r.Seconds / 1e6
					}
					log.Printf("scenario 4 %s over %s, round %d: %-13s %.0f MB/s %s", w.name, tr.name, rep+1, r.Peer, r.MBPerSec, r.Error)
					if b, ok := best[family]; !ok || (r.Error == "" && (b.Error != "" || r.Seconds < b.Seconds)) {
						best[family] = r
					}
				}
			}
			l.rep.Throughput = append(l.rep.Throughput, best["libpq"], best["pgconnector"])
		}
	}
	return nil
}

// transportQuery answers "t|f" over GSS encryption and "f|t" over TLS.
const transportQuery = `select
	coalesce((select encrypted from pg_stat_gssapi where pid = pg_backend_pid()), false),
	coalesce((select ssl from pg_stat_ssl where pid = pg_backend_pid()), false)`

// writeByteaSQL writes a statement that sends n random bytes as a bytea
// literal in hex and gets them back: select '\x...'::bytea. The same text
// goes over the wire for psql and pgconnector (simple query protocol, text
// results), so both move the same bytes. It returns the file and the length
// of the text result (\x and two hex digits per byte).
func writeByteaSQL(dir string, n int) (string, int64, error) {
	data := make([]byte, n)
	rng := rand.NewChaCha8([32]byte{'p', 'g', 'c', 'o', 'n', 'n', 'e', 'c', 't', 'o', 'r'})
	_, _ = rng.Read(data)
	var b strings.Builder
	b.Grow(2*n + 32)
	b.WriteString(`select '\x`)
	b.WriteString(hex.EncodeToString(data))
	b.WriteString(`'::bytea;` + "\n")
	file := filepath.Join(dir, "bytea-roundtrip.sql")
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		return "", 0, err
	}
	return file, int64(2 + 2*n), nil
}

// psqlBulk runs one bulk workload with psql. Its output goes straight into
// a file (on /dev/shm when there is one, so memory, not disk), counted
// there: a pipe to this process would make the reading side part of the
// measurement. Wall time and CPU are the whole psql process (start and
// connect included: milliseconds, against seconds of transfer).
func (l *lab) psqlBulk(ctx context.Context, env []string, conninfo, kind, query, file string, want int64) ThroughputResult {
	fail := func(err error) ThroughputResult { return ThroughputResult{Error: err.Error()} }
	psql, err := harness.Program(ctx, "psql")
	if err != nil {
		return fail(err)
	}
	dir := l.r.tmp
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		dir = "/dev/shm"
	}
	out, err := os.CreateTemp(dir, "pgconnect-bench-psql-*.out")
	if err != nil {
		return fail(err)
	}
	defer os.Remove(out.Name())
	defer out.Close()
	args := []string{"-X", "-w", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1", "-d", conninfo}
	if kind == workCopy {
		args = append(args, "-c", query)
	} else {
		args = append(args, "-f", file)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cmd := l.r.pin.command(ctx, psql, args...)
	cmd.Env = env
	var stderr strings.Builder
	cmd.Stdout, cmd.Stderr = out, &stderr
	start := time.Now()
	err = cmd.Run()
	r := ThroughputResult{Seconds: time.Since(start).Seconds()}
	if cmd.ProcessState != nil {
		r.CPU = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	fi, statErr := out.Stat()
	if statErr != nil {
		return fail(statErr)
	}
	r.Bytes = fi.Size()
	switch {
	case err != nil:
		r.Error = shortError(fmt.Sprintf("psql: %v: %s", err, stderr.String()))
	case kind == workBytea && r.Bytes != want+1: // and a newline
		r.Error = fmt.Sprintf("psql printed %d bytes, want %d", r.Bytes, want+1)
	case kind == workBytea:
		sql, err := os.Stat(file)
		if err != nil {
			return fail(err)
		}
		r.Bytes = sql.Size() + want
	}
	return r
}
