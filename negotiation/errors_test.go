package negotiation

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgconnector/pgconnector/internal/harness"
)

// A host's error says the host, the step and the cause once: not pgx's "failed to connect to
// `user=... database=...`: address (host): dial error:" around it.
func TestHostErrorLeadsWithItsCause(t *testing.T) {
	ln, err := harness.Listen()
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	cfg, err := pgconn.ParseConfig("postgres://u@" + addr + "/db?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, dialErr := pgconn.ConnectConfig(ctx, cfg)
	if dialErr == nil {
		t.Fatal("connected to a closed port")
	}
	pgErr := fmt.Errorf("failed to connect: %w", &pgconn.PgError{Severity: "FATAL", Message: "sorry, too many clients already", Code: "53300"})
	for _, tt := range []struct {
		name string
		err  *HostError
		want string
	}{
		{"refused", &HostError{Host: "db", Port: 5432, Addr: "10.0.0.1", Step: "TCP connect", Err: dialErr},
			"host db:5432 (10.0.0.1): TCP connect: connection refused"},
		{"server error", &HostError{Host: "10.0.0.1", Port: 5432, Addr: "10.0.0.1", Step: "startup", Err: pgErr},
			"host 10.0.0.1:5432: startup: FATAL: sorry, too many clients already (SQLSTATE 53300)"},
		{"GSS required", &HostError{Host: "db", Port: 5432, Addr: "10.0.0.1", Step: "GSSENCRequest",
			Err: &GSSRequiredError{Reason: "no service ticket could be had", Err: fmt.Errorf("dial error: %w", errors.New("KDC unreachable")), detail: true}},
			"host db:5432 (10.0.0.1): GSSENCRequest: GSSAPI encryption is required (gssencmode=require) but no service ticket could be had: KDC unreachable"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("\n got %q\nwant %q", got, tt.want)
			}
			if strings.Contains(tt.err.Error(), "failed to connect to") {
				t.Error("pgx's prefix is left")
			}
		})
	}
	var pe *pgconn.PgError
	if !errors.As(error(&HostError{Err: pgErr}), &pe) || pe.Code != "53300" {
		t.Error("the server's error is not reachable with errors.As")
	}
	if !errors.Is(&GSSRequiredError{Reason: "x", Err: errors.New("y")}, ErrGSSRequired) {
		t.Error("GSSRequiredError is not ErrGSSRequired")
	}
	ce := &ConnectError{Hosts: []*HostError{{Host: "a", Port: 1, Step: "TCP connect", Err: dialErr}, {Host: "b", Port: 2, Step: "startup", Err: pgErr}}}
	if got := ce.Error(); !strings.HasPrefix(got, "pgconnector: no host could be connected: host a:1: TCP connect: connection refused; host b:2: startup: FATAL") {
		t.Errorf("ConnectError: %q", got)
	}
	if !errors.As(ce, &pe) {
		t.Error("errors.As does not reach a host's server error")
	}
}
