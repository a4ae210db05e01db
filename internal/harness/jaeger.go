package harness

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Jaeger v2 (an OpenTelemetry Collector distribution) is built from source with the Go toolchain
// once per machine and cached; see JaegerBinary.
const (
	// JaegerVersion is the Jaeger release the harness builds and runs.
	JaegerVersion = "v2.13.0"
	// jaegerModuleVersion is the version of the Go module github.com/jaegertracing/jaeger that
	// holds Jaeger v2.13.0 (the module keeps the v1 version line).
	jaegerModuleVersion = "v1.76.0"
	// jaegerPackage is the main package of the Jaeger v2 binary.
	jaegerPackage = "github.com/jaegertracing/jaeger/cmd/jaeger"
	// JaegerBinaryEnv names an environment variable that, when set, gives the path of a Jaeger
	// v2 binary to run instead of the one the harness builds.
	JaegerBinaryEnv = "PGCONNECTOR_JAEGER"
)

// Jaeger is a running Jaeger v2 with in-memory storage on 127.0.0.1: the OTLP receiver (gRPC and
// HTTP) and the query service (HTTP, with the /api/v3 JSON API, and gRPC), each on a port chosen
// at start. Nothing it runs listens on another address: StartJaeger checks the process's
// listening sockets and fails otherwise. The collector's own telemetry (metrics on :8888 by
// default, traces) is off.
//
// The web UI is not part of a Jaeger built from the Go module (its assets are built apart); the
// query API is complete.
type Jaeger struct {
	Dir     string // configuration, log and pid files; removed by Stop
	LogFile string // Jaeger's standard output and standard error
	Binary  string // the Jaeger executable

	otlpGRPC, otlpHTTP, queryHTTP, queryGRPC int

	client   *http.Client
	pid      int
	exited   chan struct{} // closed when the process has exited
	stopOnce sync.Once
	stopErr  error
}

// OTLPHTTPEndpoint returns the OTLP/HTTP receiver's address, "127.0.0.1:PORT" (traces are
// posted to /v1/traces there).
func (j *Jaeger) OTLPHTTPEndpoint() string { return loopback(j.otlpHTTP) }

// OTLPGRPCEndpoint returns the OTLP/gRPC receiver's address, "127.0.0.1:PORT".
func (j *Jaeger) OTLPGRPCEndpoint() string { return loopback(j.otlpGRPC) }

// QueryURL returns the base URL of the query service's HTTP server, "http://127.0.0.1:PORT"
// (API v3 under /api/v3, the older JSON API under /api).
func (j *Jaeger) QueryURL() string { return "http://" + loopback(j.queryHTTP) }

// QueryGRPCEndpoint returns the address of the query service's gRPC API (api_v3.QueryService),
// "127.0.0.1:PORT".
func (j *Jaeger) QueryGRPCEndpoint() string { return loopback(j.queryGRPC) }

func loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// StartJaeger builds Jaeger if no cached binary exists (see JaegerBinary: about 16 minutes cold
// on two cores; give ctx that much time) and starts it with a configuration that binds only
// 127.0.0.1 on free ports. It returns once the query API answers and both OTLP receivers accept
// connections. The caller must call Stop.
func StartJaeger(ctx context.Context) (*Jaeger, error) {
	return startJaeger(ctx, nil)
}

