package harness

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// StartStandby makes a hot standby of p, for tests of clients that must tell
// a primary from a standby (target_session_attrs, read-only sessions). It
// copies p with pg_basebackup -R (from the directory of initdb) over p's unix
// socket as the bootstrap superuser, into a new cluster directory in the
// per-process directory, and starts the copy on its own port and socket
// directory. The registry builds of Options.Major 16 to 18 have no
// pg_basebackup (and Debian's 15 refuses newer servers): for them the copy is
// a file-level base backup between pg_backup_start and pg_backup_stop (see
// copyBackup). It returns once the standby accepts read-only connections and
// streams WAL from p.
//
// The standby is a harness server like any other, and a copy of p: the same
// User, Password, Database, pg_hba.conf and Settings; with p's TLS setup (its
// certificate and key, and a copy of CAFile) and p's Kerberos setup (a copy
// of KeytabFile). Stop, SetHBA, SetSSL, LogMark and ConnectionsSince work as
// for p; ExecAdmin can only read until Promote.
//
// pg_basebackup's connections and the standby's WAL receiver are the
// harness's own: p's ConnectionsSince leaves them out (but counts the WAL
// receiver again should it reconnect, for example after p was stopped).
// Stopping p leaves the standby running, in recovery. The caller must Stop
// the standby; tests use StartStandbyT.
//
// p must be a primary (or a promoted standby): PostgreSQL refuses a backup
// of a standby that replayed WAL written with full_page_writes off, as the
// harness's servers run. A row committed on p reaches the standby within
// about wal_writer_delay (200 ms), as commits are asynchronous
// (synchronous_commit off); to wait for it, compare the standby's
// pg_last_wal_replay_lsn() with p's pg_current_wal_insert_lsn().
func (p *Postgres) StartStandby(ctx context.Context) (*Postgres, error) {
	e := p.env
	basebackup := filepath.Join(e.bin.dir, "pg_basebackup")
	if !isExecutable(basebackup) {
		if e.bin.libDir == "" {
			return nil, fmt.Errorf("harness: pg_basebackup not found next to %s; run scripts/install-deps.sh", e.bin.initdb)
		}
		basebackup = "" // a registry build has none: copyBackup
	}
	dir, err := os.MkdirTemp(e.base, "cluster-*")
	if err != nil {
		return nil, fmt.Errorf("harness: %w", err)
	}
	p.mu.Lock()
	s := &Postgres{
		Host:       p.Host,
		SocketDir:  dir,
		User:       p.User,
		Password:   p.Password,
		Database:   p.Database,
		DataDir:    filepath.Join(dir, "data"),
		Version:    p.Version,
		KrbSrvName: p.KrbSrvName,
		env:        e,
		dir:        dir,
		logFile:    filepath.Join(dir, "postgres.log"),
		ssl:        p.ssl,
		certs:      p.certs,
		set:        maps.Clone(p.set),
	}
	from := primaryFiles{ca: p.CAFile, keytab: p.KeytabFile, gss: p.krbKeyfile != "", serverEnv: p.serverEnv}
	p.mu.Unlock()

	if err := s.startStandby(ctx, p, basebackup, from); err != nil {
		_ = s.Stop()
		return nil, interrupted(ctx, "starting a standby", err)
	}
	return s, nil
}

// primaryFiles are the files outside the data directory that a standby copies
// from its primary, and the primary's Kerberos environment.
type primaryFiles struct {
	ca, keytab string // CAFile and KeytabFile, or ""
	gss        bool   // the primary has a Kerberos setup
	serverEnv  []string
}

func (s *Postgres) startStandby(ctx context.Context, primary *Postgres, basebackup string, from primaryFiles) error {
	e := s.env
	if err := s.prepareDir(); err != nil {
		return err
	}
	mark := primary.LogMark()
	if basebackup == "" {
		if err := s.copyBackup(ctx, primary); err != nil {
			return err
		}
	} else if err := s.baseBackup(ctx, primary, basebackup); err != nil {
		return err
	}
	acct := e.acct
	if from.ca != "" {
		b, err := os.ReadFile(from.ca)
		if err != nil {
			return fmt.Errorf("harness: %w", err)
		}
		ca := filepath.Join(s.dir, "ca.crt")
		if err := acct.writeFile(ca, b, 0o644); err != nil {
			return fmt.Errorf("harness: %w", err)
		}
		s.CAFile = ca
	}
	if from.gss {
		keytab := filepath.Join(s.dir, "server.keytab")
		rcache := filepath.Join(s.dir, "krb5rcache")
		if err := acct.mkdir(rcache, 0o700); err != nil {
			return fmt.Errorf("harness: %w", err)
		}
		if from.keytab != "" {
			b, err := os.ReadFile(from.keytab)
			if err != nil {
				return fmt.Errorf("harness: %w", err)
			}
			if err := acct.writeFile(keytab, b, 0o600); err != nil {
				return fmt.Errorf("harness: %w", err)
			}
			s.KeytabFile = keytab
		}
		s.krbKeyfile = keytab
		for _, kv := range from.serverEnv {
			if strings.HasPrefix(kv, "KRB5RCACHEDIR=") {
				kv = "KRB5RCACHEDIR=" + rcache // a replay cache of its own
			}
			s.serverEnv = append(s.serverEnv, kv)
		}
	}
	if err := s.startOnFreePort(ctx); err != nil {
		return err
	}
	if err := s.waitStreaming(ctx); err != nil {
		return err
	}
	primary.leaveOutReplication(mark)
	return nil
}

