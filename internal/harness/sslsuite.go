package harness

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// SSLSuiteCert is one server set-up of PostgreSQL's SSL suite, as src/test/ssl/t/SSL/Server.pm's
// switch_server_cert and SSL/Backend/OpenSSL.pm's set_server_cert write it: file names without
// the directory, as in the suite (CertFile "server-cn-only" is server-cn-only.crt).
type SSLSuiteCert struct {
	CertFile string // ssl_cert_file: CertFile + ".crt"
	KeyFile  string // ssl_key_file: KeyFile + ".key"; CertFile when empty
	CAFile   string // ssl_ca_file: CAFile + ".crt"; "root+client_ca" when empty
	// CRLFile and CRLDir are ssl_crl_file and ssl_crl_dir; with both empty the server uses
	// root+client.crl, as switch_server_cert does when given neither.
	CRLFile, CRLDir string
	// PassphraseCmd is ssl_passphrase_command; empty leaves it unset.
	PassphraseCmd string
}

// SSLSuiteDir is the directory under DataDir that InstallSSLSuite writes the suite's files
// to.
const SSLSuiteDir = "sslsuite"

// InstallSSLSuite prepares the server as configure_test_server_for_ssl (SSL/Server.pm) does
// for the method "trust": it writes files (name -> content, names as in src/test/ssl/ssl/,
// keys 0600) under DataDir/SSLSuiteDir, creates the roles ssltestuser, md5testuser,
// anotheruser and yetanotheruser, the databases trustdb, certdb, verifydb, certdb_dn,
// certdb_dn_re and certdb_cn, the extension sslinfo in trustdb, certdb and verifydb (as
// 003_sslinfo.pl asks with extensions => [qw(sslinfo)]), writes pg_ident.conf with the
// suite's maps dn, dnre and cn, and pg_hba.conf as SetSSLSuiteAuth(ctx, "trust", "") does.
// It then switches to first. The server must have been started with Options.TLS.
func (p *Postgres) InstallSSLSuite(ctx context.Context, files map[string][]byte, first SSLSuiteCert) error {
	base := filepath.Join(p.DataDir, SSLSuiteDir)
	if err := p.env.acct.mkdir(base, 0o700); err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	for name, data := range files {
		path := filepath.Join(base, name)
		if dir := filepath.Dir(path); dir != base {
			if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
				if err := p.env.acct.mkdir(dir, 0o700); err != nil {
					return fmt.Errorf("harness: %w", err)
				}
			}
		}
		mode := os.FileMode(0o644)
		if strings.HasSuffix(name, ".key") {
			mode = 0o600
		}
		if err := p.env.acct.writeFile(path, data, mode); err != nil {
			return fmt.Errorf("harness: %w", err)
		}
	}
	for _, sql := range []string{
		"CREATE ROLE ssltestuser LOGIN SUPERUSER",
		"CREATE ROLE md5testuser LOGIN SUPERUSER",
		"CREATE ROLE anotheruser LOGIN SUPERUSER",
		"CREATE ROLE yetanotheruser LOGIN SUPERUSER",
		"CREATE DATABASE trustdb",
		"CREATE DATABASE certdb",
		"CREATE DATABASE verifydb",
		"CREATE DATABASE certdb_dn",
		"CREATE DATABASE certdb_dn_re",
		"CREATE DATABASE certdb_cn",
	} {
		if err := p.ExecAdmin(ctx, sql); err != nil {
			return err
		}
	}
	for _, db := range []string{"trustdb", "certdb", "verifydb"} {
		err := p.adminIn(ctx, db, func(conn *pgx.Conn) error {
			_, err := conn.Exec(ctx, "CREATE EXTENSION sslinfo")
			return err
		})
		if err != nil {
			return fmt.Errorf("harness: sslinfo in %s: %w", db, err)
		}
	}
	// The user name maps of SSL/Server.pm: the whole DN, a regular expression on the DN,
	// and the CN, each mapping the suite's client-dn certificate to ssltestuser.
	ident := "# Written by the pgconnector test harness.\n" +
		"dn \"CN=ssltestuser-dn,OU=Testing,OU=Engineering,O=PGDG\" ssltestuser\n" +
		"dnre \"/^.*OU=Testing,.*$\" ssltestuser\n" +
		"cn ssltestuser-dn ssltestuser\n"
	if err := p.env.acct.writeFile(filepath.Join(p.DataDir, "pg_ident.conf"), []byte(ident), 0o600); err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	if err := p.SetSSLSuiteAuth(ctx, "trust", ""); err != nil {
		return err
	}
	return p.SwitchServerCert(first)
}

