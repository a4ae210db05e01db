package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
)

// pinning splits the machine's CPUs between the servers and the clients, as
// when the database runs on a host of its own: a client's CPU time then does
// not slow the server down, and a server's forks do not slow the client. This
// process (and so every server, KDC and fake server it starts) runs on the
// server CPUs; each client process is started on the client CPUs with
// taskset(1) (util-linux), its threads inheriting the affinity.
type pinning struct {
	taskset          string
	client, server   string // CPU lists for taskset -c, for example "0" and "1"
	clientN, serverN int
}

// newPinning gives the first half of the CPUs (at least one) to the clients
// and the rest to the servers, and moves this process's threads to the
// server CPUs. It fails on a machine with one CPU or without taskset.
func newPinning(ctx context.Context) (*pinning, error) {
	n := runtime.NumCPU()
	if n < 2 {
		return nil, fmt.Errorf("-pin needs at least 2 CPUs, this machine has %d (run with -pin=false)", n)
	}
	taskset, err := exec.LookPath("taskset")
	if err != nil {
		return nil, fmt.Errorf("-pin needs taskset (Debian package util-linux): %w (or run with -pin=false)", err)
	}
	c := n / 2
	p := &pinning{taskset: taskset, client: cpuRange(0, c-1), server: cpuRange(c, n-1), clientN: c, serverN: n - c}
	out, err := exec.CommandContext(ctx, taskset, "-a", "-p", "-c", p.server, strconv.Itoa(os.Getpid())).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("taskset -a -p -c %s %d: %w: %s", p.server, os.Getpid(), err, out)
	}
	return p, nil
}

func cpuRange(from, to int) string {
	if from == to {
		return strconv.Itoa(from)
	}
	return fmt.Sprintf("%d-%d", from, to)
}

// describe says how the CPUs are split, for the report.
func (p *pinning) describe() string {
	if p == nil {
		return "none: servers and clients share every CPU"
	}
	return fmt.Sprintf("clients on CPU %s (%d), servers, KDC and fake server on CPU %s (%d)", p.client, p.clientN, p.server, p.serverN)
}

// command is exec.CommandContext for a client program, on the client CPUs
// when p is not nil.
func (p *pinning) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	if p == nil {
		return exec.CommandContext(ctx, name, args...)
	}
	return exec.CommandContext(ctx, p.taskset, append([]string{"-c", p.client, name}, args...)...)
}
