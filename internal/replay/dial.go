package replay

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// Dial is the DialFunc of one connection's pgx configuration (DialFunc). Its first call is the connect:
// it returns the established session. Every later call is pgx's CancelRequest (PgConn's own, or
// from a context watcher, or when pgx closes a connection in the middle of a query): it gets a
// CancelConn whose CancelRequest goes out as the established session's client would have sent
// it (pgx's CancelRequest on that session: the attempt's dial, to the same server address,
// encrypted as the session is), never through a negotiation.
type Dial struct {
	conn   *Conn
	hc     *pgconn.HijackedConn
	cancel *pgconn.Config // the session's configuration, for its CancelRequests
	taken  atomic.Bool
}

// NewDial returns the Dial that hands conn, the established session hc describes, to pgx.
func NewDial(hc *pgconn.HijackedConn, conn *Conn) *Dial {
	cancel := hc.Config.Copy()
	// A CancelRequest reads no message: no need of the caller's frontend, nor of the attempt's
	// observers.
	cancel.BuildFrontend = func(r io.Reader, w io.Writer) *pgproto3.Frontend { return pgproto3.NewFrontend(r, w) }
	return &Dial{conn: conn, hc: hc, cancel: cancel}
}

var errDialClosed = errors.New("pgconnector: the connection is closed (a CancelRequest for it could reach another session)")

// DialFunc is the pgconn.DialFunc: the session at the first call, a CancelConn for the session
// after; an error once the session is closed.
func (d *Dial) DialFunc(ctx context.Context, _, _ string) (net.Conn, error) {
	if d.taken.CompareAndSwap(false, true) {
		return d.conn, nil
	}
	if d.conn.Closed() {
		return nil, errDialClosed
	}
	return NewCancelConn(ctx, d.conn.LocalAddr(), d.conn.RemoteAddr(), d.sendCancel), nil
}

// sendCancel sends the CancelRequest pgx wrote, which must be the session's.
func (d *Dial) sendCancel(ctx context.Context, pid uint32, key []byte) error {
	if pid != d.hc.PID || !bytes.Equal(key, d.hc.SecretKey) {
		return errors.New("pgconnector: a CancelRequest for another session")
	}
	pg, err := pgconn.Construct(&pgconn.HijackedConn{
		Conn:              d.hc.Conn, // for its RemoteAddr only
		TLSConfig:         d.hc.TLSConfig,
		PID:               d.hc.PID,
		SecretKey:         d.hc.SecretKey,
		ParameterStatuses: map[string]string{},
		TxStatus:          'I',
		Config:            d.cancel,
		CustomData:        map[string]any{},
	})
	if err != nil {
		return err
	}
	// pg is never used otherwise, nor closed: that would close the session.
	return pg.CancelRequest(ctx)
}

// Abandon closes the session if pgx never took it (the pool's BeforeConnect cleanup).
func (d *Dial) Abandon() {
	if d.taken.CompareAndSwap(false, true) {
		d.conn.Close()
	}
}
