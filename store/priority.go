package store

import "fmt"

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
