package auth

import (
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgconnector/pgconnector/internal/harness"
)

// A server that offers SCRAM-SHA-256-PLUS over a connection without TLS (a real server offers it
// only over TLS: something in between took TLS away) is refused by libpq before it answers
// (fe-auth.c, pg_SASL_init), whatever channel_binding says; the connector refuses it with
// libpq's words. The server here is a stand-in that refuses TLS and asks for SASL with -PLUS
// first, then waits: a client that answers anything fails the row.
func TestPlusWithoutTLS(t *testing.T) {
	t.Parallel()
	ln, err := harness.Listen()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	answered := make(chan string, 16) // more than the rows' connections
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go offerPlus(c, answered)
		}
	}()
	env, err := libpq18()
	if err != nil {
		t.Fatal(err)
	}
	const want = "server offered SCRAM-SHA-256-PLUS authentication over a non-SSL connection"
	port := ln.Addr().(*net.TCPAddr).Port
	for _, cb := range []string{"disable", "prefer"} {
		t.Run("channel_binding="+cb, func(t *testing.T) {
			dsn := "host=127.0.0.1 port=" + strconv.Itoa(port) + " user=u password=p dbname=d gssencmode=disable channel_binding=" + cb
			checkRow(t, env, dsn, row{msg: want})
		})
	}
	// A client answers (the server reports it) before it sees the server close.
	for len(answered) > 0 {
		t.Errorf("a client answered the -PLUS offer over plaintext with %s", <-answered)
	}
}

// offerPlus refuses TLS, reads the StartupMessage, offers SCRAM-SHA-256-PLUS and SCRAM-SHA-256,
// and reports a SASLInitialResponse if the client sends one.
func offerPlus(c net.Conn, answered chan<- string) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	be := pgproto3.NewBackend(c, c)
	for {
		msg, err := be.ReceiveStartupMessage()
		if err != nil {
			return
		}
		if _, ok := msg.(*pgproto3.SSLRequest); ok {
			if _, err := c.Write([]byte{'N'}); err != nil {
				return
			}
			continue
		}
		if _, ok := msg.(*pgproto3.StartupMessage); !ok {
			return
		}
		break
	}
	be.Send(&pgproto3.AuthenticationSASL{AuthMechanisms: []string{"SCRAM-SHA-256-PLUS", "SCRAM-SHA-256"}})
	if err := be.Flush(); err != nil {
		return
	}
	be.SetAuthType(pgproto3.AuthTypeSASL)
	if m, err := be.Receive(); err == nil {
		if _, ok := m.(*pgproto3.SASLInitialResponse); ok {
			answered <- "SASLInitialResponse"
		}
	}
}
