//go:build !pgconnector_nogss

package connstring

// gssBuilt reports whether this build has Kerberos (GSSAPI encryption and authentication): it
// does unless the build tag pgconnector_nogss leaves it out (gss_off.go).
const gssBuilt = true
