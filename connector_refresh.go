package pgconnector

import (
	"context"
	"io"
)

// openForRefresh makes one connection attempt for a background refresh of a remembered negative
// answer (negotiation.Config.Open): through the same pgx configuration as Connect's, so that the
// refresh negotiates and authenticates as a connect does, but with nothing of a Connect call's
// (Connect's open closure writes to its own conn and target variables, which a refresh running
// on its own goroutine must not touch). The negotiator closes the connection at once.
func (c *Connector) openForRefresh(ctx context.Context) (io.Closer, error) {
	conn, err := c.stdlib.Connect(ctx)
	if err != nil {
		return nil, err // never a typed nil in the io.Closer
	}
	return conn, nil
}
