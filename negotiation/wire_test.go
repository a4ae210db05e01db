package negotiation

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgconnector/pgconnector/internal/harness"
)

func backendMsg(typ byte, body []byte) []byte {
	m := []byte{typ, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(m[1:], uint32(4+len(body)))
	return append(m, body...)
}

func authBody(code uint32, rest ...byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, code)
	return append(b, rest...)
}

// The answer to SSLRequest or GSSENCRequest is one byte; anything else is an error, and only a
// yes or no byte alone is an answer (fe-connect.c, PQconnectPoll, CONNECTION_SSL_STARTUP and
// CONNECTION_GSS_STARTUP; CVE-2021-23222 for bytes that come with 'S').
func TestParseAnswer(t *testing.T) {
	forged := append([]byte{}, backendMsg('R', authBody(0))...) // AuthenticationOk
	forged = append(forged, backendMsg('Z', []byte{'I'})...)    // ReadyForQuery
	for _, tt := range []struct {
		name  string
		req   request
		in    []byte
		want  Answer
		error string // substring; "" for none
	}{
		{"S", sslRequest, []byte("S"), AnswerYes, ""},
		{"N to SSLRequest", sslRequest, []byte("N"), AnswerNo, ""},
		{"G", gssencRequest, []byte("G"), AnswerYes, ""},
		{"N to GSSENCRequest", gssencRequest, []byte("N"), AnswerNo, ""},
		{"G to SSLRequest", sslRequest, []byte("G"), AnswerUnknown, "unexpected answer byte 0x47"},
		{"S to GSSENCRequest", gssencRequest, []byte("S"), AnswerUnknown, "unexpected answer byte 0x53"},
		{"E to SSLRequest", sslRequest, append([]byte("E"), "\x00\x00\x00\x10SFATAL\x00\x00"...), AnswerUnknown, "error response during SSL exchange"},
		{"E to GSSENCRequest", gssencRequest, []byte("E"), AnswerUnknown, "error response during GSS encryption exchange"},
		{"N and a forged startup reply", sslRequest, append([]byte("N"), forged...), AnswerUnknown, "arrived with the answer 'N'"},
		{"S and bytes", sslRequest, []byte("S\x16\x03"), AnswerUnknown, "2 bytes arrived with the answer 'S'"},
		{"G and bytes", gssencRequest, []byte("Gx"), AnswerUnknown, "arrived with the answer 'G'"},
		{"N and bytes to GSSENCRequest", gssencRequest, append([]byte("N"), forged...), AnswerUnknown, "GSSENCRequest"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a, err := parseAnswer(tt.req, tt.in)
			if a != tt.want {
				t.Errorf("answer %v, want %v", a, tt.want)
			}
			switch {
			case tt.error == "" && err != nil:
				t.Errorf("error %v", err)
			case tt.error != "" && (err == nil || !strings.Contains(err.Error(), tt.error)):
				t.Errorf("error %v, want one with %q", err, tt.error)
			}
			if err != nil && !strings.Contains(err.Error(), tt.req.String()) && !strings.Contains(err.Error(), map[request]string{sslRequest: "SSL", gssencRequest: "GSS"}[tt.req]) {
				t.Errorf("error %q does not name the request", err)
			}
		})
	}
}

// loopbackPair returns the two ends of a TCP connection on 127.0.0.1.
func loopbackPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := harness.Listen()
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	if server == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// Bytes the server sends with its answer are seen in the same read; bytes that arrive after the
// answer, before the client speaks, are seen by quiet; neither is consumed by quiet.
func TestReadAnswerAndQuiet(t *testing.T) {
	t.Run("N alone", func(t *testing.T) {
		client, server := loopbackPair(t)
		server.Write([]byte("N"))
		if a, err := readAnswer(client, sslRequest); a != AnswerNo || err != nil {
			t.Fatalf("readAnswer = %v, %v", a, err)
		}
		if err := quiet(client, sslRequest); err != nil {
			t.Errorf("quiet: %v", err)
		}
	})
	t.Run("N with more in the same write", func(t *testing.T) {
		client, server := loopbackPair(t)
		server.Write(append([]byte("N"), backendMsg('R', authBody(0))...))
		time.Sleep(20 * time.Millisecond) // both in the receive buffer before the read
		if _, err := readAnswer(client, sslRequest); err == nil {
			t.Fatal("bytes after 'N' were accepted")
		}
	})
	t.Run("bytes after the answer, before the client speaks", func(t *testing.T) {
		client, server := loopbackPair(t)
		server.Write([]byte("G"))
		if a, err := readAnswer(client, gssencRequest); a != AnswerYes || err != nil {
			t.Fatalf("readAnswer = %v, %v", a, err)
		}
		server.Write(backendMsg('R', authBody(0)))
		deadline := time.Now().Add(5 * time.Second)
		var err error
		for err == nil && time.Now().Before(deadline) {
			err = quiet(client, gssencRequest)
			time.Sleep(time.Millisecond)
		}
		var pe *ProtocolError
		if !errors.As(err, &pe) || pe.Request != "GSSENCRequest" {
			t.Fatalf("quiet = %v, want a ProtocolError naming GSSENCRequest", err)
		}
		// quiet peeks: the bytes are still there.
		client.SetReadDeadline(time.Now().Add(time.Second))
		var b [1]byte
		if n, _ := client.Read(b[:]); n != 1 || b[0] != 'R' {
			t.Errorf("quiet consumed what it looked at: read %q", b[:n])
		}
	})
	t.Run("closed instead of an answer", func(t *testing.T) {
		client, server := loopbackPair(t)
		server.Close()
		if _, err := readAnswer(client, sslRequest); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("readAnswer = %v, want io.ErrUnexpectedEOF", err)
		}
	})
	t.Run("not a socket", func(t *testing.T) {
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		if err := quiet(a, sslRequest); err != nil {
			t.Errorf("quiet on a pipe: %v", err)
		}
	})
}