// StartJaegerT starts Jaeger for a test (as StartJaeger), fails the test if that does not work,
// and stops Jaeger when the test ends; if the test failed, the end of Jaeger's log is logged
// first. A build logs its progress to the test log. The start may take as long as the test's
// deadline allows (at most an hour): run such tests with a -timeout that leaves room for a cold
// build.
func StartJaegerT(t testing.TB) *Jaeger {
	t.Helper()
	deadline := time.Now().Add(time.Hour)
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if td, ok := d.Deadline(); ok && td.Add(-30*time.Second).Before(deadline) {
			deadline = td.Add(-30 * time.Second)
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	j, err := startJaeger(ctx, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	stopAtCleanup(t, "Jaeger", j.LogFile, j.Stop)
	return j
}

func startJaeger(ctx context.Context, logf func(format string, args ...any)) (*Jaeger, error) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	bin, err := jaegerBinary(ctx, logf)
	if err != nil {
		return nil, err
	}
	base, err := processDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(base, "jaeger-*")
	if err != nil {
		return nil, fmt.Errorf("harness: %w", err)
	}
	j := &Jaeger{
		Dir:     dir,
		LogFile: filepath.Join(dir, "jaeger.log"),
		Binary:  bin,
		client:  &http.Client{Timeout: 10 * time.Second},
	}
	const attempts = 5
	for i := 1; ; i++ {
		err = j.start(ctx)
		if err == nil {
			return j, nil
		}
		_ = j.stopProcess()
		if i < attempts && errors.Is(err, errPortTaken) && ctx.Err() == nil {
			continue // a port was taken between choosing it and Jaeger's bind
		}
		_ = os.RemoveAll(dir)
		return nil, err
	}
}

var errPortTaken = errors.New("a port was taken")

// jaegerConfig is the collector configuration: OTLP in, memory storage, the query service, every
// endpoint on 127.0.0.1, no telemetry of the collector itself (whose metrics would otherwise be
// served on :8888) and no tracing of the query service.
const jaegerConfig = `service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    traces:
      level: none
    logs:
      level: info

extensions:
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
  jaeger_query:
    storage:
      traces: memstore
    enable_tracing: false
    http:
      endpoint: 127.0.0.1:%[3]d
    grpc:
      endpoint: 127.0.0.1:%[4]d

receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:%[1]d
      http:
        endpoint: 127.0.0.1:%[2]d

exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
`

// start chooses ports, writes the configuration, starts the process and waits until it serves.
func (j *Jaeger) start(ctx context.Context) error {
	ports, err := freePorts(4)
	if err != nil {
		return err
	}
	j.otlpGRPC, j.otlpHTTP, j.queryHTTP, j.queryGRPC = ports[0], ports[1], ports[2], ports[3]
	conf := filepath.Join(j.Dir, "config.yaml")
	if err := os.WriteFile(conf, fmt.Appendf(nil, jaegerConfig, ports[0], ports[1], ports[2], ports[3]), 0o600); err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	logFile, err := os.OpenFile(j.LogFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	defer logFile.Close()
	mark, _ := logFile.Seek(0, io.SeekEnd)

	// Not CommandContext: Jaeger outlives ctx. Pdeathsig stops it if this process dies without
	// calling Stop; the guardian (guardian.go) covers the rest, finding it by its working
	// directory.
	cmd := exec.Command(j.Binary, "--config", conf)
	cmd.Dir = j.Dir
	cmd.Env = jaegerEnv()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("harness: starting Jaeger: %w", err)
	}
	exited := make(chan struct{})
	j.pid, j.exited = cmd.Process.Pid, exited
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	if err := os.WriteFile(filepath.Join(j.Dir, "jaeger.pid"), []byte(strconv.Itoa(j.pid)+"\n"), 0o600); err != nil {
		return fmt.Errorf("harness: %w", err)
	}

	deadline := time.NewTimer(2 * time.Minute)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-exited:
			out := readFrom(j.LogFile, mark)
			if strings.Contains(out, "address already in use") {
				return fmt.Errorf("harness: Jaeger: %w", errPortTaken)
			}
			return fmt.Errorf("harness: Jaeger exited at start:\n%s", lastLines(out, 30))
		case <-deadline.C:
			return fmt.Errorf("harness: Jaeger did not serve within 2 minutes:\n%s", lastLines(readFrom(j.LogFile, mark), 30))
		case <-ctx.Done():
			return fmt.Errorf("harness: starting Jaeger: %w", ctx.Err())
		case <-tick.C:
		}
		if !j.serving(ctx) {
			continue
		}
		// Each of our four ports must be served by this process, and nothing it listens on may be
		// reachable from outside the machine.
		addrs, err := listeningAddrs(j.pid)
		if err != nil {
			return fmt.Errorf("harness: Jaeger's listening sockets: %w", err)
		}
		mine := map[int]bool{}
		for _, a := range addrs {
			if !a.IP.IsLoopback() {
				return fmt.Errorf("harness: Jaeger listens on %s, not only on 127.0.0.1 (%v)", a, addrs)
			}
			mine[a.Port] = true
		}
		for _, p := range ports {
			if !mine[p] {
				return fmt.Errorf("harness: Jaeger: port %d: %w by another process", p, errPortTaken)
			}
		}
		return nil
	}
}

