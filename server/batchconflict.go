package server

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/pronto-jobs/pronto"
)

// ownUniqueConflict is the 409 of an atomic insert refused because two of its own jobs share a
// unique key (the client tells which: pronto.BatchUniqueConflictError), or nil when err is not that.
// The store names the earlier job as the key's holder, but it was rolled back with the others: an
// existing_job_id naming it would send the client to a job that does not exist
// (docs/unique-jobs.md tells clients to follow it), so both jobs are named by index.
func ownUniqueConflict(err error) *apiError {
	var bce *pronto.BatchUniqueConflictError
	if !errors.As(err, &bce) {
		return nil
	}
	return batchUniqueConflict(bce.HolderIndex, bce.Index, bce.Key)
}

// batchUniqueConflict is the 409 of jobs[j] of one request refused for sharing the unique key of
// jobs[i] of the same request (on_conflict reject).
func batchUniqueConflict(i, j int, key string) *apiError {
	field := "jobs[" + strconv.Itoa(j) + "]"
	e := errorf(http.StatusConflict, CodeDuplicate,
		"%s has the unique key of jobs[%d] of the same request, and on_conflict is reject: nothing was stored", field, i)
	e.details = map[string]any{"field": field, "index": j, "existing_job_index": i, "uniqueness_key": key}
	return e
}
