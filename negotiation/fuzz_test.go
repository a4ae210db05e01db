package negotiation

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// startupReply is what a trusting server sends after a StartupMessage.
func startupReply() []byte {
	var b []byte
	b = append(b, backendMsg('R', authBody(0))...)     // AuthenticationOk
	b = append(b, backendMsg('K', make([]byte, 8))...) // BackendKeyData
	b = append(b, backendMsg('Z', []byte{'I'})...)     // ReadyForQuery
	return b
}

// scriptedServer serves one connection of a fuzz case: to SSLRequest or GSSENCRequest it
// writes answer in one write, to anything else (the StartupMessage, the TLS ClientHello) rest.
func scriptedServer(c net.Conn, answer, rest []byte) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	var first [8]byte
	for {
		if _, err := io.ReadFull(c, first[:4]); err != nil {
			return
		}
		if bytes.Equal(first[:4], []byte{0, 0, 0, 8}) {
			if _, err := io.ReadFull(c, first[4:]); err != nil {
				return
			}
			if _, err := c.Write(answer); err != nil || len(answer) == 0 {
				return
			}
			continue // the client may send the next request on the same socket
		}
		// A StartupMessage or a ClientHello: read what the client sends while answering with
		// rest (net.Pipe does not buffer), then hang up.
		go io.Copy(io.Discard, c)
		c.Write(rest)
		return
	}
}

// Whatever a server (or anything on the path) answers during negotiation, the connect does not
// panic, ends within its deadline, and succeeds only when the answer was exactly one 'N' (then
// the StartupMessage's reply decides) or 'S' (whose TLS handshake fails on these bytes, after
// which sslmode=prefer may go on in plaintext on a new connection). An ErrorResponse's text
// never reaches the error.
func FuzzNegotiationBytes(f *testing.F) {
	forged := startupReply()
	f.Add([]byte("N"), forged)
	f.Add(append([]byte("N"), forged...), forged)
	f.Add([]byte("S"), forged)
	f.Add(append([]byte("S"), forged...), forged)
	f.Add(append([]byte("E"), backendMsg('E', []byte("SFATAL\x00Msecret-server-text\x00\x00"))[1:]...), forged)
	f.Add([]byte("G"), forged)
	f.Add([]byte(""), forged)
	f.Add([]byte("N"), []byte("R\x00\x00\x00\x08\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, answer, rest []byte) {
		var wg sync.WaitGroup
		defer wg.Wait()
		dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
			client, server := net.Pipe()
			wg.Add(1)
			go func() { defer wg.Done(); scriptedServer(server, answer, rest) }()
			return client, nil
		}
		base, err := pgconn.ParseConfig("host=127.0.0.1 port=5432 user=u dbname=d sslmode=prefer")
		if err != nil {
			t.Fatal(err)
		}
		n, err := NewNegotiator(Config{
			Hosts:      []Host{{Host: "127.0.0.1", Port: 5432, SSLMode: SSLModePrefer, TLSConfig: &tls.Config{InsecureSkipVerify: true}}},
			GSSEncMode: GSSEncModeDisable,
			Cache:      NewCache(0),
			DialFunc:   dial,
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		start := time.Now()
		err = n.Connect(ctx, pgxOpen(n, base))
		if time.Since(start) > 2*time.Second {
			t.Fatalf("the connect took %v", time.Since(start))
		}
		if err == nil && string(answer) != "N" && string(answer) != "S" {
			t.Fatalf("connected after the answer %q", answer)
		}
		if err != nil && len(answer) > 0 && answer[0] == 'E' && bytes.Contains(answer, []byte("secret-server-text")) &&
			bytes.Contains([]byte(err.Error()), []byte("secret-server-text")) {
			t.Fatalf("the error shows the server's unauthenticated text: %v", err)
		}
	})
}

// pgxOpen is the open function of a connect through pgx, as the connector's: one pgconn
// attempt configured by the negotiator, closed again when it connects.
func pgxOpen(n *Negotiator, base *pgconn.Config) func(context.Context) error {
	return func(ctx context.Context) error {
		cfg := base.Copy()
		if err := n.Configure(ctx, cfg); err != nil {
			return err
		}
		conn, err := pgconn.ConnectConfig(ctx, cfg)
		if conn != nil {
			conn.Close(context.Background())
		}
		return err
	}
}
