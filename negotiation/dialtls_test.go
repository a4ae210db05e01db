package negotiation

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgconnector/pgconnector/internal/harness"
)

// SetBeforeTLS replaces the host's check before the handshake for one attempt, and a
// CancelRequest dials the address the session's connect dialed, not the socket's RemoteAddr:
// here the dial function goes to the server through a proxy, whose address pgx would take.
func TestSetBeforeTLSAndCancelAddress(t *testing.T) {
	srv := harness.StartT(t, harness.Options{TLS: true})
	px := harness.ProxyT(t, srv.Addr())
	pxHost, pxPort := px.Addr()
	pxAddr := net.JoinHostPort(pxHost, strconv.Itoa(pxPort))
	var mu sync.Mutex
	var dialed []string
	dial := func(ctx context.Context, network, address string) (net.Conn, error) {
		mu.Lock()
		dialed = append(dialed, network+" "+address)
		mu.Unlock()
		var d net.Dialer
		return d.DialContext(ctx, "tcp", pxAddr)
	}
	noRoots := errors.New("no root certificate file")
	h := Host{Host: srv.Host, Port: uint16(srv.Port), SSLMode: SSLModeRequire,
		TLSConfig: &tls.Config{InsecureSkipVerify: true}, BeforeTLS: func() error { return noRoots }}
	n, err := NewNegotiator(Config{Hosts: []Host{h}, GSSEncMode: GSSEncModeDisable, DialFunc: dial, ConnectTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	base, err := pgconn.ParseConfig(srv.DSN("sslmode=require"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := n.SetBeforeTLS(ctx, nil); err == nil {
		t.Error("SetBeforeTLS outside an attempt: no error")
	}
	var pg *pgconn.PgConn
	connect := func(skip bool) error {
		return n.Connect(ctx, func(ctx context.Context) error {
			cfg := base.Copy()
			if err := n.Configure(ctx, cfg); err != nil {
				return err
			}
			if skip {
				if err := n.SetBeforeTLS(ctx, nil); err != nil {
					return err
				}
			}
			var err error
			pg, err = pgconn.ConnectConfig(ctx, cfg)
			return err
		})
	}
	var refused *TLSRefusedError
	if err := connect(false); !errors.Is(err, noRoots) || !errors.As(err, &refused) {
		t.Fatalf("with the host's check: %v, want its error as a *TLSRefusedError", err)
	}
	if err := connect(true); err != nil {
		t.Fatalf("with the check replaced: %v", err)
	}
	defer pg.Close(ctx)
	if err := pg.CancelRequest(ctx); err != nil {
		t.Fatal(err)
	}
	want := "tcp " + srv.Addr()
	mu.Lock()
	defer mu.Unlock()
	if len(dialed) != 3 || dialed[0] != want || dialed[1] != want || dialed[2] != want {
		t.Errorf("dialed %q, want %q three times (a refused attempt, a connect, its CancelRequest)", dialed, want)
	}
}
