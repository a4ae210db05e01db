package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// SetClientCA makes the server verify client certificates against the PEM certificates caPEM
// (ssl_ca_file, a file in the data directory) and reloads it, returning once new connections
// are checked with them. pg_hba lines with clientcert=verify-ca or clientcert=verify-full (or
// the cert method), given with SetHBA or Options.HBA, then accept the certificates those CAs
// signed. The server must have TLS (Options.TLS or SetSSL(true)).
func (p *Postgres) SetClientCA(caPEM []byte) error {
	return p.setTLSFile("SetClientCA", "ssl_ca_file", "client_ca.crt", caPEM)
}

// setTLSFile writes data to the file name of the data directory, points the server setting at
// it and reloads the server; nil data removes the setting. When the server cannot load it, the
// previous file and setting are put back (best effort), as SetSSL does. The server must have TLS.
func (p *Postgres) setTLSFile(op, setting, name string, data []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.certs {
		return errors.New("harness: " + op + ": the server has no TLS (start it with Options.TLS or call SetSSL(true))")
	}
	path := filepath.Join(p.DataDir, name)
	old, oldErr := os.ReadFile(path)
	oldSet, wasSet := p.set[setting]
	if p.set == nil {
		p.set = map[string]string{}
	}
	if data == nil {
		delete(p.set, setting)
	} else {
		if err := p.env.acct.writeFile(path, data, 0o644); err != nil {
			return fmt.Errorf("harness: %w", err)
		}
		p.set[setting] = path
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := p.writeConf()
	if err == nil {
		err = p.reload(ctx)
	}
	if err != nil {
		if oldErr == nil {
			_ = p.env.acct.writeFile(path, old, 0o644)
		} else {
			_ = os.Remove(path)
		}
		if wasSet {
			p.set[setting] = oldSet
		} else {
			delete(p.set, setting)
		}
		if p.writeConf() == nil {
			_ = p.reload(ctx)
		}
	}
	return err
}
