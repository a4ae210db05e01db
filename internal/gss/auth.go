package gss

import (
	"context"
	"errors"

	"github.com/pgconnector/pgconnector/negotiation"
)

// Authenticate implements negotiation.GSSAuthenticator: GSS authentication (pg_hba method gss
// on a connection that is not GSS-encrypted) with c's credentials, for the service principal of
// host (SPN). The negotiator carries the tokens in AuthenticationGSSContinue and GSSResponse
// messages; nothing of it goes through pgx, whose process-wide GSS provider
// (pgconn.RegisterGSSProvider) is never asked, nor told anything. ctx bounds the KDC exchange
// for the service ticket (see ticket). The returned initiator verifies the server's AP-REP
// (mutual authentication) before it reports the context established.
func (c *Client) Authenticate(ctx context.Context, host string) (negotiation.GSSAuthExchange, error) {
	cur := c.cur.Load()
	if cur == nil || cur.creds == nil {
		if _, err := c.Credentials(ctx); err != nil {
			return nil, err
		}
		cur = c.cur.Load()
		if cur == nil || cur.creds == nil {
			return nil, errors.New("gss: the server asked for GSSAPI authentication but no Kerberos credentials are available")
		}
	}
	spn := c.SPN(host)
	t, err := c.ticket(ctx, cur, spn)
	if err != nil {
		return nil, err
	}
	var deleg *delegation
	if c.cfg.Delegate {
		d, _, err := c.delegation(ctx, cur)
		if err != nil {
			return nil, err
		}
		deleg = &d
	}
	return newInitiatorWithTicket(cur.creds.Client(), spn, t.tkt, t.key, deleg)
}

var _ negotiation.GSSAuthenticator = (*Client)(nil)
