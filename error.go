package pronto

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/pronto-jobs/pronto/store"
)

// Errors callers branch on with errors.Is.
var (
	// ErrNotFound: no job with that id exists.
	ErrNotFound = store.ErrNotFound
	// ErrInvalidTransition: the operation is not allowed from the job's current state; the error is a
	// *TransitionError naming the state.
	ErrInvalidTransition = store.ErrInvalidTransition
	// ErrDuplicate: a job with the same id already exists.
	ErrDuplicate = store.ErrDuplicate
	// ErrUnsupported: the client's store cannot do this (for example InsertTx on SQLite).
	ErrUnsupported = store.ErrUnsupported
	// ErrInvalidArgs: the job's args, options or names are not acceptable; nothing was stored.
	ErrInvalidArgs = errors.New("invalid job")
	// ErrClientStopped: the client is stopping or stopped.
	ErrClientStopped = errors.New("pronto: client is stopped")
	// ErrJobCancelled is the cause of a running job's context when the job is cancelled (from any client).
	ErrJobCancelled = errors.New("pronto: job cancelled")
	// ErrJobLost is the cause of a running job's context when this client no longer holds the job's
	// lease (it was rescued, or deleted): its outcome will not be recorded.
	ErrJobLost = errors.New("pronto: job lease lost")
	// ErrShutdown is the cause of a running job's context when Stop's deadline passed; the job goes back
	// to available without spending an attempt.
	ErrShutdown = errors.New("pronto: client shutting down")
	// ErrJobExpired is the error of EventDiscarded for a job discarded because its ExpiresAt passed
	// before it started: it never ran.
	ErrJobExpired = errors.New("pronto: job expired before it started")
	// ErrRateLimitDropped is the error (wrapped, naming the rate key) of EventDiscarded for a job a
	// claim discarded because its rate limit had no room and says LimitDrop: it never ran.
	ErrRateLimitDropped = errors.New("pronto: job dropped by its rate limit")
	// ErrRateLimitRescheduled is the error (wrapped, naming the rate key) of EventSnoozed for a job a
	// claim moved to scheduled because its rate limit had no room and says LimitReschedule: it did
	// not run, and runs at its ScheduledAt (or later, if its limit still has no room then).
	ErrRateLimitRescheduled = errors.New("pronto: job rescheduled by its rate limit")
)

// TransitionError reports a refused state transition: the operation and the job's state.
type TransitionError = store.TransitionError

// invalidf returns an ErrInvalidArgs error with a message naming the problem.
func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidArgs, fmt.Sprintf(format, args...))
}

// SnoozeError is returned by Snooze.
type SnoozeError struct{ Duration time.Duration }

func (e *SnoozeError) Error() string { return fmt.Sprintf("job snoozed for %s", e.Duration) }

// Snooze, returned from Work, puts the job back to scheduled for d without spending an attempt (its
// max attempts grows by one so the retry budget is unchanged) and without an error entry. Its
// attempt number still counts the snooze, but its retry backoff does not: a later failure backs off
// as the failure it is (the first one by the policy's first delay), whatever the snoozes before it.
func Snooze(d time.Duration) error {
	if d < 0 {
		d = 0
	}
	return &SnoozeError{Duration: d}
}

// CancelError is returned by Cancel.
type CancelError struct{ Err error }

func (e *CancelError) Error() string {
	if e.Err == nil {
		return "job cancelled by its worker"
	}
	return "job cancelled by its worker: " + e.Err.Error()
}

// Unwrap returns the reason given to Cancel.
func (e *CancelError) Unwrap() error { return e.Err }

// Cancel, returned from Work, moves the job to cancelled (terminal) and records err in its error
// history. It is not retried.
func Cancel(err error) error { return &CancelError{Err: err} }

// DiscardError is returned by Discard.
type DiscardError struct{ Err error }

func (e *DiscardError) Error() string {
	if e.Err == nil {
		return "job discarded by its worker"
	}
	return e.Err.Error()
}

// Unwrap returns the reason given to Discard.
func (e *DiscardError) Unwrap() error { return e.Err }

// Discard, returned from Work, fails the job permanently: it goes to discarded at once, whatever
// attempts remain, with err in its error history.
func Discard(err error) error { return &DiscardError{Err: err} }

// PanicError is the error a job's attempt records when its worker panicked.
type PanicError struct {
	Value any
	Stack string
}

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// opError is an error of a Client operation: "pronto: OP: cause", wrapping the store's error.
type opError struct {
	msg string
	err error
}

func (e *opError) Error() string { return e.msg }
func (e *opError) Unwrap() error { return e.err }

// wrapOp names the failed operation (such as `cancel job ID`) once. Stores describe their errors in
// their own words, often naming the same operation; the cause is stated here without repeating it:
// a missing job, queue or schedule is just "not found", a store's own op prefix is dropped, and a
// refused transition (which already names its job and operation) is returned as it is.
func wrapOp(op string, err error) error {
	var te *TransitionError
	if errors.As(err, &te) {
		return err
	}
	cause := err.Error()
	if errors.Is(err, ErrNotFound) {
		cause = ErrNotFound.Error()
	} else {
		for _, p := range []string{"memory: ", "sqlite: ", "postgres: "} {
			cause = strings.TrimPrefix(cause, p)
		}
		cause = strings.TrimPrefix(cause, op+": ")
	}
	return &opError{msg: "pronto: " + op + ": " + cause, err: err}
}
