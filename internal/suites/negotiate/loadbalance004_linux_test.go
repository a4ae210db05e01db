package negotiate

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgconnector/pgconnector/internal/harness"
)

// lb004Name is the script's name with three addresses.
const lb004Name = "pg-loadbalancetest"

// lb004Hosts is the hosts file the script asks the administrator for: the name on 127.0.0.1,
// 127.0.0.2 and 127.0.0.3, in this order.
const lb004Hosts = "127.0.0.1 localhost\n" +
	"127.0.0.1 " + lb004Name + "\n127.0.0.2 " + lb004Name + "\n127.0.0.3 " + lb004Name + "\n"

// The environment of the child of TestLoadBalance004, from its parent.
const (
	lb004Phase = "PGCONNECTOR_LB004_PHASE" // up, or down (node1 and node2 stopped)
	lb004Port  = "PGCONNECTOR_LB004_PORT"  // the port of the three nodes
	lb004Psql  = "PGCONNECTOR_LB004_PSQL"  // psql's path
	lb004Lib   = "PGCONNECTOR_LB004_LIB"   // psql's LD_LIBRARY_PATH entry (libpq 18)
)

// TestLoadBalance004 runs 004_load_balance_dns.pl: one name, pg-loadbalancetest, whose three
// addresses 127.0.0.1-3 are three nodes on one port. The name is in a hosts file of the
// test's own, bound on /etc/hosts in a mount namespace of a child process
// (harness.RunInChildProcessWithHosts), where psql (getaddrinfo) and the connector (Go's
// resolver, as it resolves every host) look it up as the script's machine would: the
// connector has no lookup hook, and its resolver is the one it uses in production. The nodes
// are the harness's clusters: node1 listens on 127.0.0.1 at its port P; node2 and node3 are
// reached at 127.0.0.2:P and 127.0.0.3:P through forwarders of the test to their own
// ports (a node stopped has its forwarder closed, so that its address refuses as the script's
// stopped node does).
func TestLoadBalance004(t *testing.T) {
	if harness.IsChildProcess(t) {
		lb004Child(t)
		return
	}
	t.Parallel()
	env := libpq18(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	psql, err := harness.Program(ctx, "psql")
	if err != nil {
		t.Fatal(err)
	}
	pgs := make([]*harness.Postgres, 3)
	for i := range pgs {
		pgs[i] = harness.StartT(t, harness.Options{Major: 18, Settings: lbNodeSettings(i)})
	}
	port := pgs[0].Port
	forwarders := []*forwarder{nil}
	for i, addr := range []string{"127.0.0.2", "127.0.0.3"} {
		f, err := forward(net.JoinHostPort(addr, strconv.Itoa(port)), pgs[i+1].Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(f.close)
		forwarders = append(forwarders, f)
	}
	childEnv := []string{lb004Port + "=" + strconv.Itoa(port), lb004Psql + "=" + psql, lb004Lib + "=" + strings.Join(env, " ")}
	run := func(phase string) {
		t.Helper()
		out, passed := harness.RunInChildProcessWithHosts(t, 3*time.Minute, lb004Hosts, append(childEnv, lb004Phase+"="+phase)...)
		t.Logf("the child's run (%s):\n%s", phase, out)
		if !passed {
			t.Fatalf("the %s steps failed in the child", phase)
		}
	}

	run("up")
	// The scripts' log checks: connect1 on node1 only (psql and the connector), connect2 on
	// every node, more than once each (the child checked each client), 100 in all.
	var connect2 int
	for i, p := range pgs {
		log := p.Log()
		n1, n2 := statementsLogged(log, "connect1"), statementsLogged(log, "connect2")
		if want := map[bool]int{true: 2, false: 0}[i == 0]; n1 != want {
			t.Errorf("node%d logged %d statements with connect1, want %d", i+1, n1, want)
		}
		if n2 < 2 {
			t.Errorf("node%d logged %d statements with connect2, the script expects more than one", i+1, n2)
		}
		connect2 += n2
	}
	if connect2 != 100 {
		t.Errorf("the nodes logged %d statements with connect2, psql and the connector made 50 each", connect2)
	}

	for i := range 2 {
		if forwarders[i] != nil {
			forwarders[i].close()
		}
		if err := pgs[i].Stop(); err != nil {
			t.Fatal(err)
		}
	}
	run("down")
	log := pgs[2].Log()
	if n3, n4 := statementsLogged(log, "connect3"), statementsLogged(log, "connect4"); n3 != 2 || n4 != 10 {
		t.Errorf("node3 logged %d statements with connect3 and %d with connect4, want 2 and 10", n3, n4)
	}
}

// lb004Child runs the steps of one phase in the child, where pg-loadbalancetest resolves.
func lb004Child(t *testing.T) {
	if addrs, err := net.DefaultResolver.LookupHost(context.Background(), lb004Name); err != nil || len(addrs) != 3 {
		t.Fatalf("%s resolves to %v (%v), want 127.0.0.1-3", lb004Name, addrs, err)
	}
	base := fmt.Sprintf("host=%s port=%s user=%s dbname=%s", lb004Name, os.Getenv(lb004Port), harness.AppUser, harness.AppDatabase)
	psql := func(ctx context.Context, conninfo, query string) (string, error) {
		var out, errb bytes.Buffer
		cmd := exec.CommandContext(ctx, os.Getenv(lb004Psql), "-X", "-w", "-A", "-t", "-d", conninfo, "-c", query)
		cmd.Env = append(harness.CleanEnv(), "PGCONNECT_TIMEOUT=20", os.Getenv(lb004Lib))
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("psql: %w: %s", err, strings.TrimSpace(errb.String()))
		}
		return strings.TrimSpace(out.String()), nil
	}
	steps := lbAllUp
	if os.Getenv(lb004Phase) == "down" {
		steps = lbTwoDown
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) { runLBStep(t, base, psql, s) })
	}
}

// A forwarder passes the TCP connections it accepts on one address to another, byte for byte.
type forwarder struct {
	ln   net.Listener
	wg   sync.WaitGroup
	mu   sync.Mutex
	open map[net.Conn]bool
}

func forward(listen, target string) (*forwarder, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	f := &forwarder{ln: ln, open: map[net.Conn]bool{}}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				f.pipe(c, target)
			}()
		}
	}()
	return f, nil
}

func (f *forwarder) track(c net.Conn, on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if on {
		f.open[c] = true
	} else {
		delete(f.open, c)
	}
}

func (f *forwarder) pipe(c net.Conn, target string) {
	defer c.Close()
	s, err := net.DialTimeout("tcp", target, 10*time.Second)
	if err != nil {
		return
	}
	defer s.Close()
	f.track(c, true)
	f.track(s, true)
	defer f.track(c, false)
	defer f.track(s, false)
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(s, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, s); done <- struct{}{} }()
	<-done
}

// close stops accepting, closes the open connections and waits for the forwarder's goroutines.
// It may be called more than once.
func (f *forwarder) close() {
	_ = f.ln.Close()
	f.mu.Lock()
	for c := range f.open {
		_ = c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}
