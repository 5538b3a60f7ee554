package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"

	"github.com/pronto-jobs/pronto"
)

// ownUniqueConflict is the 409 of an atomic insert of jobs refused because two of its own jobs
// share a unique key, or nil when err is not that. The store names the earlier job as the key's
// holder, but it was rolled back with the others: an existing_job_id naming it would send the
// client to a job that does not exist (docs/unique-jobs.md tells clients to follow it).
func (s *Server) ownUniqueConflict(ctx context.Context, err error, jobs []pronto.OJSJob) *apiError {
	var uce *pronto.UniqueConflictError
	if !errors.As(err, &uce) || uce.ExistingID == "" {
		return nil
	}
	i := slices.IndexFunc(jobs, func(j pronto.OJSJob) bool { return j.Opts.ID == uce.ExistingID })
	if i < 0 {
		return nil
	}
	if _, err := s.store.GetJob(ctx, uce.ExistingID); err == nil {
		return nil // stored after all (an id the client gave): an existing job the client can read
	}
	return batchUniqueConflict(i, uniqueRival(jobs, i), uce.Key)
}

// batchUniqueConflict is the 409 of jobs[i] and jobs[j] of one request sharing a unique key that
// jobs[j] may not share (on_conflict reject). j is -1 when it could not be told.
func batchUniqueConflict(i, j int, key string) *apiError {
	holder := "jobs[" + strconv.Itoa(i) + "]"
	if j < 0 {
		e := errorf(http.StatusConflict, CodeDuplicate,
			"%s and a later job of the request share a unique key, and on_conflict is reject: nothing was stored", holder)
		e.details = map[string]any{"field": "jobs", "existing_job_index": i, "uniqueness_key": key}
		return e
	}
	field := "jobs[" + strconv.Itoa(j) + "]"
	e := errorf(http.StatusConflict, CodeDuplicate,
		"%s has the unique key of %s of the same request, and on_conflict is reject: nothing was stored", field, holder)
	e.details = map[string]any{"field": field, "index": j, "existing_job_index": i, "uniqueness_key": key}
	return e
}

// uniqueRival returns the index of the job after jobs[i] that the store refused for sharing its
// unique key, or -1. The fingerprint is the client's to compute (and insert middleware may change
// a job), so this takes the first later job with jobs[i]'s type and a rejecting policy, preferring
// one with the same dimensions and, where comparable as sent, the same values.
func uniqueRival(jobs []pronto.OJSJob, i int) int {
	loose := -1
	for k := i + 1; k < len(jobs); k++ {
		u := jobs[k].Opts.Unique
		if jobs[k].Kind != jobs[i].Kind || u == nil ||
			(u.OnConflict != "" && u.OnConflict != pronto.UniqueReject) {
			continue
		}
		if sameUniqueDims(&jobs[i], &jobs[k]) {
			return k
		}
		if loose < 0 {
			loose = k
		}
	}
	return loose
}

// sameUniqueDims reports whether a and b fingerprint the same dimensions with values that look
// alike: the queue, and the args when whole (compared compacted; key order and number spelling,
// which the fingerprint ignores, make them differ here, leaving the looser match).
func sameUniqueDims(a, b *pronto.OJSJob) bool {
	ua, ub := a.Opts.Unique, b.Opts.Unique
	if ua == nil || ua.ByQueue != ub.ByQueue || ua.ByArgs != ub.ByArgs ||
		!slices.Equal(ua.ArgsKeys, ub.ArgsKeys) || !slices.Equal(ua.MetaKeys, ub.MetaKeys) {
		return false
	}
	if ua.ByQueue && a.Opts.Queue != b.Opts.Queue {
		return false
	}
	if ua.ByArgs && len(ua.ArgsKeys) == 0 {
		var ca, cb bytes.Buffer
		if json.Compact(&ca, a.Args) != nil || json.Compact(&cb, b.Args) != nil || !bytes.Equal(ca.Bytes(), cb.Bytes()) {
			return false
		}
	}
	return true
}
