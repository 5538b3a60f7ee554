package server

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/pronto-jobs/pronto"
)

// setStepName records a workflow step's id in the job's ext, so that GET /ojs/v1/workflows/{id} can
// answer each step under the id it was created with.
func setStepName(req *enqueueRequest, name string) *apiError {
	m := map[string]json.RawMessage{}
	if len(req.job.Meta) > 0 && string(req.job.Meta) != "null" {
		if err := json.Unmarshal(req.job.Meta, &m); err != nil {
			return invalid("meta", "meta must be a JSON object")
		}
	}
	ext := ojsExt{}
	if raw, ok := m[extKey]; ok {
		if err := json.Unmarshal(raw, &ext); err != nil {
			return invalid("meta", "meta key %q is reserved by pronto", extKey)
		}
	}
	ext.Step = name
	raw, err := json.Marshal(ext)
	if err != nil {
		return invalid("", "the step does not encode: %v", err)
	}
	m[extKey] = raw
	meta, err := json.Marshal(m)
	if err != nil {
		return invalid("meta", "meta does not encode: %v", err)
	}
	req.job.Meta = meta
	req.ext.Step = name
	return nil
}

// orderSteps puts the jobs of a chain, group or batch (typ) in creation order, callbacks last: the
// store lists them in id order, which is creation order unless the steps were given ids or the
// workflow nests others, and then each member carries its position as its step name ("2", or "1.0"
// in a nested one: decodeWorkflow, nester). A dag's steps stay in id order.
func orderSteps(typ string, jobs []*pronto.JobRow) {
	if typ == "dag" {
		return
	}
	key := func(j *pronto.JobRow) []int {
		if j.RunOn != "" {
			return []int{math.MaxInt}
		}
		if _, ext := splitMeta(j.Meta); ext != nil && ext.Step != "" {
			if pos := stepPosition(ext.Step); pos != nil {
				return pos
			}
		}
		return []int{-1} // no position recorded: the ids were pronto's, in creation order already
	}
	slices.SortStableFunc(jobs, func(a, b *pronto.JobRow) int { return slices.Compare(key(a), key(b)) })
}

// stepPosition reads a step name made of positions ("2", "1.0.3"), or nil for any other name.
func stepPosition(name string) []int {
	var pos []int
	for _, p := range strings.Split(name, ".") {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return nil
		}
		pos = append(pos, n)
	}
	return pos
}

// stepID is the id a workflow job answers under in steps[]: the id it was created with (a dag step's
// name), else its callback condition ("on_success", ...), else its position among the members ("0",
// "1", ..., pronto's names for chain, group and batch steps).
func stepID(j *pronto.JobRow, member int) string {
	if _, ext := splitMeta(j.Meta); ext != nil && ext.Step != "" {
		return ext.Step
	}
	if j.RunOn != "" {
		return "on_" + string(j.RunOn)
	}
	return strconv.Itoa(member)
}

// appendSteps appends the binding's steps[] (ojs-http-binding.md §14.2) for a workflow's jobs, given in
// creation order, to b, an object still open: each step's id, type, state, job id, the ids of the
// steps it depends on, its start and completion times and its result.
func appendSteps(b []byte, jobs []*pronto.JobRow) []byte {
	ids := make(map[string]string, len(jobs))
	member := 0
	for _, j := range jobs {
		ids[j.ID] = stepID(j, member)
		if j.RunOn == "" {
			member++
		}
	}
	b = append(appendKey(b, "steps"), '[')
	for i, j := range jobs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '{')
		b = appendStringField(b, "id", ids[j.ID])
		b = appendStringField(b, "type", j.Kind)
		b = appendStringField(b, "state", string(j.State))
		b = appendStringField(b, "job_id", j.ID)
		deps := make([]string, 0, len(j.ParentIDs))
		for _, p := range j.ParentIDs {
			if id, ok := ids[p]; ok {
				deps = append(deps, id)
			} else {
				deps = append(deps, p)
			}
		}
		b = appendStrings(appendKey(b, "depends_on"), deps)
		if !j.StartedAt.IsZero() {
			b = appendTimeField(b, "started_at", j.StartedAt)
		}
		if !j.CompletedAt.IsZero() {
			b = appendTimeField(b, "completed_at", j.CompletedAt)
		}
		if len(j.Result) > 0 && string(j.Result) != "null" {
			b = appendRawField(b, "result", j.Result)
		}
		b = append(b, '}')
	}
	return append(b, ']')
}

// bindingDAG reports whether a workflow without a type is in the HTTP binding's form (§14.1): steps
// whose first element carries id or depends_on.
func bindingDAG(top object) bool {
	v, ok := top.get("steps")
	if !ok || jsonKind(v) != "array" {
		return false
	}
	var elems []json.RawMessage
	if json.Unmarshal(v, &elems) != nil || len(elems) == 0 {
		return false
	}
	first, e := decodeObject(elems[0], "step")
	if e != nil {
		return false
	}
	_, hasID := first.get("id")
	_, hasDeps := first.get("depends_on")
	return hasID || hasDeps
}

// sdkCallbacks are the values of options.callback_type, the Python SDK's way of sending a batch's
// callbacks in the binding's form: steps that depend on every job, with their condition in that
// option, which no spec defines.
var sdkCallbacks = map[string]func(w *pronto.Workflow, j pronto.WorkflowJob) *pronto.Workflow{
	"on_success":  (*pronto.Workflow).OnSuccess,
	"on_failure":  (*pronto.Workflow).OnFailure,
	"on_complete": (*pronto.Workflow).OnComplete,
}

// takeCallbackType removes options.callback_type from the step raw at path and returns the step
// without it and the option's value ("" when absent).
func takeCallbackType(raw json.RawMessage, path string) (json.RawMessage, string, *apiError) {
	top, ok := splitObject(raw)
	if !ok {
		return raw, "", nil // decodeWorkflowJob reports it
	}
	opts, ok := top.get("options")
	if !ok || jsonKind(opts) != "object" {
		return raw, "", nil
	}
	own, _ := splitObject(opts)
	cb, ok := own.get("callback_type")
	if !ok {
		return raw, "", nil
	}
	f := path + ".options.callback_type"
	var typ string
	if json.Unmarshal(cb, &typ) != nil || sdkCallbacks[typ] == nil {
		return nil, "", invalid(f, "%s must be on_success, on_failure or on_complete", f)
	}
	b := append(make([]byte, 0, len(raw)), '{')
	for i, mb := range top {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(appendString(b, mb.key), ':')
		if mb.key != "options" {
			b = append(b, mb.val...)
			continue
		}
		b = append(b, '{')
		n := 0
		for _, o := range own {
			if o.key == "callback_type" {
				continue
			}
			if n > 0 {
				b = append(b, ',')
			}
			b = append(append(appendString(b, o.key), ':'), o.val...)
			n++
		}
		b = append(b, '}')
	}
	return append(b, '}'), typ, nil
}
