package harness

import (
	"fmt"
	"net"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
)

// FakeStats counts what clients sent to a FakeServer.
type FakeStats struct {
	Connections    int64 // TCP connections accepted
	SSLRequests    int64 // SSLRequest packets (each answered 'N')
	GSSENCRequests int64 // GSSENCRequest packets (each answered 'N')
	Startups       int64 // StartupMessages (each answered AuthenticationOk ... ReadyForQuery)
}

// FakeServer is an in-process PostgreSQL wire server on 127.0.0.1 that does just enough for
// `select 1` through pgx (and database/sql on pgx's stdlib) to work: it refuses SSL and GSS
// encryption with 'N', trusts every StartupMessage, and answers every statement, in the
// simple or the extended query protocol, with one int4 column "?column?" holding 1. A prepared
// statement's parameters are its $n placeholders, each described as int4 (so `select $1::int + 1`
// takes one argument); the values bound to them are ignored.
//
// Prefer a real server (Start) for anything about behaviour: fake servers are for
// misbehaviour, fault injection and isolating client cost. This one exists for the last: a
// real server forks a backend for every TCP connection (about 20 ms here), which hides the
// client's own per-connection cost in a connect benchmark; this server costs a goroutine.
//
// It runs in the calling process, so process-wide measurements (getrusage RUSAGE_SELF) include
// its work too, in proportion to the connections and startups it serves (Stats).
type FakeServer struct {
	*loopbackServer // Addr, Close

	connections    atomic.Int64
	sslRequests    atomic.Int64
	gssencRequests atomic.Int64
	startups       atomic.Int64
}

// StartFakeServer listens on 127.0.0.1 at a free port and serves each connection it accepts
// in its own goroutine. Call Close when done.
func StartFakeServer() (*FakeServer, error) {
	srv, err := listenLoopback("fake server")
	if err != nil {
		return nil, err
	}
	s := &FakeServer{loopbackServer: srv}
	srv.start(s.serve)
	return s, nil
}

// FakeServerT starts a FakeServer for a test or benchmark, fails it if that does not work, and
// closes the server when it ends.
func FakeServerT(t testing.TB) *FakeServer {
	t.Helper()
	s, err := StartFakeServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("harness: fake server: %v", err)
		}
	})
	return s
}

// Stats returns a snapshot of the counters. Each packet is counted before it is answered, so
// the counts include everything a client's completed connection attempt sent.
func (s *FakeServer) Stats() FakeStats {
	return FakeStats{
		Connections:    s.connections.Load(),
		SSLRequests:    s.sslRequests.Load(),
		GSSENCRequests: s.gssencRequests.Load(),
		Startups:       s.startups.Load(),
	}
}

// serve handles one connection until the client terminates, the connection fails or the
// server is closed.
func (s *FakeServer) serve(c net.Conn) {
	s.connections.Add(1)
	be := pgproto3.NewBackend(c, c)
	if !s.startup(c, be) {
		return
	}
	s.query(be)
}

// startup reads the startup packets: SSLRequest and GSSENCRequest are refused with 'N' and the
// next packet is read from the same socket; a StartupMessage is trusted. It reports whether a
// session began.
func (s *FakeServer) startup(c net.Conn, be *pgproto3.Backend) bool {
	for {
		msg, err := be.ReceiveStartupMessage()
		if err != nil {
			return false
		}
		switch msg := msg.(type) {
		case *pgproto3.SSLRequest:
			s.sslRequests.Add(1)
			// Nothing is buffered in be at this point, so write directly.
			if _, err := c.Write([]byte{'N'}); err != nil {
				return false
			}
		case *pgproto3.GSSEncRequest:
			s.gssencRequests.Add(1)
			if _, err := c.Write([]byte{'N'}); err != nil {
				return false
			}
		case *pgproto3.StartupMessage:
			s.startups.Add(1)
			be.Send(&pgproto3.AuthenticationOk{})
			for _, p := range [][2]string{
				{"server_version", "15.0"},
				{"client_encoding", "UTF8"},
				{"standard_conforming_strings", "on"},
				{"DateStyle", "ISO, MDY"},
				{"integer_datetimes", "on"},
			} {
				be.Send(&pgproto3.ParameterStatus{Name: p[0], Value: p[1]})
			}
			be.Send(&pgproto3.BackendKeyData{ProcessID: 1, SecretKey: []byte{0, 0, 0, 1}})
			be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
			return be.Flush() == nil
		default:
			_ = msg // CancelRequest or anything else: nothing to do, close.
			return false
		}
	}
}

