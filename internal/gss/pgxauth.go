package gss

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgconn"
)

// GSS authentication (pg_hba method gss on a connection that is not GSS-encrypted) goes through
// pgx's process-global provider (pgconn.RegisterGSSProvider), which is given no context, only
// Config.KerberosSpn or Config.Host. So that each connector authenticates with its own
// credentials, a connector puts a token naming itself and the host into KerberosSpn
// ([Client.AuthToken]); the provider registered here maps it back. A KerberosSpn that is not a
// token (another pgx user in the process) uses the environment's default credentials.

const tokenPrefix = "pgconnector-gss:"

var (
	registerOnce sync.Once
	clients      sync.Map // id (uint64) -> *Client
	nextID       atomic.Uint64
	defaultOnce  sync.Once
	defaultCl    *Client
)

// Register makes c the credentials of the GSS authentication of connections whose
// KerberosSpn is c.AuthToken(host), and registers the provider with pgx once per process.
// Unregister with the returned function.
func (c *Client) Register() (unregister func()) {
	registerOnce.Do(func() {
		pgconn.RegisterGSSProvider(func() (pgconn.GSS, error) { return &authContext{}, nil })
	})
	id := nextID.Add(1)
	clients.Store(id, c)
	c.authID = id
	return func() { clients.Delete(id) }
}

// AuthToken is the value for pgconn.Config.KerberosSpn that makes pgx authenticate to host
// with c's credentials and service principal. c must be registered.
func (c *Client) AuthToken(host string) string {
	return tokenPrefix + strconv.FormatUint(c.authID, 10) + ":" + host
}

// authContext is pgx's pgconn.GSS: one authentication exchange.
type authContext struct {
	init *Initiator
}

func (a *authContext) GetInitToken(host, service string) ([]byte, error) {
	return a.start(defaultClient(), service+"/"+host)
}

func (a *authContext) GetInitTokenFromSPN(spn string) ([]byte, error) {
	rest, ok := strings.CutPrefix(spn, tokenPrefix)
	if !ok {
		return a.start(defaultClient(), spn)
	}
	idText, host, _ := strings.Cut(rest, ":")
	id, _ := strconv.ParseUint(idText, 10, 64)
	v, ok := clients.Load(id)
	if !ok {
		return nil, errors.New("gss: the connector of this connection was closed")
	}
	c := v.(*Client)
	return a.start(c, c.SPN(host))
}

func (a *authContext) start(c *Client, spn string) ([]byte, error) {
	c.mu.Lock()
	cur := c.cur
	c.mu.Unlock()
	if cur == nil || cur.creds == nil {
		if _, err := c.Credentials(context.Background()); err != nil {
			return nil, err
		}
		c.mu.Lock()
		cur = c.cur
		c.mu.Unlock()
		if cur.creds == nil {
			return nil, errors.New("gss: the server asked for GSSAPI authentication but no Kerberos credentials are available")
		}
	}
	init, err := cur.creds.NewInitiator(spn, false)
	if err != nil {
		return nil, err
	}
	a.init = init
	out, _, err := init.Step(nil)
	return out, err
}

// Continue takes the server's AP-REP and verifies it (mutual authentication).
func (a *authContext) Continue(in []byte) (done bool, out []byte, err error) {
	if a.init == nil {
		return false, nil, errors.New("gss: Continue before the first token")
	}
	out, done, err = a.init.Step(in)
	return done, out, err
}

func defaultClient() *Client {
	defaultOnce.Do(func() { defaultCl = NewClient(ClientConfig{}) })
	return defaultCl
}
