package harness

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// serverAccount is the OS account the PostgreSQL programs run as.
//
// PostgreSQL refuses to run as root. When the harness runs as root it starts
// initdb, pg_ctl and postgres as the unprivileged "postgres" account (or
// "nobody" where that does not exist) by setting the process credentials
// directly; it never calls su or sudo. Otherwise the programs run as the
// current user.
type serverAccount struct {
	name     string
	uid, gid int
	switched bool // true when the programs run under another uid than ours
}

func lookupServerAccount() (*serverAccount, error) {
	if os.Geteuid() != 0 {
		name := strconv.Itoa(os.Geteuid())
		if u, err := user.Current(); err == nil {
			name = u.Username
		}
		return &serverAccount{name: name, uid: os.Geteuid(), gid: os.Getegid()}, nil
	}
	var errs []string
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		uid, err1 := strconv.Atoi(u.Uid)
		gid, err2 := strconv.Atoi(u.Gid)
		if err1 != nil || err2 != nil {
			errs = append(errs, fmt.Sprintf("user %s has non-numeric uid/gid", name))
			continue
		}
		if uid == 0 {
			continue
		}
		return &serverAccount{name: name, uid: uid, gid: gid, switched: true}, nil
	}
	return nil, fmt.Errorf("harness: running as root, and no unprivileged account (postgres or nobody) to run PostgreSQL as: %s",
		strings.Join(errs, "; "))
}

// command builds an exec.Cmd that runs as the server account with a clean
// environment: no PG* variables (they would change what pg_ctl and the server
// do), no KRB5* variables (a server with Kerberos gets its own, see
// GSSOptions) and the C locale.
func (a *serverAccount) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = CleanEnv()
	cmd.Dir = "/"
	// A process group of its own: the terminal's Ctrl-C goes to the program, which stops what
	// the harness runs through ctx and Cleanup, not to initdb or pg_ctl in the middle of a step.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if a.switched {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(a.uid), Gid: uint32(a.gid), Groups: []uint32{}}
	}
	// pg_ctl start leaves a daemon behind; it redirects the daemon's output to
	// the log file, but never wait forever for pipes should that change.
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

// chown gives path to the server account (a no-op unless we switched users).
func (a *serverAccount) chown(path string) error {
	if !a.switched {
		return nil
	}
	return os.Lchown(path, a.uid, a.gid)
}

// mkdir creates dir with the given mode (umask ignored), owned by the server
// account.
func (a *serverAccount) mkdir(dir string, mode fs.FileMode) error {
	if err := os.Mkdir(dir, mode); err != nil {
		return err
	}
	if err := os.Chmod(dir, mode); err != nil {
		return err
	}
	return a.chown(dir)
}

// writeFile atomically replaces path (write to a temporary file, then rename),
// so that a server reading it concurrently never sees half a file. The file
// gets the given mode and belongs to the server account.
func (a *serverAccount) writeFile(path string, data []byte, mode fs.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Chmod(mode); err != nil {
		return err
	}
	if a.switched {
		if err := f.Chown(a.uid, a.gid); err != nil {
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	ok = true
	return nil
}

// canTraverse checks that the server account can reach dir and everything
// below it that it owns: every directory from / down to dir must let it pass.
func (a *serverAccount) canTraverse(dir string) error {
	if !a.switched {
		return nil
	}
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("harness: %w", err)
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		perm := fi.Mode().Perm()
		if ok && !(perm&0o001 != 0 ||
			int(st.Uid) == a.uid && perm&0o100 != 0 ||
			int(st.Gid) == a.gid && perm&0o010 != 0) {
			return fmt.Errorf("harness: the account %q that runs PostgreSQL cannot enter %s (mode %v); "+
				"set TMPDIR to a directory that every user can reach, such as /tmp", a.name, d, perm)
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}