// baseBackup runs pg_basebackup from primary into s.DataDir, writing
// standby.signal and primary_conninfo (-R). The checkpoint that starts the
// backup is immediate (-c fast) and nothing is synced to disk (-N), as the
// harness's servers run with fsync off anyway.
func (s *Postgres) baseBackup(ctx context.Context, primary *Postgres, basebackup string) error {
	e := s.env
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var out strings.Builder
	cmd := e.command(ctx, basebackup,
		"-D", s.DataDir, "-h", primary.SocketDir, "-p", strconv.Itoa(primary.Port), "-U", superUser,
		"-R", "-X", "stream", "-c", "fast", "-N", "--no-manifest", "-w")
	// With -X stream pg_basebackup forks a WAL streamer: end both.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return fmt.Errorf("harness: pg_basebackup: %w\n%s", err, strings.TrimSpace(out.String()))
	}
	return nil
}

// copyBackup makes s.DataDir a standby's copy of primary without pg_basebackup, by the
// low-level base backup API (PostgreSQL documentation, "Making a Base Backup Using the Low
// Level API", continuous-archiving.html): in one superuser session on primary it creates a
// temporary physical replication slot that reserves WAL at once (so that no segment the
// backup needs is recycled until the session ends), calls pg_backup_start(label, fast =>
// true), copies the data directory without what that page says to leave out (pg_wal's
// contents, pg_replslot, pg_dynshmem, pg_notify, pg_serial, pg_snapshots, pg_stat_tmp,
// pg_subtrans, pgsql_tmp*, pg_internal.init, postmaster.pid and .opts), calls
// pg_backup_stop(wait_for_archive => false), which switches to a new WAL segment, writes its
// label file as backup_label, and then copies pg_wal's segments. Last it writes
// standby.signal and a primary_conninfo to primary's unix socket as the bootstrap superuser
// into postgresql.auto.conf, as pg_basebackup -R does.
func (s *Postgres) copyBackup(ctx context.Context, primary *Postgres) error {
	e := s.env
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var slot [8]byte
	if _, err := rand.Read(slot[:]); err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	src := primary.DataDir
	err := primary.admin(ctx, func(conn *pgx.Conn) error {
		if _, err := conn.Exec(ctx, "SELECT pg_create_physical_replication_slot($1, true, true)",
			"pgconnector_copy_"+hex.EncodeToString(slot[:])); err != nil {
			return fmt.Errorf("creating a temporary replication slot: %w", err)
		}
		if _, err := conn.Exec(ctx, "SELECT pg_backup_start('pgconnector standby', true)"); err != nil {
			return fmt.Errorf("pg_backup_start: %w", err)
		}
		copyErr := e.copyDir(src, s.DataDir, skipInBackup)
		var label, spcmap string
		if err := conn.QueryRow(ctx, "SELECT labelfile, spcmapfile FROM pg_backup_stop(false)").Scan(&label, &spcmap); err != nil {
			return errors.Join(copyErr, fmt.Errorf("pg_backup_stop: %w", err))
		}
		if copyErr != nil {
			return fmt.Errorf("copying %s: %w", src, copyErr)
		}
		if err := e.acct.writeFile(filepath.Join(s.DataDir, "backup_label"), []byte(label), 0o600); err != nil {
			return err
		}
		if spcmap != "" {
			if err := e.acct.writeFile(filepath.Join(s.DataDir, "tablespace_map"), []byte(spcmap), 0o600); err != nil {
				return err
			}
		}
		return s.copyWAL(filepath.Join(src, "pg_wal"))
	})
	if err != nil {
		return fmt.Errorf("harness: base backup of the primary: %w", err)
	}
	if err := e.acct.writeFile(filepath.Join(s.DataDir, "standby.signal"), nil, 0o600); err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	auto := filepath.Join(s.DataDir, "postgresql.auto.conf")
	old, err := os.ReadFile(auto)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("harness: %w", err)
	}
	conninfo := fmt.Sprintf("host=%s port=%d user=%s", dsnQuote(primary.SocketDir), primary.Port, superUser)
	conf := append(old, []byte("primary_conninfo = "+confQuote(conninfo)+"\n")...)
	if err := e.acct.writeFile(auto, conf, 0o600); err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	return nil
}

