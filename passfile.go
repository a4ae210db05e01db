package pgconnector

import (
	"context"
	"errors"
	"sync"

	"github.com/pgconnector/pgconnector/negotiation"
)

// passfileNote carries, through the context of one connect, libpq's warning for a password file
// that was not read, which the connect's error gets when it is [negotiation.ErrNoPassword].
type passfileNote struct {
	mu  sync.Mutex
	msg string
}

type passfileNoteKey struct{}

// withPassfileNote returns ctx with a new note for configureAttempt to fill.
func withPassfileNote(ctx context.Context) (context.Context, *passfileNote) {
	n := &passfileNote{}
	return context.WithValue(ctx, passfileNoteKey{}, n), n
}

// notePassfile records msg in the note ctx carries, if any.
func notePassfile(ctx context.Context, msg string) {
	if n, ok := ctx.Value(passfileNoteKey{}).(*passfileNote); ok && msg != "" {
		n.mu.Lock()
		n.msg = msg
		n.mu.Unlock()
	}
}

// wrap adds the warning to err when err is the refusal of a password request for want of a
// password: why the file gave none.
func (n *passfileNote) wrap(err error) error {
	n.mu.Lock()
	msg := n.msg
	n.mu.Unlock()
	if msg == "" || !errors.Is(err, negotiation.ErrNoPassword) {
		return err
	}
	return &passfileIgnoredError{err: err, msg: msg}
}

// passfileIgnoredError is a connect's error with the warning libpq would have printed.
type passfileIgnoredError struct {
	err error
	msg string
}

func (e *passfileIgnoredError) Error() string { return e.err.Error() + " (" + e.msg + ")" }
func (e *passfileIgnoredError) Unwrap() error { return e.err }
