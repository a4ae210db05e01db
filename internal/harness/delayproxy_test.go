package harness

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// echoServer accepts connections on a loopback port below 32768 and echoes what it reads
// until the client's FIN, then writes "bye" and closes. It stops when the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := Listen()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
				_, _ = c.Write([]byte("bye"))
			}()
		}
	}()
	return ln.Addr().String()
}

func dialProxy(t *testing.T, p *DelayProxy) *net.TCPConn {
	t.Helper()
	host, port := p.Addr()
	c, err := net.DialTimeout("tcp", net.JoinHostPort(host, strconv.Itoa(port)), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	return c.(*net.TCPConn)
}

// pingPong writes msg and reads it back, and returns how long that took.
func pingPong(t *testing.T, c net.Conn, msg string) time.Duration {
	t.Helper()
	start := time.Now()
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if string(got) != msg {
		t.Fatalf("echo: got %q, want %q", got, msg)
	}
	return took
}

// delayProxyGoroutines is the number of goroutines running the code of a DelayProxy.
func delayProxyGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "harness.(*DelayProxy)") {
			count++
		}
	}
	return count
}

// A ping-pong through the proxy takes the round trip the delay adds, and not much more; the
// first one also the TCP handshake's round trip.
func TestDelayProxyRoundTrip(t *testing.T) {
	t.Parallel()
	const d = 50 * time.Millisecond
	// The lower bounds are the proxy's function; the upper ones only say "not a round trip
	// more", loose enough for the scheduler of a loaded 2-core VM running the race detector: a
	// single timing is not a benchmark.
	const slack = d
	p := DelayProxyT(t, echoServer(t), d)
	if p.Delay() != d {
		t.Fatalf("Delay() = %v, want %v", p.Delay(), d)
	}
	// The first ping-pong's clock starts before the dial: the proxy holds the first bytes back
	// from the moment it accepted, which a descheduled test goroutine may pass before it reads
	// the clock after the dial.
	begin := time.Now()
	c := dialProxy(t, p)
	pingPong(t, c, "hello")
	if first := time.Since(begin); first < 4*d || first > 4*d+2*slack {
		t.Errorf("first ping-pong took %v, want 4*%v (the handshake's round trip and the ping's), less than a round trip more", first, d)
	}
	var took []time.Duration
	for i := range 5 {
		rtt := pingPong(t, c, fmt.Sprintf("ping %d", i))
		if rtt < 2*d {
			t.Errorf("ping-pong %d took %v, less than the round trip 2*%v", i, rtt, d)
		}
		took = append(took, rtt)
	}
	slices.Sort(took)
	if median := took[len(took)/2]; median > 2*d+slack {
		t.Errorf("ping-pongs took %v, median above 2*%v + %v", took, d, slack)
	}
	if n := p.Connections(); n != 1 {
		t.Errorf("Connections() = %d, want 1", n)
	}
}

// Chunks written one after another each arrive one delay after they were sent, in order: the
// proxy does not add their delays up.
func TestDelayProxyPipeline(t *testing.T) {
	t.Parallel()
	const d = 50 * time.Millisecond
	const chunks, gap = 10, 10 * time.Millisecond
	p := DelayProxyT(t, echoServer(t), d)
	c := dialProxy(t, p)
	pingPong(t, c, "warm") // past the handshake's round trip

	start := time.Now()
	go func() {
		for i := range chunks {
			_, _ = fmt.Fprintf(c, "<%d>", i)
			time.Sleep(gap)
		}
	}()
	var want strings.Builder
	for i := range chunks {
		fmt.Fprintf(&want, "<%d>", i)
	}
	got := make([]byte, want.Len())
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if string(got) != want.String() {
		t.Errorf("read %q, want %q (in order)", got, want.String())
	}
	// Serialized delays would take chunks*2*d = 1 s; the upper bound leaves a loaded machine
	// 300 ms and still tells the two apart.
	lo, hi := (chunks-1)*gap+2*d, (chunks-1)*gap+2*d+300*time.Millisecond
	if took < lo || took > hi {
		t.Errorf("%d chunks %v apart came back in %v, want %v to %v", chunks, gap, took, lo, hi)
	}
}