// serving reports whether the query API answers and both OTLP receivers accept connections.
func (j *Jaeger) serving(ctx context.Context) bool {
	for _, port := range []int{j.otlpGRPC, j.otlpHTTP} {
		c, err := net.DialTimeout("tcp", loopback(port), time.Second)
		if err != nil {
			return false
		}
		_ = c.Close()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, j.QueryURL()+"/api/v3/services", nil)
	if err != nil {
		return false
	}
	resp, err := j.client.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// jaegerEnv is the environment of the Jaeger process: ours without the OpenTelemetry SDK
// variables, which would otherwise configure the collector's own telemetry.
func jaegerEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OTEL_") {
			env = append(env, kv)
		}
	}
	return env
}

// Stop stops Jaeger (SIGTERM, then SIGKILL) and removes Dir. It is safe to call more than once
// and from several goroutines; every call returns the result of the first.
func (j *Jaeger) Stop() error {
	j.stopOnce.Do(func() {
		var errs []error
		if err := j.stopProcess(); err != nil {
			errs = append(errs, err)
		}
		if err := os.RemoveAll(j.Dir); err != nil {
			errs = append(errs, fmt.Errorf("harness: %w", err))
		}
		j.stopErr = errors.Join(errs...)
	})
	return j.stopErr
}

func (j *Jaeger) stopProcess() error {
	if j.exited == nil {
		return nil
	}
	defer func() { j.exited = nil }()
	_ = syscall.Kill(j.pid, syscall.SIGTERM)
	select {
	case <-j.exited:
		return nil
	case <-time.After(15 * time.Second):
	}
	_ = syscall.Kill(j.pid, syscall.SIGKILL)
	select {
	case <-j.exited:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("harness: Jaeger (pid %d) did not stop", j.pid)
	}
}

// freePorts returns n distinct TCP ports on 127.0.0.1 that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := listenLow()
		if err != nil {
			return nil, fmt.Errorf("harness: finding a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// listeningAddrs returns the addresses of the listening TCP sockets (IPv4 and IPv6) that process
// pid holds, from /proc.
func listeningAddrs(pid int) ([]*net.TCPAddr, error) {
	fdDir := "/proc/" + strconv.Itoa(pid) + "/fd"
	fds, err := os.ReadDir(fdDir)
	if err != nil {
		return nil, err
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		link, err := os.Readlink(filepath.Join(fdDir, fd.Name()))
		if err == nil && strings.HasPrefix(link, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] = true
		}
	}
	var addrs []*net.TCPAddr
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			if table == "/proc/net/tcp6" && errors.Is(err, os.ErrNotExist) {
				continue // no IPv6
			}
			return nil, err
		}
		s := bufio.NewScanner(bytes.NewReader(b))
		for s.Scan() {
			// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
			f := strings.Fields(s.Text())
			if len(f) < 10 || f[3] != "0A" || !inodes[f[9]] { // 0A: TCP_LISTEN
				continue
			}
			a, err := parseProcNetAddr(f[1])
			if err != nil {
				return nil, fmt.Errorf("%s: %w", table, err)
			}
			addrs = append(addrs, a)
		}
	}
	return addrs, nil
}

// parseProcNetAddr parses a local_address of /proc/net/tcp{,6}: the address in hex as the kernel
// stores it (32-bit words in host byte order, little-endian here), a colon, the port in hex.
func parseProcNetAddr(s string) (*net.TCPAddr, error) {
	hexIP, hexPort, ok := strings.Cut(s, ":")
	port, err := strconv.ParseUint(hexPort, 16, 16)
	if !ok || err != nil || (len(hexIP) != 8 && len(hexIP) != 32) {
		return nil, fmt.Errorf("malformed address %q", s)
	}
	ip := make(net.IP, len(hexIP)/2)
	for w := 0; w < len(ip); w += 4 {
		word, err := strconv.ParseUint(hexIP[2*w:2*w+8], 16, 32)
		if err != nil {
			return nil, fmt.Errorf("malformed address %q", s)
		}
		ip[w], ip[w+1], ip[w+2], ip[w+3] = byte(word), byte(word>>8), byte(word>>16), byte(word>>24)
	}
	return &net.TCPAddr{IP: ip, Port: int(port)}, nil
}
