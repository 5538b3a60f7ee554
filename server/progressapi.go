package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/pronto-jobs/pronto"
)

// progressRequest is the body of PUT /ojs/v1/jobs/{id}/progress (ojs-progress.md 6.1).
type progressRequest struct {
	Progress   *float64        `json:"progress"`
	Data       json.RawMessage `json:"data"`
	Checkpoint json.RawMessage `json:"checkpoint"`
	// The claim the report is about, as an ack names it (all optional; pronto's addition).
	WorkerID   string `json:"worker_id"`
	ClaimToken string `json:"claim_token"`
	Attempt    int    `json:"attempt"`
}

// PUT /ojs/v1/jobs/{id}/progress: an OJS worker reports progress on an active job. The report is
// accepted (204) whatever the job's state, and recorded only while the job is active; it also
// extends the lease of the worker holding the job, as a heartbeat would (ojs-progress.md 6.3).
// Like an ack, it counts only for the claim its sender holds: a report naming a claim that is no
// longer the job's (or naming none, when an earlier claim of the job lost its lease) is refused
// with 409 stale_claim, and neither writes the progress nor extends the new claim's lease.
func (s *Server) putProgress(w http.ResponseWriter, r *http.Request, id string) {
	if e := checkJobID(&id, "job id"); e != nil {
		s.writeError(w, r, e)
		return
	}
	req, ok := readRequest(s, w, r, "progress report", func(body []byte) (progressRequest, *apiError) {
		var p progressRequest
		dec := json.NewDecoder(bytes.NewReader(body))
		if err := dec.Decode(&p); err != nil {
			var ute *json.UnmarshalTypeError
			if errors.As(err, &ute) && ute.Field == "progress" { // the one typed field
				return p, invalid("progress", "\"progress\" must be a number from 0 to 1, not a JSON %s", ute.Value)
			}
			return p, invalid("", "progress report: %v (send {\"progress\": 0.47, \"data\": {...}})", err)
		}
		if bytes.Equal(bytes.TrimSpace(p.Data), []byte("null")) {
			p.Data = nil
		}
		if bytes.Equal(bytes.TrimSpace(p.Checkpoint), []byte("null")) {
			p.Checkpoint = nil
		}
		if p.Progress == nil && p.Data == nil && p.Checkpoint == nil {
			return p, invalid("progress", "a progress report needs \"progress\" (a number from 0 to 1), \"data\" (an object), \"checkpoint\" (an object) or some of them")
		}
		if p.Data != nil && bytes.TrimSpace(p.Data)[0] != '{' {
			return p, invalid("data", "\"data\" must be a JSON object")
		}
		if p.Checkpoint != nil && bytes.TrimSpace(p.Checkpoint)[0] != '{' {
			return p, invalid("checkpoint", "\"checkpoint\" must be a JSON object")
		}
		// Stored compact on every store alike (PostgreSQL's jsonb would compact it anyway), so the
		// progress stream can write it on one SSE data line.
		p.Data, p.Checkpoint = compactJSON(p.Data), compactJSON(p.Checkpoint)
		if len(p.WorkerID) > maxWorkerIDLen {
			return p, invalid("worker_id", "worker_id is longer than %d bytes", maxWorkerIDLen)
		}
		if p.Attempt < 0 {
			return p, invalid("attempt", "attempt must be a positive integer")
		}
		return p, nil
	})
	if !ok {
		return
	}
	j, err := s.client.RemoteProgress(r.Context(), pronto.RemoteProgressParams{
		ID: id, WorkerID: req.WorkerID, ClaimToken: req.ClaimToken, Attempt: req.Attempt,
		Value: req.Progress, Data: req.Data, Checkpoint: req.Checkpoint,
	})
	if err != nil {
		s.writeError(w, r, transitionError(err, "report progress of", id))
		return
	}
	// Any remote worker's claim, a worker that fetched without worker_id ("") too; a job this
	// server's own Go workers run keeps the lease they extend.
	if j.State == pronto.StateActive && j.WorkerID != s.client.ID() {
		if _, err := s.client.RemoteHeartbeat(r.Context(), j.WorkerID, []string{id}, jobLease(j, 0, time.Now())); err != nil {
			s.log.Warn("pronto serve: the heartbeat of a progress report failed", "job", id, "err", err)
		}
	}
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusNoContent)
}

