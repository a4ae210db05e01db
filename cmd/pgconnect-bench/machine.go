package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/pgconnector/pgconnector/internal/harness"
)

// machineInfo describes this machine and the software under test.
func machineInfo(ctx context.Context, pgVersion string) Machine {
	m := Machine{
		CPU:        procField("/proc/cpuinfo", "model name"),
		Cores:      runtime.NumCPU(),
		Kernel:     strings.TrimSpace(readFile("/proc/sys/kernel/osrelease")),
		OS:         strings.Trim(procField("/etc/os-release", "PRETTY_NAME"), `"`),
		Go:         strings.TrimPrefix(runtime.Version(), "go"),
		PostgreSQL: pgVersion,
	}
	if kb, err := strconv.Atoi(strings.TrimSuffix(procField("/proc/meminfo", "MemTotal"), " kB")); err == nil {
		m.MemoryGiB = (kb + 512*1024) / (1024 * 1024)
	}
	if p, err := harness.Program(ctx, "pgbench"); err == nil {
		if out, err := exec.CommandContext(ctx, p, "--version").Output(); err == nil {
			m.Pgbench = strings.TrimSpace(string(out))
		}
	}
	if out, err := exec.CommandContext(ctx, "dpkg-query", "-W", "-f", "${Version}", "libkrb5-3").Output(); err == nil {
		m.Krb5 = strings.TrimSpace(string(out))
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		var mods []string
		for _, d := range bi.Deps {
			switch d.Path {
			case "github.com/jackc/pgx/v5", "github.com/lib/pq", "github.com/jcmturner/gokrb5/v8",
				"go.opentelemetry.io/otel/sdk", "github.com/XSAM/otelsql", "github.com/exaring/otelpgx":
				mods = append(mods, d.Path+" "+d.Version)
			}
		}
		m.Modules = strings.Join(mods, ", ")
	}
	return m
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// procField returns the value of the first "key: value" or "key=value" line
// of a file such as /proc/cpuinfo or /etc/os-release.
func procField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, ok := strings.Cut(s.Text(), ":")
		if !ok {
			k, v, ok = strings.Cut(s.Text(), "=")
		}
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
