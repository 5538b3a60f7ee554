package server

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
)

// Workflow endpoints (ojs-workflows.md §11, OJS level 3): create a chain, group or batch (or, as a
// pronto extension, a dag), read it, list its jobs, cancel it.

// workflowTypes are the accepted values of a workflow's type.
var workflowTypes = map[string]bool{"chain": true, "group": true, "batch": true, "dag": true}

// workflowCallbacks maps the members of callbacks to the builder's methods.
var workflowCallbacks = []struct {
	name string
	add  func(*pronto.Workflow, pronto.WorkflowJob) *pronto.Workflow
}{
	{"on_success", (*pronto.Workflow).OnSuccess},
	{"on_failure", (*pronto.Workflow).OnFailure},
	{"on_complete", (*pronto.Workflow).OnComplete},
}

// workflowSystemKeys are workflow attributes the server sets; a request may carry them (an SDK echoing
// a workflow back) and they are ignored.
var workflowSystemKeys = map[string]bool{
	"id": true, "state": true, "metadata": true, "created_at": true, "started_at": true,
	"completed_at": true, "specversion": true,
}

// optionGroup names the option an options member sets, so that aliases count as one option when a
// workflow's default options are merged under a job's own.
func optionGroup(k string) string {
	switch k {
	case "retry_policy":
		return "retry"
	case "delay_until":
		return "scheduled_at"
	case "visibility_timeout_ms":
		return "visibility_timeout"
	case "timeout":
		return "timeout_ms" // the envelope's top-level timeout, in seconds
	}
	return k
}

// withDefaultOptions returns the job envelope top with the workflow's default options merged under
// its own: a default applies unless the job sets the same option, in options or at the envelope's
// top level.
func withDefaultOptions(top object, defaults object) object {
	if len(defaults) == 0 {
		return top
	}
	set := map[string]bool{}
	for _, mb := range top {
		set[optionGroup(mb.key)] = true // envelope-level options (queue, priority, ...)
	}
	var own object
	if raw, ok := top.get("options"); ok && !isNull(raw) {
		if jsonKind(raw) != "object" {
			return top // decodeJobMembers reports it
		}
		own, _ = splitObject(raw)
		for _, mb := range own {
			set[optionGroup(mb.key)] = true
		}
	}
	merged := make([]byte, 0, 256)
	merged = append(merged, '{')
	n := 0
	add := func(mb member) {
		if n > 0 {
			merged = append(merged, ',')
		}
		merged = appendString(merged, mb.key)
		merged = append(merged, ':')
		merged = append(merged, mb.val...)
		n++
	}
	for _, mb := range defaults {
		if !set[optionGroup(mb.key)] {
			add(mb)
		}
	}
	for _, mb := range own {
		add(mb)
	}
	merged = append(merged, '}')
	out := make(object, 0, len(top)+1)
	for _, mb := range top {
		if mb.key != "options" {
			out = append(out, mb)
		}
	}
	return append(out, member{key: "options", val: merged})
}

// atPath prefixes an error about one job of a workflow with the job's path ("steps[2]",
// "callbacks.on_success"): the message, and the field ("steps[2].type").
func atPath(e *apiError, path string) *apiError {
	e.message = path + ": " + e.message
	field := path
	if f, ok := e.details["field"].(string); ok && f != "" {
		field = path + "." + f
	}
	// The error's other details (a 413's max_bytes and actual_bytes, ...) stay.
	details := make(map[string]any, len(e.details)+1)
	for k, v := range e.details {
		details[k] = v
	}
	details["field"] = field
	e.details = details
	return e
}

