//go:build pgconnector_nogss

package connstring

// gssBuilt reports whether this build has Kerberos: not with the build tag pgconnector_nogss,
// under which gssencmode=require is an error of Parse, as in libpq built without GSSAPI.
const gssBuilt = false
