package harness

import (
	"context"
	"encoding/binary"
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

// HugeAddressCountCCache returns a FILE credential cache of 179 bytes (format version 4,
// as kinit writes it: a KDC time offset header, the principal alice@EXAMPLE.COM) whose first
// credential, a ticket-granting ticket, claims 2^31-1 addresses and ends there. MIT 1.20's
// klist shows its principal and no ticket (exit status 0); a reader that sizes its address
// list from the count before checking it against the file asks for tens of GiB.
func HugeAddressCountCCache() []byte {
	u32 := binary.BigEndian.AppendUint32
	data := func(b []byte, s string) []byte { return append(u32(b, uint32(len(s))), s...) }
	princ := func(b []byte, realm string, comps ...string) []byte {
		b = u32(u32(b, 1), uint32(len(comps))) // NT-PRINCIPAL
		b = data(b, realm)
		for _, c := range comps {
			b = data(b, c)
		}
		return b
	}
	b := []byte{5, 4, 0, 12, 0, 1, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0} // v4, KDC offset 0 s 0 us
	b = princ(b, "EXAMPLE.COM", "alice")
	b = princ(b, "EXAMPLE.COM", "alice")
	b = princ(b, "EXAMPLE.COM", "krbtgt", "EXAMPLE.COM")
	b = binary.BigEndian.AppendUint16(b, 17) // aes128-cts-hmac-sha1-96
	b = data(b, strings.Repeat("\x00", 16))  // key
	b = append(b, make([]byte, 16)...)       // auth, start, end, renew-till times
	b = append(b, 0)                         // is_skey
	b = u32(b, 0x40e00000)                   // ticket flags
	b = u32(b, 0x7fffffff)                   // address count
	return u32(b, 0)                         // the first address's type and length begin
}