// decodeWorkflowJob reads one job of a workflow: an OJS job envelope.
//
// nameKey is the member naming a dag step: "name" in pronto's typed dag, "id" in the binding's form
// (ojs-http-binding.md §14.1), where a step's id is its name, not a job id. "" for other types.
func decodeWorkflowJob(raw json.RawMessage, path string, defaults object, nameKey string, now time.Time) (*enqueueRequest, string, []string, *apiError) {
	top, e := decodeObject(raw, "job")
	if e != nil {
		return nil, "", nil, atPath(e, path)
	}
	var name string
	var after []string
	if dag := nameKey != ""; dag {
		f := path + "." + nameKey
		v, ok := top.get(nameKey)
		if !ok || isNull(v) {
			return nil, "", nil, invalid(f, "%s is required in a dag: the name other steps' depends_on refer to", f)
		}
		if name, e = wantString(v, f); e != nil {
			return nil, "", nil, e
		}
		if name == "" || len(name) > 255 {
			return nil, "", nil, invalid(f, "%s must be 1 to 255 bytes", f)
		}
		if v, ok := top.get("depends_on"); ok && !isNull(v) {
			if after, e = wantKeyList(v, path+".depends_on"); e != nil {
				return nil, "", nil, e
			}
		}
		kept := top[:0:0]
		for _, mb := range top {
			// The binding's step id is no job id: drop it. A typed dag's name stays, as before, an
			// attribute the job keeps.
			if mb.key != "depends_on" && (nameKey != "id" || mb.key != "id") {
				kept = append(kept, mb)
			}
		}
		top = kept
	} else if _, ok := top.get("depends_on"); ok {
		return nil, "", nil, invalid(path+".depends_on", "%s.depends_on is only for workflows of type dag", path)
	}
	req, e := decodeJobMembers(withDefaultOptions(top, defaults), now)
	if e != nil {
		return nil, "", nil, atPath(e, path)
	}
	req.path = path
	if name != "" {
		if e := setStepName(req, name); e != nil {
			return nil, "", nil, atPath(e, path)
		}
	}
	switch {
	case req.job.Opts.Unique != nil:
		return nil, "", nil, invalid(path+".options.unique", "%s: workflow jobs cannot be unique", path)
	case req.job.Opts.Pending:
		return nil, "", nil, invalid(path+".options.pending", "%s: workflow jobs cannot be inserted pending (a step waits for its parents by itself)", path)
	}
	return req, name, after, nil
}

