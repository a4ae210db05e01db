package gss

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"
)

// A KCM daemon that accepts and never answers: Credentials returns when the connect's context
// ends, not after KCMTimeout (5 s), and Close then closes the connection it left.
func TestCredentialsKCMNoAnswerContext(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "kcm.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	conf := filepath.Join(dir, "krb5.conf")
	if err := os.WriteFile(conf, []byte("[libdefaults]\n    kcm_socket = "+sock+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := NewClient(ClientConfig{Krb5Conf: conf, CCache: "KCM:"})
	const wait = 200 * time.Millisecond
	for i := range 3 { // the later calls find the first's check still hanging
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		start := time.Now()
		_, err := c.Credentials(ctx)
		d := time.Since(start)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("call %d: Credentials: %v, want context.DeadlineExceeded", i, err)
		}
		if d > wait+300*time.Millisecond {
			t.Errorf("call %d: Credentials took %v with a %v context", i, d, wait)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	// Every connection the client made is closed at its end: the daemon's end reads EOF.
	mu.Lock()
	opened := slices.Clone(conns)
	mu.Unlock()
	if len(opened) == 0 {
		t.Fatal("no connection to the daemon")
	}
	for i, conn := range opened {
		_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := io.Copy(io.Discard, conn); err != nil {
			t.Errorf("connection %d after Close: %v, want EOF", i, err)
		}
	}
	if _, err := c.Credentials(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Credentials after Close: %v, want ErrClosed", err)
	}
	time.Sleep(50 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if len(conns) != len(opened) {
		t.Errorf("%d connections to the daemon after Close", len(conns)-len(opened))
	}
}
