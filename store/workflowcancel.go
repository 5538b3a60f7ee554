package store

import (
	"errors"
	"fmt"
)

// ErrWorkflowFinished: CancelWorkflow found the workflow completed or failed (its members and its
// callbacks all terminal), and left it so.
var ErrWorkflowFinished = errors.New("workflow already finished")

// WorkflowFinishedError is CancelWorkflow's refusal of a finished workflow: its id and the state it
// keeps. It matches ErrWorkflowFinished with errors.Is.
type WorkflowFinishedError struct {
	ID    string
	State WorkflowState
}

// Error names the workflow and its state.
func (e *WorkflowFinishedError) Error() string {
	return fmt.Sprintf("workflow %s is already %s: it cannot be cancelled", e.ID, e.State)
}

// Is matches ErrWorkflowFinished.
func (e *WorkflowFinishedError) Is(target error) bool { return target == ErrWorkflowFinished }

// CancelRefusal is the error CancelWorkflow returns for a workflow in state st, nil when the cancel
// may proceed: a running workflow (one whose callbacks have yet to finish too) is cancelled, a
// cancelled one stays so (cancelling twice is not an error), a completed or failed one, members and
// callbacks all terminal, is left as it is.
func CancelRefusal(id string, st WorkflowState) error {
	if st == WorkflowCompleted || st == WorkflowFailed {
		return &WorkflowFinishedError{ID: id, State: st}
	}
	return nil
}
