// Package contention runs a function on many goroutines at once with the mutex and block
// profiles on, and reports which contended locks the code under test took: for the tests
// that show a path shares no lock between goroutines.
package contention

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sort"
	"strings"
	"sync"
	"testing"
)

// Module is the import path prefix of this module's packages.
const Module = "github.com/pgconnector/pgconnector/"

// Sample is one call stack of a profile and what it gained during a storm.
type Sample struct {
	Count  int64 // contention or blocking events
	Cycles int64 // CPU ticks spent waiting (see runtime.BlockProfileRecord)
	Frames []runtime.Frame
}

// Result is what a storm recorded: the samples new or grown since it began.
type Result struct {
	Mutex, Block []Sample
}

// Storm runs f(g, i) for i < rounds on each of goroutines goroutines, all released at once,
// with runtime.SetMutexProfileFraction(1) and runtime.SetBlockProfileRate(1) (every event
// recorded), and returns the samples the profiles gained meanwhile. The rates are restored
// after (the block rate to 0). When dir is not empty the whole mutex and block profiles are
// written there, as mutex.pprof and block.pprof, for go tool pprof.
func Storm(goroutines, rounds int, dir string, f func(g, i int)) (Result, error) {
	prevFraction := runtime.SetMutexProfileFraction(1)
	runtime.SetBlockProfileRate(1)
	defer func() {
		runtime.SetMutexProfileFraction(prevFraction)
		runtime.SetBlockProfileRate(0)
	}()
	mutex0, block0 := counts(runtime.MutexProfile), counts(runtime.BlockProfile)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			<-start
			for i := range rounds {
				f(g, i)
			}
		})
	}
	close(start)
	wg.Wait()
	res := Result{Mutex: grown(runtime.MutexProfile, mutex0), Block: grown(runtime.BlockProfile, block0)}
	if dir != "" {
		for _, name := range []string{"mutex", "block"} {
			if err := writeProfile(dir, name); err != nil {
				return res, err
			}
		}
	}
	return res, nil
}

func writeProfile(dir, name string) error {
	f, err := os.Create(filepath.Join(dir, name+".pprof"))
	if err != nil {
		return err
	}
	if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

type profileFunc func([]runtime.BlockProfileRecord) (int, bool)

func records(p profileFunc) []runtime.BlockProfileRecord {
	n, _ := p(nil)
	for {
		r := make([]runtime.BlockProfileRecord, n+64)
		m, ok := p(r)
		if ok {
			return r[:m]
		}
		n = m
	}
}

func counts(p profileFunc) map[[32]uintptr][2]int64 {
	m := make(map[[32]uintptr][2]int64)
	for _, r := range records(p) {
		c := m[r.Stack0]
		m[r.Stack0] = [2]int64{c[0] + r.Count, c[1] + r.Cycles}
	}
	return m
}

func grown(p profileFunc, before map[[32]uintptr][2]int64) []Sample {
	var out []Sample
	for stk, c := range counts(p) {
		b := before[stk]
		if c[0] <= b[0] {
			continue
		}
		s := Sample{Count: c[0] - b[0], Cycles: c[1] - b[1]}
		frames := runtime.CallersFrames(trim(stk[:]))
		for {
			fr, more := frames.Next()
			s.Frames = append(s.Frames, fr)
			if !more {
				break
			}
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Cycles > out[j].Cycles })
	return out
}

func trim(stk []uintptr) []uintptr {
	for i, pc := range stk {
		if pc == 0 {
			return stk[:i]
		}
	}
	return stk
}

// Ours reports whether s is a contended lock that this module's code took: its stack holds a
// lock of package sync (Mutex, RWMutex; what the Go code of a package takes) and a frame of
// this module outside its tests and this package. Contention on the runtime's own locks (the
// scheduler's, the heap's), which the mutex profile also reports with the stack that met it,
// is not: no package of the module takes them.
func (s Sample) Ours() bool {
	syncLock, module := false, false
	for _, fr := range s.Frames {
		switch {
		case strings.HasPrefix(fr.Function, "sync.(*Mutex)."), strings.HasPrefix(fr.Function, "sync.(*RWMutex)."),
			strings.HasPrefix(fr.Function, "internal/sync.(*Mutex)."):
			syncLock = true
		case strings.HasPrefix(fr.Function, Module) && !strings.HasSuffix(fr.File, "_test.go") &&
			!strings.HasPrefix(fr.Function, Module+"internal/contention."):
			module = true
		}
	}
	return syncLock && module
}

// String shows the count, the wait and the innermost frames.
func (s Sample) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d events, %d cycles:", s.Count, s.Cycles)
	for i, fr := range s.Frames {
		if i == 8 {
			b.WriteString(" ...")
			break
		}
		fmt.Fprintf(&b, " %s", fr.Function)
	}
	return b.String()
}

// Check fails t for each mutex sample of this module's code (a lock of the module that
// goroutines of the storm waited for), and logs the first five other mutex samples and the
// first five block samples, for the reader of a failure.
func (r Result) Check(t testing.TB) {
	t.Helper()
	others := 0
	for _, s := range r.Mutex {
		switch {
		case s.Ours():
			t.Errorf("a lock of the module contended: %v", s)
		case others < 5:
			others++
			t.Logf("mutex (not the module's): %v", s)
		}
	}
	for i, s := range r.Block {
		if i == 5 {
			break
		}
		t.Logf("block: %v", s)
	}
}
