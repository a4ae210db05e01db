package pgconnector

import "github.com/pgconnector/pgconnector/negotiation"

// defaultRootFile is libpq's default sslrootcert: ~/.postgresql/root.crt
// (%APPDATA%\postgresql\root.crt on Windows); "" when there is no home directory.
func defaultRootFile() string { return homeFile("root.crt") }

// refused marks err as the client's refusal of the server's TLS, never taken for the server's
// lack of TLS.
func refused(err error) error { return &negotiation.TLSRefusedError{Err: err} }
