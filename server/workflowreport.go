package server

import (
	"time"

	"github.com/pronto-jobs/pronto"
)

// workflowReport is what a workflow's view tells from its jobs beyond the stored counts: when it
// started (ojs-workflows.md §3.3) and what failed in it (§9.2 rule 4, §9.6), callbacks discarded
// included (§9.5).
type workflowReport struct {
	startedAt time.Time
	// failedStep is a chain's first member that did not complete once it failed, -1 otherwise.
	failedStep int
	// failed are the members that failed it, then the callbacks discarded.
	failed []*pronto.JobRow
}

// reportWorkflow reads the report of wf from its jobs, given in creation order (orderSteps).
func reportWorkflow(wf *pronto.WorkflowInfo, jobs []*pronto.JobRow) workflowReport {
	rep := workflowReport{failedStep: -1}
	states := make(map[string]pronto.State, len(jobs))
	for _, j := range jobs {
		states[j.ID] = j.State
	}
	member := 0
	var callbacks []*pronto.JobRow
	for _, j := range jobs {
		rep.noteStart(j)
		if j.RunOn != "" {
			// A callback cancelled (its condition did not hold, or its workflow was cancelled) is no
			// failure; one discarded after its retries fails its workflow.
			if j.State == pronto.StateDiscarded {
				callbacks = append(callbacks, j)
			}
			continue
		}
		if wf.Type == "chain" && wf.State == pronto.WorkflowFailed && rep.failedStep < 0 && j.State != pronto.StateCompleted {
			rep.failedStep = member
		}
		if memberFailed(wf, j, states) {
			rep.failed = append(rep.failed, j)
		}
		member++
	}
	rep.failed = append(rep.failed, callbacks...)
	return rep
}

// callbackType is the callback type of workflow job j as ojs-workflows.md §9.5 names it
// ("on_success", "on_failure", "on_complete"), "" for a member.
func callbackType(j *pronto.JobRow) string {
	if j.RunOn == "" {
		return ""
	}
	return "on_" + string(j.RunOn)
}

// noteStart keeps the earliest start among j's attempts: a retried job's StartedAt is its latest.
func (rep *workflowReport) noteStart(j *pronto.JobRow) {
	starts := []time.Time{j.StartedAt}
	for _, e := range j.Errors {
		starts = append(starts, e.StartedAt)
	}
	for _, at := range starts {
		if !at.IsZero() && (rep.startedAt.IsZero() || at.Before(rep.startedAt)) {
			rep.startedAt = at
		}
	}
}

// memberFailed reports whether member j is a cause of its workflow's failure: discarded, or
// cancelled on its own (not as its workflow was, nor because a step it waited for did not complete).
func memberFailed(wf *pronto.WorkflowInfo, j *pronto.JobRow, states map[string]pronto.State) bool {
	switch j.State {
	case pronto.StateDiscarded:
		return true
	case pronto.StateCancelled:
		if wf.State == pronto.WorkflowCancelled {
			return false
		}
		for _, p := range j.ParentIDs {
			if st, ok := states[p]; ok && st != pronto.StateCompleted {
				return false
			}
		}
		return true
	}
	return false
}

// appendFailure appends, to b an object still open, failed_step_index (a failed chain's),
// failed_job_ids and errors: each failed job's last error, a callback's with its callback type.
func (rep *workflowReport) appendFailure(b []byte) []byte {
	if rep.failedStep >= 0 {
		b = appendIntField(b, "failed_step_index", int64(rep.failedStep))
	}
	if len(rep.failed) == 0 {
		return b
	}
	ids := make([]string, len(rep.failed))
	for i, j := range rep.failed {
		ids[i] = j.ID
	}
	b = appendStrings(appendKey(b, "failed_job_ids"), ids)
	b = append(appendKey(b, "errors"), '[')
	n := 0
	for _, j := range rep.failed {
		if len(j.Errors) == 0 {
			continue // cancelled before it ran: no error to show
		}
		if n > 0 {
			b = append(b, ',')
		}
		n++
		last := &j.Errors[len(j.Errors)-1]
		code, _, _ := errorCode(last)
		b = append(b, '{')
		b = appendStringField(b, "job_id", j.ID)
		if cb := callbackType(j); cb != "" {
			b = appendStringField(b, "callback", cb)
		}
		b = appendStringField(b, "code", code)
		b = appendStringField(b, "message", last.Message)
		b = appendIntField(b, "attempt", int64(last.Attempt))
		b = append(b, '}')
	}
	return append(b, ']')
}