// fakeGSS holds credentials and gives sessions whose Establish is never expected to run.
type fakeGSS struct{}

func (fakeGSS) Credentials(context.Context) (GSSCredentials, error) {
	return GSSCredentials{Valid: true, Principal: "alice@R", Generation: 1}, nil
}
func (fakeGSS) ServiceTicket(context.Context, string) (GSSSession, bool, error) {
	return fakeSession{}, true, nil
}

type fakeSession struct{}

func (fakeSession) Establish(context.Context, net.Conn) (net.Conn, error) {
	return nil, errors.New("the first GSS token was sent")
}
func (fakeSession) Enctype() string { return "aes256-cts-hmac-sha1-96" }

// Bytes that arrive after the answer to SSLRequest or GSSENCRequest, before the client speaks
// again, are a protocol error however late they come: the server here sends them only once the
// client has read the answer (a trace hook holds the client until they are there).
func TestQuietBeforeTheClientSpeaks(t *testing.T) {
	forged := append(backendMsg('R', authBody(0)), backendMsg('Z', []byte{'I'})...)
	for _, tt := range []struct {
		name   string
		answer byte
		gss    bool
		want   string
	}{
		{"N, then the StartupMessage on the same socket", 'N', false, "SSLRequest"},
		{"S, then the TLS ClientHello", 'S', false, "SSLRequest"},
		{"G, then the first GSS token", 'G', true, "GSSENCRequest"},
		{"N to GSSENCRequest, then SSLRequest on the same socket", 'N', true, "GSSENCRequest"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ln, err := harness.Listen()
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			answered, sent := make(chan struct{}), make(chan struct{})
			var once sync.Once
			go func() {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				var req [8]byte
				if _, err := io.ReadFull(c, req[:]); err != nil {
					return
				}
				c.Write([]byte{tt.answer})
				<-answered
				c.Write(forged)
				close(sent)
				io.Copy(io.Discard, c)
			}()
			hold := func() {
				once.Do(func() {
					close(answered)
					<-sent
					time.Sleep(50 * time.Millisecond) // the forged bytes are in the receive buffer
				})
			}
			_, port, _ := net.SplitHostPort(ln.Addr().String())
			p, _ := strconv.Atoi(port)
			mode := GSSEncModeDisable
			var gss GSSClient
			if tt.gss {
				mode, gss = GSSEncModePrefer, fakeGSS{}
			}
			n, err := NewNegotiator(Config{
				Hosts:      []Host{{Host: "127.0.0.1", Port: uint16(p), SSLMode: SSLModePrefer, TLSConfig: &tls.Config{InsecureSkipVerify: true}}},
				GSSEncMode: mode,
				GSS:        gss,
				Cache:      NewCache(0),
				Trace: &Trace{
					SSLRequestDone:    func(context.Context, RequestDoneInfo) { hold() },
					GSSEncRequestDone: func(context.Context, RequestDoneInfo) { hold() },
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			base, err := pgconn.ParseConfig("host=127.0.0.1 user=u dbname=d sslmode=prefer")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err = n.Connect(ctx, pgxOpen(n, base))
			var pe *ProtocolError
			if !errors.As(err, &pe) || pe.Request != tt.want || !strings.Contains(pe.Problem, "after the answer") {
				t.Fatalf("connect: %v, want a ProtocolError about bytes after the answer to %s", err, tt.want)
			}
		})
	}
}
