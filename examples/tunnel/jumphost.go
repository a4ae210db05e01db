package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/pgconnector/pgconnector/internal/harness"
)

// jumpHost is a forwarder on loopback standing in for an SSH server: each connection names
// where to go in its first line ("tcp 127.0.0.1:5432"); the jump host connects there, answers
// '+' (or '-' and why), and copies bytes both ways until either side closes.
type jumpHost struct {
	ln net.Listener
	wg sync.WaitGroup

	mu        sync.Mutex
	closed    bool
	conns     map[net.Conn]bool // open, closed by Close
	forwarded map[string]int    // "network address" -> connections forwarded
}

func startJumpHost() (*jumpHost, error) {
	ln, err := harness.Listen() // 127.0.0.1, a port below 32768 as the project's test servers use
	if err != nil {
		return nil, err
	}
	j := &jumpHost{ln: ln, conns: map[net.Conn]bool{}, forwarded: map[string]int{}}
	j.wg.Add(1)
	go func() {
		defer j.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			j.wg.Add(1)
			go func() { defer j.wg.Done(); j.serve(c) }()
		}
	}()
	return j, nil
}

func (j *jumpHost) Addr() string { return j.ln.Addr().String() }

// Forwarded returns how many connections went to each network and address.
func (j *jumpHost) Forwarded() map[string]int {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := make(map[string]int, len(j.forwarded))
	for k, v := range j.forwarded {
		out[k] = v
	}
	return out
}

// Close stops accepting, closes the forwarded connections and waits for their goroutines.
func (j *jumpHost) Close() error {
	err := j.ln.Close()
	j.mu.Lock()
	j.closed = true
	for c := range j.conns {
		c.Close()
	}
	j.mu.Unlock()
	j.wg.Wait()
	return err
}

// track records an open connection (untrack forgets it); false once Close ran, when c must
// not be used.
func (j *jumpHost) track(c net.Conn) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.conns[c] = true
	return !j.closed
}

func (j *jumpHost) untrack(c net.Conn) {
	j.mu.Lock()
	defer j.mu.Unlock()
	delete(j.conns, c)
}

func (j *jumpHost) serve(client net.Conn) {
	defer client.Close()
	defer j.untrack(client)
	if !j.track(client) {
		return
	}
	client.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(io.LimitReader(client, 300)).ReadString('\n')
	client.SetReadDeadline(time.Time{})
	network, address, ok := strings.Cut(strings.TrimSpace(line), " ")
	if err != nil || !ok || (network != "tcp" && network != "unix") {
		fmt.Fprint(client, "-bad request")
		return
	}
	server, err := net.DialTimeout(network, address, 10*time.Second)
	if err != nil {
		fmt.Fprintf(client, "-%v", err)
		return
	}
	defer server.Close()
	defer j.untrack(server)
	if !j.track(server) {
		return
	}
	j.mu.Lock()
	j.forwarded[network+" "+address]++
	j.mu.Unlock()
	if _, err := client.Write([]byte{'+'}); err != nil {
		return
	}
	done := make(chan struct{}, 2)
	go func() { io.Copy(server, client); done <- struct{}{} }()
	go func() { io.Copy(client, server); done <- struct{}{} }()
	<-done // either side closed: close both, which ends the other copy
	client.Close()
	server.Close()
	<-done
}