// decodeWorkflow reads a workflow request into a builder, and returns with it the decoded jobs in the
// builder's order (steps, then callbacks).
func decodeWorkflow(body []byte, now time.Time, maxJobs int) (*pronto.Workflow, []*enqueueRequest, *apiError) {
	top, e := decodeBody(body, "workflow")
	if e != nil {
		return nil, nil, e
	}
	str := func(k string) (string, *apiError) {
		if v, ok := top.get(k); ok && !isNull(v) {
			return wantString(v, k)
		}
		return "", nil
	}
	typ, e := str("type")
	if e != nil {
		return nil, nil, e
	}
	nameKey := ""
	switch typ {
	case "":
		// The HTTP binding's form (§14.1): no type, steps with id and depends_on: a dag whose step
		// names are the ids.
		if !bindingDAG(top) {
			return nil, nil, invalid("type", "type is required: chain, group or batch (or dag), unless steps carry id and depends_on (the binding's form)")
		}
		typ, nameKey = "dag", "id"
	case "dag":
		nameKey = "name"
	}
	if !workflowTypes[typ] {
		return nil, nil, invalid("type", "type %q: must be chain, group or batch (or dag)", typ)
	}
	name, e := str("name")
	if e != nil {
		return nil, nil, e
	}
	if len(name) > 255 {
		return nil, nil, invalid("name", "name is longer than 255 bytes")
	}
	var defaults object
	listField := ""
	var list json.RawMessage
	for _, mb := range top {
		switch mb.key {
		case "type", "name", "callbacks":
		case "steps", "jobs":
			if isNull(mb.val) {
				continue
			}
			if listField != "" && listField != mb.key {
				return nil, nil, invalid(mb.key, "give steps or jobs, not both")
			}
			listField, list = mb.key, mb.val
		case "options":
			if isNull(mb.val) {
				continue
			}
			if defaults, e = decodeObject(mb.val, "options"); e != nil {
				e.details = map[string]any{"field": "options"}
				return nil, nil, e
			}
		default:
			if !workflowSystemKeys[mb.key] {
				return nil, nil, invalid(mb.key, "%s is not a field of a workflow (type, name, steps or jobs, callbacks, options)", mb.key)
			}
		}
	}
	if listField == "" {
		want := "jobs"
		if typ == "chain" || typ == "dag" {
			want = "steps"
		}
		return nil, nil, invalid(want, "%s is required: an array of job envelopes", want)
	}
	if jsonKind(list) != "array" {
		return nil, nil, invalid(listField, "%s must be an array of job envelopes, not %s", listField, jsonKind(list))
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(list, &elems); err != nil {
		return nil, nil, invalid(listField, "%s must be an array of job envelopes", listField)
	}
	if len(elems) == 0 {
		return nil, nil, invalid(listField, "%s is empty: a workflow needs at least one job", listField)
	}
	if len(elems) > maxJobs {
		return nil, nil, invalid(listField, "a workflow holds at most %d jobs, got %d", maxJobs, len(elems))
	}
	dag := nameKey != ""
	if !dag && slices.ContainsFunc(elems, isNestedWorkflow) {
		w, reqs, e := decodeNestedWorkflow(typ, name, listField, elems, defaults, now, maxJobs)
		if e != nil {
			return nil, nil, e
		}
		cbReqs, e := decodeCallbacks(top, w, defaults, now)
		if e != nil {
			return nil, nil, e
		}
		return w, append(reqs, cbReqs...), nil
	}
	reqs := make([]*enqueueRequest, 0, len(elems)+3)
	jobs := make([]pronto.WorkflowJob, len(elems))
	w := pronto.NewWorkflow(name)
	seen := map[string]bool{}
	var members []string // the dag's steps that are not callbacks, in order
	for i, el := range elems {
		path := listField + "[" + strconv.Itoa(i) + "]"
		cbType := ""
		if nameKey == "id" {
			var e *apiError
			if el, cbType, e = takeCallbackType(el, path); e != nil {
				return nil, nil, e
			}
		}
		req, stepName, after, e := decodeWorkflowJob(el, path, defaults, nameKey, now)
		if e != nil {
			return nil, nil, e
		}
		reqs = append(reqs, req)
		jobs[i] = pronto.WorkflowJob{OJS: &req.job}
		if !dag {
			continue
		}
		if seen[stepName] {
			return nil, nil, invalid(path+"."+nameKey, "%s.%s %q: another step has that name", path, nameKey, stepName)
		}
		for _, a := range after {
			if !seen[a] {
				return nil, nil, invalid(path+".depends_on", "%s.depends_on: %q is not the name of an earlier step", path, a)
			}
			if !slices.Contains(members, a) {
				return nil, nil, invalid(path+".depends_on", "%s.depends_on: %q is a callback, which no step can wait for", path, a)
			}
		}
		seen[stepName] = true
		if cbType != "" {
			// A callback waits for every job before it: its depends_on must say so.
			if len(after) != len(members) || len(after) != len(slices.Compact(slices.Sorted(slices.Values(after)))) {
				return nil, nil, invalid(path+".depends_on", "%s: a step with options.callback_type %s must depend on every step before it (%d), not %d of them", path, cbType, len(members), len(after))
			}
			w = sdkCallbacks[cbType](w, jobs[i])
			continue
		}
		if sdkCallbacks[stepName] != nil {
			// The response and steps[] name callbacks so: a step of that name would be lost there.
			return nil, nil, invalid(path+"."+nameKey, "%s.%s %q is reserved for the callback of that name: give the step another name", path, nameKey, stepName)
		}
		members = append(members, stepName)
		w.AddJob(stepName, jobs[i], after...)
	}
	if !dag {
		// Steps given ids are listed in id order, not creation order: each records its position.
		for _, req := range reqs {
			if req.job.Opts.ID == "" {
				continue
			}
			for i, req := range reqs {
				if e := setStepName(req, strconv.Itoa(i)); e != nil {
					return nil, nil, atPath(e, listField+"["+strconv.Itoa(i)+"]")
				}
			}
			break
		}
	}
	switch typ {
	case "chain":
		w = pronto.NewChain(name, jobs...)
	case "group":
		w = pronto.NewGroup(name, jobs...)
	case "batch":
		w = pronto.NewBatch(name, jobs...)
	}
	cbReqs, e := decodeCallbacks(top, w, defaults, now)
	if e != nil {
		return nil, nil, e
	}
	return w, append(reqs, cbReqs...), nil
}

// decodeCallbacks reads callbacks {on_success, on_failure, on_complete} and adds them to w.
func decodeCallbacks(top object, w *pronto.Workflow, defaults object, now time.Time) ([]*enqueueRequest, *apiError) {
	raw, ok := top.get("callbacks")
	if !ok || isNull(raw) {
		return nil, nil
	}
	cbs, e := decodeObject(raw, "callbacks")
	if e != nil {
		e.details = map[string]any{"field": "callbacks"}
		return nil, e
	}
	for _, mb := range cbs {
		known := false
		for _, cb := range workflowCallbacks {
			known = known || cb.name == mb.key
		}
		if !known {
			return nil, invalid("callbacks."+mb.key, "callbacks.%s is not a callback (on_success, on_failure, on_complete)", mb.key)
		}
	}
	var reqs []*enqueueRequest
	for _, cb := range workflowCallbacks {
		v, ok := cbs.get(cb.name)
		if !ok || isNull(v) {
			continue
		}
		req, _, _, e := decodeWorkflowJob(v, "callbacks."+cb.name, defaults, "", now)
		if e != nil {
			return nil, e
		}
		reqs = append(reqs, req)
		cb.add(w, pronto.WorkflowJob{OJS: &req.job})
	}
	return reqs, nil
}

// appendWorkflow appends the OJS view of a workflow: its state and its members' progress (callbacks
// are not counted). steps_* and jobs_* carry the same numbers, under the names OJS uses for chains and
// for groups and batches. jobs, the workflow's jobs in creation order (nil when not read), tell when
// it started and what failed in it.
func appendWorkflow(b []byte, wf *pronto.WorkflowInfo, jobs []*pronto.JobRow) []byte {
	completed := int64(wf.Counts[pronto.StateCompleted])
	failed := int64(wf.Counts[pronto.StateDiscarded] + wf.Counts[pronto.StateCancelled])
	rep := reportWorkflow(wf, jobs)
	b = append(b, '{')
	b = appendStringField(b, "id", wf.ID)
	b = appendStringField(b, "name", wf.Name)
	b = appendStringField(b, "type", wf.Type)
	b = appendStringField(b, "state", string(wf.State))
	b = appendIntField(b, "steps_total", int64(wf.Total))
	b = appendIntField(b, "steps_completed", completed)
	b = appendIntField(b, "jobs_total", int64(wf.Total))
	b = appendIntField(b, "jobs_completed", completed)
	b = appendIntField(b, "jobs_failed", failed)
	if wf.State == pronto.WorkflowCancelled {
		// ojs-http-binding.md §14.3: what the cancel stopped and what it found done.
		b = appendIntField(b, "steps_cancelled", int64(wf.Counts[pronto.StateCancelled]))
		b = appendIntField(b, "steps_already_completed", completed)
	}
	b = append(appendKey(b, "counts"), '{')
	for _, st := range store.AllStates {
		b = appendIntField(b, string(st), int64(wf.Counts[st]))
	}
	b = append(b, '}')
	b = appendTimeField(b, "created_at", wf.CreatedAt)
	if !wf.CancelledAt.IsZero() {
		b = appendTimeField(b, "cancelled_at", wf.CancelledAt)
	}
	if !wf.FinishedAt.IsZero() {
		b = appendTimeField(b, "finished_at", wf.FinishedAt)
	}
	b = append(appendKey(b, "metadata"), '{')
	b = appendTimeField(b, "created_at", wf.CreatedAt)
	if !rep.startedAt.IsZero() {
		b = appendTimeField(b, "started_at", rep.startedAt)
	}
	if !wf.FinishedAt.IsZero() {
		b = appendTimeField(b, "completed_at", wf.FinishedAt)
	}
	if !wf.CancelledAt.IsZero() {
		b = appendTimeField(b, "cancelled_at", wf.CancelledAt)
	}
	b = appendIntField(b, "job_count", int64(wf.Total))
	b = appendIntField(b, "completed_count", completed)
	b = appendIntField(b, "failed_count", failed)
	b = rep.appendFailure(b)
	b = append(b, '}')
	return append(b, '}')
}

// checkWorkflowID validates a workflow id taken from a path and writes it in lowercase in place, as
// checkJobID does a job id.
func checkWorkflowID(id *string) *apiError {
	l, ok := normID(*id)
	if !ok {
		return invalid("workflow id", "workflow id %q: must be a UUIDv7 in 8-4-4-4-12 form", *id)
	}
	*id = l
	return nil
}

// workflowError maps an error of the workflow API, with a hint of its own for a missing workflow.
func workflowError(err error, id string) *apiError {
	if errors.Is(err, pronto.ErrDuplicate) {
		return errorf(http.StatusConflict, CodeDuplicate, "a job id given in the workflow belongs to an existing job (%v)", err)
	}
	e := fromClientError(err, "workflow", id)
	if e.status == http.StatusNotFound {
		e.hint = "check the workflow id (the id answered when the workflow was created)"
	}
	return e
}

// POST /ojs/v1/workflows
func (s *Server) createWorkflow(w http.ResponseWriter, r *http.Request) {
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	if len(body) == 0 {
		s.writeError(w, r, invalid("", "the request body is empty: send a workflow {\"type\": \"chain\", \"steps\": [...]}"))
		return
	}
	wf, reqs, e := decodeWorkflow(body, s.decodeNow(r.Context()), s.maxBatch)
	if e != nil {
		s.writeError(w, r, e)
		return
	}
	// Steps and callbacks take their tenant and meet their schema as single enqueues do; one tenant
	// for the whole workflow is WorkflowInsert's rule (ojs-multi-tenancy.md §15.2).
	for _, req := range reqs {
		if e := s.applyTenant(r, req, req.path); e != nil {
			s.writeError(w, r, e)
			return
		}
		if e := s.checkArgs(r.Context(), req, req.path); e != nil {
			s.writeError(w, r, e)
			return
		}
	}
	// Its jobs' job.enqueued come before their other events, as a single enqueue's (enqueueOrder).
	ids := make([]string, 0, len(reqs))
	var given []string
	for _, req := range reqs {
		if req.job.Opts.ID == "" { // as beginInsert
			req.job.Opts.ID = uuidv7.New()
			ids = append(ids, req.job.Opts.ID)
		} else {
			given = append(given, req.job.Opts.ID)
		}
	}
	s.order.begin(ids)
	s.order.beginGiven(given)
	defer s.order.end(append(ids, given...))
	res, err := s.client.WorkflowInsert(r.Context(), wf)
	if err != nil {
		s.writeError(w, r, workflowError(err, wf.ID()))
		return
	}
	w.Header().Set("Location", "/ojs/v1/workflows/"+res.Workflow.ID)
	b := getBuf()
	*b = append(*b, `{"workflow":`...)
	ordered := make([]*pronto.JobRow, len(res.Order))
	for i, step := range res.Order {
		ordered[i] = res.Jobs[step]
	}
	*b = appendWorkflow(*b, res.Workflow, ordered)
	*b = appendSteps((*b)[:len(*b)-1], ordered)
	*b = append(*b, '}')
	*b = append(appendKey(*b, "jobs"), '[')
	for i, step := range res.Order {
		j := res.Jobs[step]
		if i > 0 {
			*b = append(*b, ',')
		}
		*b = appendJob(*b, j)
		s.enqueuedEvent(j)
	}
	*b = append(*b, ']', '}')
	writeBuf(w, http.StatusCreated, b)
}

// GET /ojs/v1/workflows/{id}: the workflow with its steps[] (ojs-http-binding.md §14.2).
func (s *Server) getWorkflow(w http.ResponseWriter, r *http.Request, id string) {
	wf, ok := s.loadWorkflow(w, r, &id)
	if !ok {
		return
	}
	jobs, err := s.client.WorkflowJobs(r.Context(), id)
	if err != nil {
		s.writeError(w, r, workflowError(err, id))
		return
	}
	writeWorkflowSteps(w, wf, jobs, true)
}

// writeWorkflowSteps answers wf with its report (started_at, what failed) and its steps[], as
// ojs-http-binding.md §14.2 shapes a workflow; with read false (the jobs could not be read), the
// counts only.
func writeWorkflowSteps(w http.ResponseWriter, wf *pronto.WorkflowInfo, jobs []*pronto.JobRow, read bool) {
	b := getBuf()
	*b = append(*b, `{"workflow":`...)
	if !read {
		*b = appendWorkflow(*b, wf, nil)
		*b = append(*b, '}')
		writeBuf(w, http.StatusOK, b)
		return
	}
	orderSteps(wf.Type, jobs)
	*b = appendWorkflow(*b, wf, jobs)
	*b = appendSteps((*b)[:len(*b)-1], jobs)
	*b = append(*b, '}', '}')
	writeBuf(w, http.StatusOK, b)
}

// loadWorkflow checks id and reads the workflow, or writes the error and reports false.
func (s *Server) loadWorkflow(w http.ResponseWriter, r *http.Request, id *string) (*pronto.WorkflowInfo, bool) {
	if e := checkWorkflowID(id); e != nil {
		s.writeError(w, r, e)
		return nil, false
	}
	wf, err := s.client.WorkflowGet(r.Context(), *id)
	if err != nil {
		s.writeError(w, r, workflowError(err, *id))
		return nil, false
	}
	return wf, true
}

// GET /ojs/v1/workflows/{id}/jobs: the workflow and every job of it (steps, then callbacks, in the
// order they were created).
func (s *Server) workflowJobs(w http.ResponseWriter, r *http.Request, id string) {
	ctx := r.Context()
	wf, ok := s.loadWorkflow(w, r, &id)
	if !ok {
		return
	}
	jobs, err := s.client.WorkflowJobs(ctx, id)
	if err != nil {
		s.writeError(w, r, workflowError(err, id))
		return
	}
	orderSteps(wf.Type, jobs)
	b := getBuf()
	*b = append(*b, `{"workflow":`...)
	*b = appendWorkflow(*b, wf, jobs)
	*b = append(appendKey(*b, "jobs"), '[')
	for i, j := range jobs {
		if i > 0 {
			*b = append(*b, ',')
		}
		*b = appendJob(*b, j)
	}
	*b = append(*b, ']', '}')
	writeBuf(w, http.StatusOK, b)
}

// DELETE /ojs/v1/workflows/{id}: cancels every job of a running workflow that has not finished. A
// workflow that is already completed, failed or cancelled answers 409, as ojs-workflows.md §11.3
// requires: the store refuses a finished one in the same step as the cancel, so a step finishing
// meanwhile cannot turn a completed workflow into a cancelled one.
func (s *Server) cancelWorkflow(w http.ResponseWriter, r *http.Request, id string) {
	ctx := r.Context()
	wf, ok := s.loadWorkflow(w, r, &id)
	if !ok {
		return
	}
	if wf.State == pronto.WorkflowCancelled {
		// Cancelled stays cancelled: this answer cannot go stale.
		s.writeError(w, r, workflowFinished(id, wf.State))
		return
	}
	wf, err := s.client.WorkflowCancel(ctx, id)
	var done *store.WorkflowFinishedError
	switch {
	case errors.As(err, &done):
		s.writeError(w, r, workflowFinished(id, done.State))
	case err != nil:
		s.writeError(w, r, workflowError(err, id))
	default:
		// The cancel is done; its answer shows the workflow as GET would (when it started, what had
		// failed, each step's state). A failed read of the jobs leaves only the counts, not an error
		// for a cancel that took effect.
		jobs, err := s.client.WorkflowJobs(ctx, id)
		writeWorkflowSteps(w, wf, jobs, err == nil)
	}
}

// workflowFinished is the 409 of a cancel of a workflow already in state st.
func workflowFinished(id string, st pronto.WorkflowState) *apiError {
	e := conflict("workflow %s is already %s", id, st)
	e.details = map[string]any{"workflow_id": id, "current_state": string(st)}
	return e
}
