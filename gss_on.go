//go:build !pgconnector_nogss

package pgconnector

import (
	"github.com/pgconnector/pgconnector/internal/gss"
	"github.com/pgconnector/pgconnector/negotiation"
)

// gssBuilt reports whether this build has Kerberos (GSSAPI encryption and authentication): it
// does unless the build tag pgconnector_nogss leaves it out (gss_off.go).
const gssBuilt = true

// newGSS returns the connector's Kerberos client, from k and the connection string's krbsrvname,
// krbspn and gssdelegation, and the function that releases it (Connector.Close: a KCM cache's
// connection to its daemon).
func newGSS(s *Settings, k Kerberos) (negotiation.GSSClient, func() error, error) {
	c := gss.NewClient(gss.ClientConfig{
		Krb5Conf:     k.Krb5Conf,
		CCache:       k.CCache,
		ClientKeytab: k.ClientKeytab,
		Principal:    k.Principal,
		Service:      s.Config.KerberosSrvName,
		SPN:          s.Config.KerberosSpn,
		Delegate:     s.GSSDelegation,
	})
	return c, c.Close, nil
}
