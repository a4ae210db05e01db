package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/pgconnector/pgconnector/internal/harness"
)

// Peer names of scenario 10.
const (
	peerLibpqDirect = "libpq sslnegotiation=direct sslmode=require"
	peerPgxDirect   = "pgx sslnegotiation=direct sslmode=require"
)

// directTLSMajor is the first PostgreSQL major version whose server accepts a TLS ClientHello
// as a connection's first bytes (ALPN "postgresql") and whose libpq has sslnegotiation=direct:
// "Direct SSL Connection" in protocol-flow.html, and sslnegotiation in libpq-connect.html.
const directTLSMajor = 17

// distanceRounds caps the rounds of scenario 10: a connection over 25 ms each way costs a few
// hundred ms, and each round starts a client process that pays its warm-up connections again.
const distanceRounds = 3

// distanceWarmConns is the unmeasured connections a Go peer of scenario 10 makes before its
// storm: the first fills pgconnector's decision cache for the host, as a running application's
// would be.
const distanceWarmConns = 2

// pgSetup is the server and the libpq of scenario 10: the one place where the -pg-major choice
// is made.
type pgSetup struct {
	major  int
	server harness.Options // TLS and Auth are set per server
	// libpqEnv is the environment that makes pgbench load the chosen libpq
	// (LD_LIBRARY_PATH); empty for the system's.
	libpqEnv []string
	libpq    string // the libpq pgbench runs with, for the report: "libpq 18 (DIR)"
	direct   bool   // the server and libpq have direct TLS: the sslnegotiation=direct peers run
}

// choosePG finds what scenario 10 needs for PostgreSQL major version major (-pg-major): the
// harness's server programs of that version (harness.Options.Major: Debian's 15, the registry
// builds of 16-18 that scripts/install-deps.sh installs) and, from 17 on, a libpq of that
// version for pgbench (sslnegotiation=direct came with libpq 17): libpq.so.5.N, N the major
// version, in $PG_BINDIR/../lib or the registry build's lib directory.
func choosePG(ctx context.Context, major int) (pgSetup, error) {
	s := pgSetup{major: major, libpq: "the system's libpq", server: harness.Options{Major: major}}
	have, err := harness.ServerVersionOf(ctx, major)
	if err != nil {
		return s, fmt.Errorf("scenario 10 wants PostgreSQL %d (-pg-major): %w; pass another -pg-major or leave 10 out of -scenarios", major, err)
	}
	if have != major {
		return s, fmt.Errorf("scenario 10 wants PostgreSQL %d (-pg-major), but the harness finds PostgreSQL %d", major, have)
	}
	if major < directTLSMajor {
		return s, nil
	}
	var dirs []string
	if bin := os.Getenv("PG_BINDIR"); bin != "" {
		dirs = append(dirs, filepath.Join(filepath.Dir(filepath.Clean(bin)), "lib"))
	}
	root := os.Getenv("PGCONNECTOR_PG_ROOT")
	if root == "" {
		root = harness.DefaultPGRoot
	}
	dirs = append(dirs, filepath.Join(root, fmt.Sprintf("postgresql-%d", major), "lib"))
	var tried []string
	for _, dir := range dirs {
		v, err := libpqVersion(dir)
		if err != nil {
			tried = append(tried, err.Error())
			continue
		}
		if v < directTLSMajor {
			tried = append(tried, fmt.Sprintf("%s: libpq %d, before sslnegotiation", dir, v))
			continue
		}
		s.libpqEnv = []string{"LD_LIBRARY_PATH=" + dir}
		s.libpq = fmt.Sprintf("libpq %d (%s)", v, dir)
		s.direct = true
		return s, nil
	}
	return s, fmt.Errorf("scenario 10 on PostgreSQL %d needs libpq %d or newer for pgbench (sslnegotiation=direct); none found: %s; "+
		"install it (scripts/install-deps.sh) or pass a -pg-major below %d", major, directTLSMajor,
		strings.Join(tried, "; "), directTLSMajor)
}