// query serves the simple and extended query protocols: every statement returns one row with
// one int4 column "?column?" holding 1.
func (s *FakeServer) query(be *pgproto3.Backend) {
	serveQueries(be, nil)
}

// serveQueries is FakeServer.query for the fake servers of the harness: when before is not
// nil, it is called with each message before the message is answered, and a false result ends
// the connection.
func serveQueries(be *pgproto3.Backend, before func(pgproto3.FrontendMessage) bool) {
	// Result format of the current portal (0 text, 1 binary), from the last Bind.
	var format int16
	// Parameters of each prepared statement, by name ("" the unnamed one), from its Parse.
	params := map[string]int{}
	rowDesc := func(format int16) *pgproto3.RowDescription {
		return &pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{{
			Name:         []byte("?column?"),
			DataTypeOID:  23, // int4
			DataTypeSize: 4,
			TypeModifier: -1,
			Format:       format,
		}}}
	}
	dataRow := func(format int16) *pgproto3.DataRow {
		if format == 1 {
			return &pgproto3.DataRow{Values: [][]byte{{0, 0, 0, 1}}}
		}
		return &pgproto3.DataRow{Values: [][]byte{[]byte("1")}}
	}
	for {
		msg, err := be.Receive()
		if err != nil {
			return
		}
		if before != nil && !before(msg) {
			return
		}
		switch msg := msg.(type) {
		case *pgproto3.Query:
			be.Send(rowDesc(0))
			be.Send(dataRow(0))
			be.Send(&pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")})
			be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
			if be.Flush() != nil {
				return
			}
		case *pgproto3.Parse:
			params[msg.Name] = max(len(msg.ParameterOIDs), placeholders(msg.Query))
			be.Send(&pgproto3.ParseComplete{})
		case *pgproto3.Describe:
			if msg.ObjectType == 'S' {
				oids := make([]uint32, params[msg.Name])
				for i := range oids {
					oids[i] = 23 // int4
				}
				be.Send(&pgproto3.ParameterDescription{ParameterOIDs: oids})
				be.Send(rowDesc(0))
			} else {
				be.Send(rowDesc(format))
			}
		case *pgproto3.Bind:
			format = 0
			// One format code applies to every column; with one column, so does the first.
			if len(msg.ResultFormatCodes) > 0 {
				format = msg.ResultFormatCodes[0]
			}
			be.Send(&pgproto3.BindComplete{})
		case *pgproto3.Execute:
			be.Send(dataRow(format))
			be.Send(&pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")})
		case *pgproto3.Close:
			if msg.ObjectType == 'S' {
				delete(params, msg.Name)
			}
			be.Send(&pgproto3.CloseComplete{})
		case *pgproto3.Sync:
			be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
			if be.Flush() != nil {
				return
			}
		case *pgproto3.Flush:
			if be.Flush() != nil {
				return
			}
		case *pgproto3.Terminate:
			return
		default:
			be.Send(&pgproto3.ErrorResponse{
				Severity: "ERROR",
				Code:     "0A000",
				Message:  fmt.Sprintf("fake server: unsupported message %T", msg),
			})
			be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
			if be.Flush() != nil {
				return
			}
		}
	}
}

// placeholders is the highest n of the $n placeholders in query: the number of parameters the
// server would infer for it. It does not parse SQL: a "$2" in a string literal counts too.
func placeholders(query string) int {
	n := 0
	for i := 0; i < len(query); i++ {
		if query[i] != '$' {
			continue
		}
		j, v := i+1, 0
		for j < len(query) && query[j] >= '0' && query[j] <= '9' && v < 1<<16 {
			v = v*10 + int(query[j]-'0')
			j++
		}
		n = max(n, v)
		i = j - 1
	}
	return n
}
