package negotiation

import (
	"context"
	"sync"
	"testing"
	"time"
)

// stateTrace is a Trace whose hooks keep per-connect state in the connect's context and write it
// without a lock at each step, as package tracing's do (the connect span, the metric state of
// pgconnector.connect.step.duration): a step of background work run under a connect's context
// would write it while the connect does, which go test -race reports. It records what the
// background work was given.
type stateTrace struct {
	mu       sync.Mutex
	connects int
	work     []backgroundSeen
	done     chan BackgroundDoneInfo
}

// stepState is one connect's state: its number, and the steps it ran.
type stepState struct {
	connect int
	steps   int
}

type (
	stepStateKey struct{} // value: *stepState
	triggerKey   struct{} // value: the connect's number (Detach)
)

// backgroundSeen is what one background task's hooks saw.
type backgroundSeen struct {
	info    BackgroundStartInfo
	trigger int  // the connect number in info.Trigger, 0 for none
	state   bool // a connect's state was in the context of the work's hooks
}

func newStateTrace() *stateTrace { return &stateTrace{done: make(chan BackgroundDoneInfo, 16)} }

func (s *stateTrace) trace() *Trace {
	step := func(ctx context.Context) context.Context {
		if st, _ := ctx.Value(stepStateKey{}).(*stepState); st != nil {
			st.steps++
		}
		return ctx
	}
	return &Trace{
		ConnectStart: func(ctx context.Context, _ ConnectStartInfo) context.Context {
			s.mu.Lock()
			s.connects++
			n := s.connects
			s.mu.Unlock()
			return context.WithValue(ctx, stepStateKey{}, &stepState{connect: n})
		},
		DNSStart:        func(ctx context.Context, _ HostInfo) context.Context { return step(ctx) },
		TCPConnectStart: func(ctx context.Context, _ DialInfo) context.Context { return step(ctx) },
		SSLRequestStart: func(ctx context.Context, _ DialInfo) context.Context { return step(ctx) },
		StartupStart:    func(ctx context.Context, _ DialInfo) context.Context { return step(ctx) },
		Detach: func(ctx, connect context.Context) context.Context {
			if st, _ := connect.Value(stepStateKey{}).(*stepState); st != nil {
				return context.WithValue(ctx, triggerKey{}, st.connect)
			}
			return ctx
		},
		BackgroundStart: func(ctx context.Context, info BackgroundStartInfo) context.Context {
			seen := backgroundSeen{info: info, state: ctx.Value(stepStateKey{}) != nil}
			seen.trigger, _ = info.Trigger.Value(triggerKey{}).(int)
			s.mu.Lock()
			s.work = append(s.work, seen)
			s.mu.Unlock()
			return ctx
		},
		BackgroundDone: func(ctx context.Context, info BackgroundDoneInfo) {
			if ctx.Value(stepStateKey{}) != nil {
				panic("BackgroundDone under a connect's context")
			}
			s.done <- info
		},
	}
}

// waitWork waits (at most 5 s) for one background task to end and checks that it did work,
// linked to connect number trigger and under no connect's context.
func (s *stateTrace) waitWork(t *testing.T, work BackgroundWork, trigger int) BackgroundDoneInfo {
	t.Helper()
	var done BackgroundDoneInfo
	select {
	case done = <-s.done:
	case <-time.After(5 * time.Second):
		t.Fatalf("no %s ended in the background", work)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.work) != 1 {
		t.Fatalf("%d background tasks, want 1", len(s.work))
	}
	seen := s.work[0]
	if done.Work != work || seen.info.Work != work {
		t.Errorf("background work %s (done: %s), want %s", seen.info.Work, done.Work, work)
	}
	if seen.trigger != trigger {
		t.Errorf("background %s linked to connect %d, want %d (the one that started it)", work, seen.trigger, trigger)
	}
	if seen.state {
		t.Errorf("background %s ran under a connect's context", work)
	}
	return done
}

// checkRefresh makes tr's RefreshStart check that a refresh runs under no connect's context
// and is linked to the connect that started it.
func checkRefresh(t *testing.T, tr *Trace) {
	tr.RefreshStart = func(ctx context.Context, info RefreshStartInfo) context.Context {
		if ctx.Value(stepStateKey{}) != nil {
			t.Errorf("a refresh of %s under a connect's context", info.Method)
		}
		if c, _ := info.Trigger.Value(triggerKey{}).(int); c == 0 {
			t.Errorf("a refresh of %s not linked to the connect that started it", info.Method)
		}
		return ctx
	}
}