// A client's half-close reaches the server after the delay, and what the server sends after
// it still reaches the client, followed by the server's close.
func TestDelayProxyHalfClose(t *testing.T) {
	t.Parallel()
	const d = 20 * time.Millisecond
	p := DelayProxyT(t, echoServer(t), d)
	c := dialProxy(t, p)
	pingPong(t, c, "warm")
	if _, err := c.Write([]byte("last")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(c) // until the server's close comes through
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if string(rest) != "lastbye" {
		t.Errorf("after the half-close read %q, want %q", rest, "lastbye")
	}
	if took < 2*d {
		t.Errorf("the server's close arrived %v after the client's, less than the round trip 2*%v", took, d)
	}
}

// A delay of 0 forwards at once, and a negative delay is refused.
func TestDelayProxyZeroAndNegative(t *testing.T) {
	t.Parallel()
	p := DelayProxyT(t, echoServer(t), 0)
	c := dialProxy(t, p)
	var took []time.Duration
	for i := range 5 {
		took = append(took, pingPong(t, c, "x"+strconv.Itoa(i)))
	}
	slices.Sort(took)
	if median := took[len(took)/2]; median > 20*time.Millisecond {
		t.Errorf("ping-pongs without delay took %v", took)
	}
	if _, err := NewDelayProxy("127.0.0.1:1", -time.Millisecond); err == nil || !strings.Contains(err.Error(), "negative") {
		t.Errorf("NewDelayProxy with a negative delay: %v, want an error naming it", err)
	}
}

// Close returns at once though bytes are held back and connections are open, and leaves no
// goroutine of the proxy behind. Not parallel: it counts the goroutines of every DelayProxy.
func TestDelayProxyCloseLeavesNothing(t *testing.T) {
	if n := delayProxyGoroutines(); n != 0 {
		t.Fatalf("%d goroutines of a DelayProxy before the test", n)
	}
	const d = 2 * time.Second
	p, err := NewDelayProxy(echoServer(t), d)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	host, port := p.Addr()
	var conns []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write(bytes.Repeat([]byte("held back "), 1000)); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	// The first connection half-closes too: its FIN waits in the queue behind its bytes.
	if err := conns[0].(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for p.Connections() < 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := delayProxyGoroutines(); n < 3 {
		t.Fatalf("%d goroutines of the proxy while 3 connections are open, want 3 at least", n)
	}
	start := time.Now()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > d/2 {
		t.Errorf("Close took %v: it waited for the held-back bytes", took)
	}
	if n := delayProxyGoroutines(); n != 0 {
		t.Errorf("%d goroutines of the DelayProxy left after Close", n)
	}
	for i, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := c.Read(make([]byte, 1)); err == nil {
			t.Errorf("connection %d: read %d bytes after Close, want the connection closed", i, n)
		}
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// A PostgreSQL connection over TLS with SCRAM works through the proxy, and costs the round
// trips of its setup: the TCP handshake, SSLRequest, the TLS handshake, the startup and SCRAM.
func TestDelayProxyPostgres(t *testing.T) {
	t.Parallel()
	const d = 10 * time.Millisecond
	pg := StartT(t, Options{TLS: true, Auth: "scram-sha-256"})
	px := DelayProxyT(t, pg.Addr(), d)
	host, port := px.Addr()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn := fmt.Sprintf("host=%s port=%d user=%s password=%s dbname=%s sslmode=require",
		host, port, pg.User, pg.Password, pg.Database)
	start := time.Now()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect through the delay proxy: %v", err)
	}
	took := time.Since(start)
	defer conn.Close(ctx)
	var ssl bool
	if err := conn.QueryRow(ctx, "select ssl from pg_stat_ssl where pid = pg_backend_pid()").Scan(&ssl); err != nil {
		t.Fatal(err)
	}
	if !ssl {
		t.Error("the connection through the proxy is not TLS")
	}
	// TCP, SSLRequest, TLS 1.3, StartupMessage to SASL request, SASLInitialResponse,
	// SASLResponse to ReadyForQuery: 6 round trips.
	if took < 6*2*d {
		t.Errorf("connect took %v, less than 6 round trips of 2*%v", took, d)
	}
	t.Logf("connect over a round trip of %v took %v", 2*d, took)
}
