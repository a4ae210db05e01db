//go:build pgconnector_nogss

package pgconnector

import (
	"fmt"

	"github.com/pgconnector/pgconnector/negotiation"
)

// gssBuilt reports whether this build has Kerberos: not with the build tag pgconnector_nogss,
// which leaves out gokrb5 and the packages internal/gss, ccache, krb5conf and keytabfile, as
// libpq built without GSSAPI (gss_on.go has the client).
const gssBuilt = false

// newGSS returns no Kerberos client: the negotiator then never tries GSSAPI encryption
// (gssencmode=prefer), and a server that requests GSSAPI authentication fails the attempt with
// an error wrapping ErrNoGSS. A Kerberos setting given with WithKerberos is an error wrapping
// ErrNoGSS rather than ignored.
func newGSS(_ *Settings, k Kerberos) (negotiation.GSSClient, func() error, error) {
	if k != (Kerberos{}) {
		return nil, nil, fmt.Errorf("pgconnector: WithKerberos: %w", ErrNoGSS)
	}
	return nil, func() error { return nil }, nil
}