// skipInBackup tells copyDir what a base backup leaves out (rel is relative to the data
// directory); for a directory, its contents.
func skipInBackup(rel string, isDir bool) bool {
	base := filepath.Base(rel)
	if isDir {
		switch rel {
		case "pg_wal", "pg_replslot", "pg_dynshmem", "pg_notify", "pg_serial", "pg_snapshots", "pg_stat_tmp", "pg_subtrans":
			return true
		}
		return strings.HasPrefix(base, "pgsql_tmp")
	}
	switch rel {
	case "postmaster.pid", "postmaster.opts", "backup_label", "backup_label.old", "tablespace_map",
		"standby.signal", "recovery.signal", "current_logfiles":
		return true
	}
	return base == "pg_internal.init" || strings.HasPrefix(base, "pgsql_tmp")
}

// copyWAL copies the WAL segments and history files of the primary's pg_wal into the
// standby's, and makes its subdirectories (archive_status, summaries), empty.
func (s *Postgres) copyWAL(src string) error {
	e := s.env
	dst := filepath.Join(s.DataDir, "pg_wal")
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, d := range entries {
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue // recycled meanwhile: not one the backup needs, as the slot holds those
		}
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			if err := e.acct.mkdir(filepath.Join(dst, d.Name()), info.Mode().Perm()); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
		case info.Mode().IsRegular():
			if err := e.copyFile(filepath.Join(src, d.Name()), filepath.Join(dst, d.Name()), info.Mode().Perm()); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

// waitStreaming waits until the standby's WAL receiver streams from the
// primary.
func (s *Postgres) waitStreaming(ctx context.Context) error {
	delay := time.Millisecond
	for {
		var status string
		err := s.admin(ctx, func(conn *pgx.Conn) error {
			err := conn.QueryRow(ctx, "SELECT status FROM pg_stat_wal_receiver").Scan(&status)
			if errors.Is(err, pgx.ErrNoRows) {
				return nil // no WAL receiver yet
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("harness: standby: %w", err)
		}
		if status == "streaming" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("harness: the standby does not stream from its primary (WAL receiver %q): %w\nserver log:\n%s",
				status, ctx.Err(), lastLines(s.Log(), 30))
		case <-time.After(delay):
		}
		delay = min(2*delay, 50*time.Millisecond)
	}
}

// leaveOutReplication records the replication connections logged since mark
// (pg_basebackup's and a WAL receiver's) as the harness's own, so that
// ConnectionsSince does not count them. Each such backend logs "replication
// connection authorized" right after "connection received"; by the time a
// standby streams, both lines of all of them are in the log.
func (p *Postgres) leaveOutReplication(mark int64) {
	f, err := os.Open(p.logFile)
	if err != nil {
		return
	}
	defer f.Close()
	if _, err := f.Seek(mark, io.SeekStart); err != nil {
		return
	}
	const marker = "] LOG:  replication connection authorized: "
	var pids []uint32
	r := bufio.NewReaderSize(f, 64*1024)
	to := mark
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			break // the end, or a line still being written
		}
		to += int64(len(line))
		if i := strings.Index(line, marker); i >= 0 {
			pids = append(pids, linePID(line[:i]))
		}
	}
	p.spansMu.Lock()
	for _, pid := range pids {
		p.spans = append(p.spans, adminSpan{pid: pid, from: mark, to: to})
	}
	p.spansMu.Unlock()
}

// StartStandbyT makes and starts a hot standby of primary for a test (see
// StartStandby), fails the test if that does not work, and stops the standby
// when the test ends. If the test failed, the end of the standby's log is
// logged first.
func StartStandbyT(t testing.TB, primary *Postgres) *Postgres {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := primary.StartStandby(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("harness: end of the standby's log (%s):\n%s", s.logFile, lastLines(s.Log(), 60))
		}
		if err := s.Stop(); err != nil {
			t.Errorf("harness: %v", err)
		}
	})
	return s
}

// Promote ends recovery on a standby (pg_ctl promote) and returns once it is
// a primary: pg_is_in_recovery() is false and sessions may write. On a server
// that is not a standby it returns pg_ctl's complaint.
func (p *Postgres) Promote(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.env
	// -W: pg_ctl would look every 100 ms; the loop below looks sooner.
	if _, err := e.run(ctx, e.bin.pgCtl, "promote", "-W", "-s", "-D", p.DataDir); err != nil {
		return interrupted(ctx, "promoting a standby", fmt.Errorf("harness: %w", err))
	}
	delay := time.Millisecond
	for {
		var recovery bool
		err := p.admin(ctx, func(conn *pgx.Conn) error {
			return conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&recovery)
		})
		if err != nil {
			return interrupted(ctx, "promoting a standby", fmt.Errorf("harness: promote: %w", err))
		}
		if !recovery {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("harness: promote: the server is still in recovery: %w", ctx.Err())
		case <-time.After(delay):
		}
		delay = min(2*delay, 50*time.Millisecond)
	}
}

// OSUser returns the name of the OS account the server runs as: the user
// that SO_PEERCRED reports for its unix socket, which is what libpq's
// requirepeer compares with. It is the current user, or, when the harness
// runs as root, "postgres" (or "nobody"); a numeric uid when the current
// user has no name.
func (p *Postgres) OSUser() string {
	return p.env.acct.name
}
