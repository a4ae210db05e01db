package harness

import (
	"context"
	"crypto/ecdsa"
	"crypto/x509"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"
)

// SetClientCRL makes the server check client certificates against the certificate revocation
// lists crlPEM (PEM "X509 CRL" blocks: ssl_crl_file, a file in the data directory) and reloads
// it, returning once new connections are checked with them; nil removes the setting. PostgreSQL
// loads them into the store of ssl_ca_file (be-secure-openssl.c, be_tls_init, with
// X509_V_FLAG_CRL_CHECK | X509_V_FLAG_CRL_CHECK_ALL): set the client CA first (SetClientCA), and
// give a CRL of each CA of the client's chain. A revoked client certificate then fails the
// handshake with the TLS alert certificate_revoked. The server must have TLS (Options.TLS or
// SetSSL(true)); a file the server cannot load is an error, and the previous setting stays.
func (p *Postgres) SetClientCRL(crlPEM []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.certs {
		return errors.New("harness: SetClientCRL: the server has no TLS (start it with Options.TLS or call SetSSL(true))")
	}
	path := filepath.Join(p.DataDir, "client_crl.pem")
	old, oldErr := os.ReadFile(path)
	oldSet, wasSet := p.set["ssl_crl_file"]
	if p.set == nil {
		p.set = map[string]string{}
	}
	if crlPEM == nil {
		delete(p.set, "ssl_crl_file")
	} else {
		if err := p.env.acct.writeFile(path, crlPEM, 0o644); err != nil {
			return fmt.Errorf("harness: %w", err)
		}
		p.set["ssl_crl_file"] = path
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := p.writeConf()
	if err == nil {
		err = p.reload(ctx)
	}
	if err != nil {
		// Put the previous file and setting back (best effort), as SetClientCA does.
		if oldErr == nil {
			_ = p.env.acct.writeFile(path, old, 0o644)
		} else {
			_ = os.Remove(path)
		}
		if wasSet {
			p.set["ssl_crl_file"] = oldSet
		} else {
			delete(p.set, "ssl_crl_file")
		}
		if p.writeConf() == nil {
			_ = p.reload(ctx)
		}
	}
	return err
}

// ServerCA returns the throwaway CA that signed the server's certificate (its certificate, in
// CAFile, and its key) and the server certificate's serial number, for a test that signs its own
// CRLs of the server (a version 1 CRL, say: CRL signs version 2 only). The server must have TLS.
func (p *Postgres) ServerCA() (ca *x509.Certificate, key *ecdsa.PrivateKey, serverSerial *big.Int, err error) {
	p.mu.Lock()
	cs := p.ca
	p.mu.Unlock()
	if cs == nil {
		return nil, nil, nil, errNoCA
	}
	return cs.caCert, cs.caKey, new(big.Int).Set(cs.srvSerial), nil
}
