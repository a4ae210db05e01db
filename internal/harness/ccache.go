package harness

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Credential caches of any type (FILE, DIR, KEYRING, KCM), named as MIT names
// them: kinit, kdestroy, kswitch and klist with KRB5CCNAME set to the name.

// EnvName is Env with KRB5CCNAME set to the credential cache name ccacheName
// verbatim ("KEYRING:session:x", "DIR:/some/dir", ...).
func (k *KDC) EnvName(ccacheName string) []string {
	return append(k.Env(""), "KRB5CCNAME="+ccacheName)
}

// KinitName is Kinit into the credential cache named ccacheName. For a
// collection (DIR:dir, KEYRING:anchor:name) kinit picks the cache in it as MIT
// does: the primary if it is empty or holds principal, else a new cache,
// which becomes the primary.
func (k *KDC) KinitName(ccacheName, principal string, lifetime time.Duration) error {
	if err := checkPrincipal(principal); err != nil {
		return err
	}
	if ccacheName == "" {
		return errors.New("harness: KinitName: no ccache name given")
	}
	return k.kinit(k.EnvName(ccacheName), principal, lifetime)
}

// Kdestroy runs kdestroy on the credential cache named ccacheName; with all,
// kdestroy -A destroys every cache of its collection. A cache that does not
// exist is not an error.
func (k *KDC) Kdestroy(ccacheName string, all bool) error {
	var args []string
	if all {
		args = append(args, "-A")
	}
	return k.runCcacheTool("kdestroy", ccacheName, args...)
}

// Kswitch makes the cache of principal (realm appended when missing) the
// primary cache of the collection named ccacheName (kswitch -p).
func (k *KDC) Kswitch(ccacheName, principal string) error {
	if err := checkPrincipal(principal); err != nil {
		return err
	}
	return k.runCcacheTool("kswitch", ccacheName, "-p", k.Principal(principal))
}

// KlistName returns the output of klist for the credential cache named
// ccacheName (for a collection: its primary cache).
func (k *KDC) KlistName(ccacheName string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, _, err := runKrb5(ctx, append(CleanEnv(), k.EnvName(ccacheName)...), "", k.progs.klist)
	return out, err
}

// runCcacheTool runs kdestroy or kswitch, which krb5-user installs next to
// kinit.
func (k *KDC) runCcacheTool(tool, ccacheName string, args ...string) error {
	if ccacheName == "" {
		return fmt.Errorf("harness: %s: no ccache name given", tool)
	}
	prog := filepath.Join(filepath.Dir(k.progs.kinit), tool)
	if !isExecutable(prog) {
		p, err := exec.LookPath(tool)
		if err != nil {
			return fmt.Errorf("harness: %s not found next to %s or in $PATH; %s", tool, k.progs.kinit, krb5InstallHint)
		}
		prog = p
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, _, err := runKrb5(ctx, append(CleanEnv(), k.EnvName(ccacheName)...), "", prog, args...)
	if err != nil && strings.Contains(err.Error(), "No credentials cache found") && tool == "kdestroy" {
		return nil // nothing to destroy
	}
	return err
}
