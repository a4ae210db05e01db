package harness

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// DelayProxy is a loopback TCP proxy that forwards every accepted connection to a target
// address and holds each byte back for a fixed one-way delay in each direction, so that a
// request and its answer take 2*delay more than they would: a client and a server as far
// apart as a network link of that round-trip time (this kernel has no netem to add it to the
// loopback device).
//
// Each direction is a pipeline: a reader goroutine stamps every chunk it reads with the time
// it read it and queues it, a writer goroutine sleeps until that time plus the delay and
// writes it. Chunks keep their order and do not add up their delays: a chunk read while
// another waits leaves one delay after its own read, not after the other's write. A
// half-close (FIN) is passed on one delay after it was read, as a half-close; a read error
// (a reset) closes both sockets one delay after it. When both directions have passed on
// their end, or a write fails, the connection is closed.
//
// The kernel completes the TCP handshake with the client before the proxy accepts: over a
// real link that handshake costs the client a round trip before it may send. The proxy
// stands for it by sending nothing toward the target before 2*delay after the accept, so
// that the client's first bytes arrive 3*delay after its connect, as over a link with a
// round-trip time of 2*delay. A delay of 0 is plain forwarding.
type DelayProxy struct {
	*loopbackServer // Addr
	target          string
	delay           time.Duration

	quit     chan struct{} // closed by Close: writers stop waiting
	quitOnce sync.Once
	conns    atomic.Int64
}

// NewDelayProxy listens on 127.0.0.1 at a free port below 32768 and forwards each connection
// it accepts to target ("host:port") with a one-way delay of delay in each direction (see
// DelayProxy). It returns an error for a negative delay or when it cannot listen. Call Close
// when done.
func NewDelayProxy(target string, delay time.Duration) (*DelayProxy, error) {
	if delay < 0 {
		return nil, fmt.Errorf("harness: delay proxy: negative one-way delay %v", delay)
	}
	srv, err := listenLoopback("delay proxy")
	if err != nil {
		return nil, err
	}
	p := &DelayProxy{loopbackServer: srv, target: target, delay: delay, quit: make(chan struct{})}
	srv.start(p.serve)
	return p, nil
}

// DelayProxyT starts a DelayProxy for a test, fails the test if that does not work, and
// closes the proxy when the test ends.
func DelayProxyT(t testing.TB, target string, delay time.Duration) *DelayProxy {
	t.Helper()
	p, err := NewDelayProxy(target, delay)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("harness: delay proxy: %v", err)
		}
	})
	return p
}

// Delay returns the one-way delay the proxy adds in each direction.
func (p *DelayProxy) Delay() time.Duration { return p.delay }

// Connections returns how many TCP connections the proxy has accepted.
func (p *DelayProxy) Connections() int64 { return p.conns.Load() }

// Close stops accepting, drops the bytes still held back, closes every open connection and
// waits for all of the proxy's goroutines to end. It is safe to call more than once.
func (p *DelayProxy) Close() error {
	p.quitOnce.Do(func() { close(p.quit) })
	return p.loopbackServer.Close()
}

// delayChunk is what a reader hands its writer: bytes read at ts, or the end of the stream
// (data nil): eof for a clean end (FIN), otherwise a failed read.
type delayChunk struct {
	ts   time.Time
	data []byte
	eof  bool
}

// delayQueue is how many chunks a direction holds back before its reader waits for the
// writer: at 32 KiB a chunk, enough for the bytes of any connection setup in flight.
const delayQueue = 256

// serve proxies one client connection.
func (p *DelayProxy) serve(client net.Conn) {
	p.conns.Add(1)
	accepted := time.Now()
	server, err := net.DialTimeout("tcp", p.target, 10*time.Second)
	if err != nil {
		return
	}
	if !p.track(server) {
		return
	}
	defer p.untrack(server)

	abort := make(chan struct{})
	var abortOnce sync.Once
	closeBoth := func() {
		abortOnce.Do(func() {
			close(abort)
			_ = client.Close()
			_ = server.Close()
		})
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		p.pipe(server, client, accepted.Add(2*p.delay), abort, closeBoth)
	}()
	go func() {
		defer wg.Done()
		p.pipe(client, server, time.Time{}, abort, closeBoth)
	}()
	wg.Wait()
}

// pipe copies src to dst, each chunk one delay after it was read and none before notBefore
// plus the delay. It returns when it has passed on the end of src, or when the connection is
// aborted (closeBoth, abort closed) or the proxy closed.
func (p *DelayProxy) pipe(dst, src net.Conn, notBefore time.Time, abort <-chan struct{}, closeBoth func()) {
	queue := make(chan delayChunk, delayQueue)
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.read(src, queue, abort)
	}()
	// Unless the end of src was passed on, the connection is over (a write failed, the proxy
	// closed, the other direction aborted): close both sockets, which ends the reader too.
	passedEOF := false
	defer func() {
		if !passedEOF {
			closeBoth()
		}
		<-done
	}()

	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		var c delayChunk
		select {
		case c = <-queue:
		case <-abort:
			return
		case <-p.quit:
			return
		}
		due := c.ts
		if due.Before(notBefore) {
			due = notBefore
		}
		due = due.Add(p.delay)
		if wait := time.Until(due); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-abort:
				return
			case <-p.quit:
				return
			}
		}
		switch {
		case c.data != nil:
			if _, err := dst.Write(c.data); err != nil {
				return
			}
		case c.eof:
			cw, ok := dst.(interface{ CloseWrite() error })
			passedEOF = ok && cw.CloseWrite() == nil
			return
		default: // a failed read: the source is gone
			return
		}
	}
}

// read reads src into timestamped chunks on queue until the end of src (a last chunk with
// no data), or until abort is closed.
func (p *DelayProxy) read(src net.Conn, queue chan<- delayChunk, abort <-chan struct{}) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		ts := time.Now()
		if n > 0 {
			select {
			case queue <- delayChunk{ts: ts, data: append([]byte(nil), buf[:n]...)}:
			case <-abort:
				return
			}
		}
		if err != nil {
			select {
			case queue <- delayChunk{ts: ts, eof: errors.Is(err, io.EOF)}:
			case <-abort:
			}
			return
		}
	}
}
