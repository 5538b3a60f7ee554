package server

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/pronto-jobs/pronto"
)

// Nested workflows (ojs-workflows.md §10): a chain's steps, and a group's or batch's jobs, may be
// workflows themselves ({"type": "group", "jobs": [...]}), as the official JavaScript SDK sends
// chain(a, group(b, c), d). Such a workflow is stored as the dag it stands for: a nested chain's
// first jobs wait for what came before it and its last job is what comes after waits for; a nested
// group's jobs all wait for what came before it, and what comes after waits for all of them. The
// outermost workflow keeps its type. Its steps are named by their position: "1.0" is the first job
// of the workflow at position 1.

// nestedMaxDepth is how many levels workflows nest, the outermost one included (§10.2: an
// implementation SHOULD support at least 3, and MUST refuse deeper ones when they are created).
const nestedMaxDepth = 4

// isNestedWorkflow reports whether a workflow's element is a workflow rather than a job: a type
// of chain, group or batch with steps or jobs, and no args (a job's type may be "chain" too).
func isNestedWorkflow(raw json.RawMessage) bool {
	top, e := decodeObject(raw, "job")
	if e != nil {
		return false
	}
	v, ok := top.get("type")
	if !ok {
		return false
	}
	var typ string
	if json.Unmarshal(v, &typ) != nil || (typ != "chain" && typ != "group" && typ != "batch") {
		return false
	}
	_, args := top.get("args")
	_, steps := top.get("steps")
	_, jobs := top.get("jobs")
	return !args && (steps || jobs)
}

// nester flattens a workflow with nested workflows into a dag.
type nester struct {
	w        *pronto.Workflow
	reqs     []*enqueueRequest
	defaults object
	now      time.Time
	maxJobs  int
}

// nestedBuilders start the outermost workflow of each type: it keeps its type (§10.1, §12.4), though
// its steps are wired as a dag.
var nestedBuilders = map[string]func(name string, jobs ...pronto.WorkflowJob) *pronto.Workflow{
	"chain": pronto.NewChain,
	"group": pronto.NewGroup,
	"batch": pronto.NewBatch,
}

// decodeNestedWorkflow reads the elements of a workflow of type typ that nests workflows (under
// field listField of the request) into a workflow of that type named name, wired as a dag.
func decodeNestedWorkflow(typ, name, listField string, elems []json.RawMessage, defaults object, now time.Time, maxJobs int) (*pronto.Workflow, []*enqueueRequest, *apiError) {
	n := &nester{w: nestedBuilders[typ](name), defaults: defaults, now: now, maxJobs: maxJobs}
	if _, e := n.list(typ, elems, listField, "", 1, nil); e != nil {
		return nil, nil, e
	}
	return n.w, n.reqs, nil
}

// list adds the elements of a workflow of type typ at path, at nesting level depth, whose first
// jobs wait for the steps entry, and returns the steps that end it: a chain's last element's, or
// every element's for a group or batch.
func (n *nester) list(typ string, elems []json.RawMessage, path, prefix string, depth int, entry []string) ([]string, *apiError) {
	var exits []string
	deps := entry
	for i, el := range elems {
		elPath := path + "[" + strconv.Itoa(i) + "]"
		name := prefix + strconv.Itoa(i)
		var out []string
		var e *apiError
		if isNestedWorkflow(el) {
			out, e = n.nested(el, elPath, name, depth+1, deps)
		} else {
			out, e = n.job(el, elPath, name, deps)
		}
		if e != nil {
			return nil, e
		}
		if typ == "chain" {
			deps = out
		} else {
			exits = append(exits, out...)
		}
	}
	if typ == "chain" {
		return deps, nil
	}
	return exits, nil
}

// job adds one job, named name, waiting for the steps after.
func (n *nester) job(raw json.RawMessage, path, name string, after []string) ([]string, *apiError) {
	if len(n.reqs) == n.maxJobs {
		return nil, invalid(path, "a workflow holds at most %d jobs, nested ones included", n.maxJobs)
	}
	req, _, _, e := decodeWorkflowJob(raw, path, n.defaults, "", n.now)
	if e != nil {
		return nil, e
	}
	if e := setStepName(req, name); e != nil {
		return nil, atPath(e, path)
	}
	n.reqs = append(n.reqs, req)
	n.w.AddJob(name, pronto.WorkflowJob{OJS: &req.job}, after...)
	return []string{name}, nil
}

// nested adds the workflow at path, its steps named after prefix name.
func (n *nester) nested(raw json.RawMessage, path, name string, depth int, entry []string) ([]string, *apiError) {
	if depth > nestedMaxDepth {
		return nil, invalid(path, "%s: workflows nest at most %d levels deep, the outermost one included", path, nestedMaxDepth)
	}
	top, e := decodeObject(raw, "workflow")
	if e != nil {
		return nil, atPath(e, path)
	}
	var typ, field string
	var list json.RawMessage
	for _, mb := range top {
		switch mb.key {
		case "type":
			_ = json.Unmarshal(mb.val, &typ) // isNestedWorkflow read it
		case "name":
		case "steps", "jobs":
			if field != "" {
				return nil, invalid(path+"."+mb.key, "%s: give steps or jobs, not both", path)
			}
			field, list = mb.key, mb.val
		case "callbacks", "options":
			return nil, invalid(path+"."+mb.key, "%s.%s: a nested workflow takes no %s (give them to the outermost workflow or to its jobs)", path, mb.key, mb.key)
		default:
			// Server-set attributes (an SDK echoing a workflow back, §10.3's example) are ignored
			// here as at the top level.
			if !workflowSystemKeys[mb.key] {
				return nil, invalid(path+"."+mb.key, "%s.%s is not a field of a nested workflow (type, name, steps or jobs)", path, mb.key)
			}
		}
	}
	listPath := path + "." + field
	var elems []json.RawMessage
	if jsonKind(list) != "array" || json.Unmarshal(list, &elems) != nil {
		return nil, invalid(listPath, "%s must be an array of job envelopes or workflows", listPath)
	}
	if len(elems) == 0 {
		return nil, invalid(listPath, "%s is empty: a workflow needs at least one job", listPath)
	}
	return n.list(typ, elems, listPath, name+".", depth, entry)
}
