package store

import "context"

// NonTerminalStates are the states a queue's depth counts (ojs-backpressure.md §6.1: the jobs that
// have not finished).
var NonTerminalStates = []State{StateAvailable, StateScheduled, StateRetryable, StatePending, StateActive}

// QueueBounder is implemented by stores that keep per-queue bounds for backpressure (all of pronto's
// stores). It is separate from Store so that a third-party store without it keeps working; queues are
// then unbounded.
type QueueBounder interface {
	// SetQueueMaxDepth stores queue's maximum depth; 0 removes the bound.
	SetQueueMaxDepth(ctx context.Context, queue string, maxDepth int64) error
	// QueueMaxDepths returns the maximum depth of every bounded queue.
	QueueMaxDepths(ctx context.Context) (map[string]int64, error)
	// QueueDepths counts the jobs in NonTerminalStates of each of queues, in one round trip (a queue
	// without such jobs is 0).
	QueueDepths(ctx context.Context, queues []string) (map[string]int64, error)
}
