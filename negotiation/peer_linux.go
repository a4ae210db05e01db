//go:build linux

package negotiation

import (
	"fmt"
	"net"
	"os/user"
	"strconv"

	"golang.org/x/sys/unix"
)

// peerUser returns the user name of the process at the other end of a Unix-domain socket: its
// uid from SO_PEERCRED (src/port/getpeereid.c), then the name from the user database, as libpq
// does for requirepeer (fe-connect.c, CONNECTION_STARTED).
func peerUser(c net.Conn) (string, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return "", fmt.Errorf("requirepeer: not a Unix-domain socket (%T)", c)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return "", fmt.Errorf("could not get peer credentials: %w", err)
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return "", fmt.Errorf("could not get peer credentials: %w", err)
	}
	if cerr != nil {
		return "", fmt.Errorf("could not get peer credentials: %w", cerr)
	}
	u, err := user.LookupId(strconv.Itoa(int(cred.Uid)))
	if err != nil {
		return "", fmt.Errorf("could not look up local user ID %d: %w", cred.Uid, err)
	}
	return u.Username, nil
}
