package pronto

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"time"
)

// Worker works jobs of one kind. Work's return decides the job's fate:
//   - nil: completed.
//   - an error: the attempt failed; the job is retried after its policy's backoff (retryable), or
//     discarded when its attempts are spent or the error's type is listed as non-retryable.
//   - Snooze(d): back to scheduled for d, without spending an attempt.
//   - Cancel(err): cancelled, not retried.
//   - Discard(err): discarded at once.
//
// A panic fails the attempt with the stack in the job's error history; it never crashes the process.
// When the job's timeout passes, ctx is cancelled and the attempt fails. When the job is cancelled
// elsewhere, ctx is cancelled with cause ErrJobCancelled.
type Worker[T JobArgs] interface {
	Work(ctx context.Context, job *Job[T]) error
}

type workFunc[T JobArgs] func(ctx context.Context, job *Job[T]) error

func (f workFunc[T]) Work(ctx context.Context, job *Job[T]) error { return f(ctx, job) }

// WorkFunc adapts a function to a Worker.
func WorkFunc[T JobArgs](f func(ctx context.Context, job *Job[T]) error) Worker[T] {
	return workFunc[T](f)
}

// Workers is the registry of workers a client runs, one per kind.
type Workers struct {
	byKind map[string]*workerEntry
}

type workerEntry struct {
	kind string
	// run decodes the row's args and works the job.
	run func(ctx context.Context, row *JobRow) error
}

// NewWorkers returns an empty registry.
func NewWorkers() *Workers { return &Workers{byKind: make(map[string]*workerEntry)} }

// AddWorker registers w for T's kind. It panics if the kind is invalid or already registered, which is
// a programming error found at start-up; use AddWorkerSafely to get an error instead.
func AddWorker[T JobArgs](workers *Workers, w Worker[T]) {
	if err := AddWorkerSafely(workers, w); err != nil {
		panic(err)
	}
}

// AddWorkerSafely registers w for T's kind, or says why it cannot.
func AddWorkerSafely[T JobArgs](workers *Workers, w Worker[T]) error {
	var zero T
	kind := zero.Kind()
	if !ValidKind(kind) {
		return invalidf("worker kind %q: must be %s", kind, KindRule)
	}
	if _, ok := workers.byKind[kind]; ok {
		return fmt.Errorf("pronto: a worker for kind %q is already registered", kind)
	}
	workers.byKind[kind] = &workerEntry{
		kind: kind,
		run: func(ctx context.Context, row *JobRow) error {
			var args T
			if err := decodeArgs(row.Args, &args); err != nil {
				return Discard(fmt.Errorf("kind %q: %w", kind, err))
			}
			return w.Work(ctx, &Job[T]{JobRow: row, Args: args})
		},
	}
	return nil
}

// Kinds returns the registered kinds, sorted.
func (w *Workers) Kinds() []string {
	out := make([]string, 0, len(w.byKind))
	for k := range w.byKind {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// encodeArgs stores args as the one element of an OJS args array.
func encodeArgs(args JobArgs) (json.RawMessage, error) {
	b, err := json.Marshal([]any{args})
	if err != nil {
		return nil, invalidf("kind %q: args do not encode as JSON: %v", args.Kind(), err)
	}
	return b, nil
}

// decodeArgs reads the one element of an OJS args array into a T, in one decoding pass.
func decodeArgs[T any](raw json.RawMessage, dst *T) error {
	// The usual case, "[" value "]", decodes the value straight into dst, without a slice to
	// hold it. Anything else (or a value that does not decode) takes the full path below, which
	// says what is wrong.
	if n := len(raw); n >= 2 && raw[0] == '[' && raw[n-1] == ']' {
		if json.Unmarshal(raw[1:n-1], dst) == nil {
			return nil
		}
		var zero T
		*dst = zero // a value that failed part-way may have filled some fields
	}
	var elems []T
	if err := json.Unmarshal(raw, &elems); err != nil {
		return fmt.Errorf("args are not a JSON array of one %T: %w", *dst, err)
	}
	if len(elems) != 1 {
		return fmt.Errorf("args must be a JSON array with exactly one element (the typed args), got %d elements", len(elems))
	}
	*dst = elems[0]
	return nil
}

// emitWorkerStopped reports, at the end of Stop, that this client's workers have stopped
// (EventWorkerStopped).
func (c *Client) emitWorkerStopped(now time.Time) {
	if !c.events.wants(EventWorkerStopped) {
		return
	}
	queues := make([]string, 0, len(c.cfg.Queues))
	for q := range c.cfg.Queues {
		queues = append(queues, q)
	}
	slices.Sort(queues)
	c.events.emit(&Event{Kind: EventWorkerStopped, At: now, Worker: &WorkerStop{
		ID: c.cfg.ID, Queues: queues, Reason: "shutdown",
		JobsCompleted: c.completedRuns.Load(), Uptime: now.Sub(c.startedAt),
	}})
}
