package store

import (
	"context"
	"fmt"
)

// The priority range every store holds: OJS's core range, higher runs first.
const (
	PriorityMin = -100
	PriorityMax = 100
)

// OpChangePriority is the Operation of the *TransitionError that SetJobPriority returns.
const OpChangePriority = "change the priority of"

// CheckPriority returns an error wrapping ErrInvalidParams, naming the range, when p is outside
// PriorityMin..PriorityMax.
func CheckPriority(p int) error {
	if p < PriorityMin || p > PriorityMax {
		return fmt.Errorf("%w: priority %d: must be between %d and %d", ErrInvalidParams, p, PriorityMin, PriorityMax)
	}
	return nil
}

// PriorityChangeable reports whether SetJobPriority accepts a job in state st: a job waiting to run
// whose next claim the priority decides. OJS (ojs-priority.md 8.1) forbids the change for active,
// retryable and terminal jobs.
func PriorityChangeable(st State) bool {
	return st == StateAvailable || st == StateScheduled || st == StatePending
}

// PriorityCounter is implemented by stores that count a queue's available jobs per priority, for
// ojs-priority.md §10.3's priority distribution: every store pronto has.
type PriorityCounter interface {
	// CountAvailableByPriority returns how many available jobs of queue wait at each priority;
	// priorities without any are absent, and a queue without jobs gives an empty map. PostgreSQL
	// and SQLite read the queue's range of the claim index, Redis its ready sets (two calls per set
	// and priority present), the memory store its jobs until it has met the queue's available
	// count: meant for dashboards and operators, not hot paths.
	CountAvailableByPriority(ctx context.Context, queue string) (map[int]int64, error)
}