// libpqVersion returns the major version of dir/libpq.so.5: since PostgreSQL 10 the file the
// link names is libpq.so.5.N with N the major version (src/interfaces/libpq/Makefile,
// SO_MINOR_VERSION).
func libpqVersion(dir string) (int, error) {
	real, err := filepath.EvalSymlinks(filepath.Join(dir, "libpq.so.5"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return 0, fmt.Errorf("%s: no libpq.so.5", dir)
		}
		return 0, err
	}
	minor, ok := strings.CutPrefix(filepath.Base(real), "libpq.so.5.")
	v, err := strconv.Atoi(minor)
	if !ok || err != nil {
		return 0, fmt.Errorf("%s: cannot tell the version of %s", dir, filepath.Base(real))
	}
	return v, nil
}

// distancePeers are the peers of scenario 10 against dsn (no sslmode: the default prefer).
func distancePeers(dsn string, s pgSetup) []peer {
	ps := []peer{
		{Name: peerDefault, Family: "pgconnector", Kind: kindPgconnector, DSN: dsn, Warm: true, WarmConns: distanceWarmConns},
		{Name: peerLibpqDefault, Family: "libpq", Kind: kindPgbench, DSN: dsn, Env: s.libpqEnv},
	}
	if s.direct {
		ps = append(ps, peer{Name: peerLibpqDirect, Family: "libpq", Kind: kindPgbench,
			DSN: dsn + " sslnegotiation=direct sslmode=require", Env: s.libpqEnv})
	}
	ps = append(ps, peer{Name: peerPgxDefault, Family: "pgx", Kind: kindPgx, DSN: dsn, Warm: true, WarmConns: distanceWarmConns})
	if s.direct {
		ps = append(ps, peer{Name: peerPgxDirect, Family: "pgx", Kind: kindPgx,
			DSN: dsn + " sslnegotiation=direct sslmode=require", Warm: true, WarmConns: distanceWarmConns})
	}
	return ps
}

// distance is scenario 10: connect latency to a TLS server through a harness.DelayProxy at each
// one-way delay of -distance-delays, with pg_hba trust and with scram-sha-256, one client per
// peer, -distance-conns connections per peer and cell in at most distanceRounds rounds.
func (l *lab) distance(ctx context.Context, s pgSetup) error {
	l.rep.DistanceServer = fmt.Sprintf("PostgreSQL %d", s.major)
	l.rep.DistanceLibpq = s.libpq
	for _, auth := range []string{userTrust, userScram} {
		opts := s.server
		opts.TLS, opts.Auth = true, auth
		pg, err := startServer(ctx, "scenario 10 server (TLS, "+auth+")", opts)
		if err != nil {
			return err
		}
		err = l.distanceServer(ctx, pg, s, auth)
		stopServer(pg)
		if err != nil {
			return err
		}
	}
	return nil
}

func (l *lab) distanceServer(ctx context.Context, pg *harness.Postgres, s pgSetup, auth string) error {
	for _, ms := range l.cfg.distanceDelays {
		delay := time.Duration(ms) * time.Millisecond
		px, err := harness.NewDelayProxy(pg.Addr(), delay)
		if err != nil {
			return err
		}
		host, port := px.Addr()
		peers := distancePeers(appDSN(pg, host, port), s)
		log.Printf("scenario 10: %s, one-way delay %v (round trip %v)", auth, delay, 2*delay)
		from := len(l.rep.Connect)
		rounds, conns := stormShape(l.cfg.distanceConns, 1, min(l.cfg.rounds, distanceRounds))
		err = l.storm(ctx, 10, pgCounter{pg}, peers, noTickets(len(peers)), 1, conns, rounds)
		if cerr := px.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		for i := from; i < len(l.rep.Connect); i++ {
			l.rep.Connect[i].User = auth
			l.rep.Connect[i].Delay = delay
		}
	}
	return nil
}