// GET /ojs/v1/jobs/{id}/progress: the progress of the job's latest run, with null values when it
// reported none (ojs-progress.md 7.1), and the job's last_checkpoint when one was saved.
func (s *Server) getProgress(w http.ResponseWriter, r *http.Request, id string) {
	j := s.lookupJob(w, r, &id)
	if j == nil {
		return
	}
	h := w.Header()
	h.Set("Cache-Control", "no-cache")
	b := getBuf()
	*b = append(*b, '{')
	*b = appendStringField(*b, "job_id", j.ID)
	*b = appendStringField(*b, "state", string(j.State))
	*b = appendProgress(*b, j.Progress, "data")
	if len(j.LastCheckpoint) > 0 {
		*b = appendRawField(*b, "last_checkpoint", j.LastCheckpoint)
	}
	*b = append(*b, '}')
	if p := j.Progress; p != nil {
		if p.Value != nil {
			h.Set("X-OJS-Progress", strconv.FormatFloat(*p.Value, 'f', -1, 64))
		}
		h.Set("Last-Modified", p.UpdatedAt.UTC().Format(http.TimeFormat))
	}
	writeBuf(w, http.StatusOK, b)
}

// appendProgress appends "progress", the data under dataKey, and "updated_at" (for the progress
// endpoint) or "progress_updated_at" (in a job view): null values when p is nil.
func appendProgress(b []byte, p *pronto.JobProgress, dataKey string) []byte {
	updatedKey := "updated_at"
	if dataKey != "data" {
		updatedKey = "progress_updated_at"
	}
	if p == nil {
		b = appendRawField(b, "progress", []byte("null"))
		b = appendRawField(b, dataKey, []byte("null"))
		return appendRawField(b, updatedKey, []byte("null"))
	}
	if p.Value != nil {
		b = strconv.AppendFloat(appendKey(b, "progress"), *p.Value, 'f', -1, 64)
	} else {
		b = appendRawField(b, "progress", []byte("null"))
	}
	if len(p.Data) > 0 {
		b = appendRawField(b, dataKey, p.Data)
	} else {
		b = appendRawField(b, dataKey, []byte("null"))
	}
	return appendTimeField(b, updatedKey, p.UpdatedAt)
}

// withCheckpoints sets LastCheckpoint on the fetched jobs that are retries (attempt > 1), so that an
// OJS worker finds the checkpoint of an earlier attempt in the job it fetches (ojs-progress.md 6.4):
// one progress read per retried job, none for first attempts. A failed read leaves the job without.
func (s *Server) withCheckpoints(ctx context.Context, jobs []*pronto.JobRow) {
	for _, j := range jobs {
		if j.Attempt <= 1 {
			continue
		}
		cp, err := s.client.JobLastCheckpoint(ctx, j.ID)
		if err != nil {
			s.log.Warn("pronto serve: reading the checkpoint of a fetched job failed", "job", j.ID, "err", err)
			continue
		}
		j.LastCheckpoint = cp
	}
}

// GET /ojs/v1/workflows/{id}/progress: the workflow's aggregate progress and each step's
// (ojs-progress.md 9.2): {"workflow_id", "type", "state", "progress", "steps": [{"id", "job_id",
// "type", "state", "progress", "data"?}]}.
func (s *Server) workflowProgress(w http.ResponseWriter, r *http.Request, id string) {
	if e := checkWorkflowID(&id); e != nil {
		s.writeError(w, r, e)
		return
	}
	wp, err := s.client.WorkflowProgress(r.Context(), id)
	if err != nil {
		s.writeError(w, r, workflowError(err, id))
		return
	}
	orderSteps(wp.Workflow.Type, wp.Steps)
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-OJS-Progress", strconv.FormatFloat(wp.Value, 'f', -1, 64))
	b := getBuf()
	*b = append(*b, '{')
	*b = appendStringField(*b, "workflow_id", wp.Workflow.ID)
	*b = appendStringField(*b, "type", wp.Workflow.Type)
	*b = appendStringField(*b, "state", string(wp.Workflow.State))
	*b = strconv.AppendFloat(appendKey(*b, "progress"), wp.Value, 'f', -1, 64)
	*b = append(appendKey(*b, "steps"), '[')
	for i, j := range wp.Steps {
		if i > 0 {
			*b = append(*b, ',')
		}
		*b = append(*b, '{')
		*b = appendStringField(*b, "id", stepID(j, i))
		*b = appendStringField(*b, "job_id", j.ID)
		*b = appendStringField(*b, "type", j.Kind)
		*b = appendStringField(*b, "state", string(j.State))
		if p := j.Progress; p != nil && p.Value != nil {
			*b = strconv.AppendFloat(appendKey(*b, "progress"), *p.Value, 'f', -1, 64)
		} else {
			*b = appendRawField(*b, "progress", []byte("null"))
		}
		if p := j.Progress; p != nil && len(p.Data) > 0 {
			*b = appendRawField(*b, "data", p.Data)
		}
		*b = append(*b, '}')
	}
	*b = append(*b, ']', '}')
	writeBuf(w, http.StatusOK, b)
}

// compactJSON returns raw, valid JSON, without the white space between its tokens (nil stays nil).
func compactJSON(raw json.RawMessage) json.RawMessage {
	if raw == nil || !bytes.ContainsAny(raw, " \t\r\n") {
		return raw
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return raw
	}
	return b.Bytes()
}
