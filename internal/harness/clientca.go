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
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.certs {
		return errors.New("harness: SetClientCA: the server has no TLS (start it with Options.TLS or call SetSSL(true))")
	}
	path := filepath.Join(p.DataDir, "client_ca.crt")
	old, oldErr := os.ReadFile(path)
	oldSet, wasSet := p.set["ssl_ca_file"]
	if err := p.env.acct.writeFile(path, caPEM, 0o644); err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	if p.set == nil {
		p.set = map[string]string{}
	}
	p.set["ssl_ca_file"] = path
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := p.writeConf()
	if err == nil {
		err = p.reload(ctx)
	}
	if err != nil {
		// Put the previous file and setting back (best effort), as SetSSL does.
		if oldErr == nil {
			_ = p.env.acct.writeFile(path, old, 0o644)
		} else {
			_ = os.Remove(path)
		}
		if wasSet {
			p.set["ssl_ca_file"] = oldSet
		} else {
			delete(p.set, "ssl_ca_file")
		}
		if p.writeConf() == nil {
			_ = p.reload(ctx)
		}
	}
	return err
}