// SwitchServerCert points the server's TLS settings at one set-up of the suite's files
// (written by InstallSSLSuite) and reloads the configuration, as switch_server_cert does;
// it returns once new connections use it, or the server's complaint when it cannot load it
// (the server then keeps its previous TLS set-up).
func (p *Postgres) SwitchServerCert(c SSLSuiteCert) error {
	if c.CertFile == "" {
		return errors.New("harness: SwitchServerCert needs a CertFile")
	}
	base := filepath.Join(p.DataDir, SSLSuiteDir)
	key := c.KeyFile
	if key == "" {
		key = c.CertFile
	}
	ca := c.CAFile
	if ca == "" {
		ca = "root+client_ca"
	}
	crlFile, crlDir := c.CRLFile, c.CRLDir
	if crlFile == "" && crlDir == "" {
		crlFile = "root+client.crl"
	}
	path := func(name string) string {
		if name == "" {
			return ""
		}
		return filepath.Join(base, name)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.set == nil {
		p.set = map[string]string{}
	}
	p.ssl = true
	p.set["ssl_cert_file"] = path(c.CertFile + ".crt")
	p.set["ssl_key_file"] = path(key + ".key")
	p.set["ssl_ca_file"] = path(ca + ".crt")
	p.set["ssl_crl_file"] = path(crlFile)
	p.set["ssl_crl_dir"] = path(crlDir)
	p.set["ssl_passphrase_command"] = c.PassphraseCmd
	if err := p.writeConf(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return p.reload(ctx)
}

// SetSSLSuiteAuth writes pg_hba.conf as configure_test_server_for_ssl does for method
// ("trust" for 001_ssltests.pl, "scram-sha-256" for 002_scram.pl) and, when password is not
// empty, gives ssltestuser, anotheruser and yetanotheruser that password as SCRAM-SHA-256 and
// md5testuser as MD5, as the script's password and password_enc arguments do. The lines, for
// 127.0.0.1/32: hostssl trustdb md5testuser md5; hostssl trustdb all <method>; hostssl verifydb
// ssltestuser and anotheruser <method> clientcert=verify-full, yetanotheruser <method>
// clientcert=verify-ca; hostssl certdb all cert; hostssl certdb_dn, certdb_dn_re and
// certdb_cn all cert with clientname=DN map=dn, clientname=DN map=dnre and clientname=CN
// map=cn.
func (p *Postgres) SetSSLSuiteAuth(ctx context.Context, method, password string) error {
	if strings.ContainsAny(method, " \t\n") || strings.ContainsAny(password, "'\\") {
		return errors.New("harness: SetSSLSuiteAuth: a method is one word and a password has no quote or backslash")
	}
	if password != "" {
		sum := md5.Sum([]byte(password + "md5testuser"))
		for _, sql := range []string{
			"ALTER ROLE md5testuser PASSWORD 'md5" + hex.EncodeToString(sum[:]) + "'",
		} {
			if err := p.ExecAdmin(ctx, sql); err != nil {
				return err
			}
		}
		for _, role := range []string{"ssltestuser", "anotheruser", "yetanotheruser"} {
			// Stored as SCRAM-SHA-256: password_encryption's default.
			if err := p.ExecAdmin(ctx, "ALTER ROLE "+role+" PASSWORD '"+password+"'"); err != nil {
				return err
			}
		}
	}
	const cidr = "127.0.0.1/32"
	return p.SetHBA(
		"hostssl trustdb md5testuser "+cidr+" md5",
		"hostssl trustdb all "+cidr+" "+method,
		"hostssl verifydb ssltestuser "+cidr+" "+method+" clientcert=verify-full",
		"hostssl verifydb anotheruser "+cidr+" "+method+" clientcert=verify-full",
		"hostssl verifydb yetanotheruser "+cidr+" "+method+" clientcert=verify-ca",
		"hostssl certdb all "+cidr+" cert",
		"hostssl certdb_dn all "+cidr+" cert clientname=DN map=dn",
		"hostssl certdb_dn_re all "+cidr+" cert clientname=DN map=dnre",
		"hostssl certdb_cn all "+cidr+" cert clientname=CN map=cn",
	)
}
