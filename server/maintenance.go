package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/pronto-jobs/pronto/internal/isodur"
	"github.com/pronto-jobs/pronto/store"
)

// Maintenance mode (ojs-admin-api.md 12.1). Enabling it pauses every queue that is not paused (the
// queues with jobs or a pause flag in the store, and the queues this server's client works) and
// records which, in the store's settings, so that disabling resumes exactly those; while it is on,
// every server's fetch answers no jobs (whatever the queue), and inserts go on. Every client's
// leader holds the promotion of due scheduled and retryable jobs and the cron triggers while the
// setting is there (pronto.Client, maintenance.go in the root package), and repair (handlers.go)
// does not promote either.

// maintenanceKey is the setting that holds the state.
const maintenanceKey = store.MaintenanceSetting

// MaintenanceRecheck is how often a server rereads the maintenance state for its fetches: mode
// changes made through another server apply here within it (through this server at once).
const MaintenanceRecheck = 2 * time.Second

// maintenanceState is the stored state while maintenance is on.
type maintenanceState struct {
	Reason       string     `json:"reason,omitempty"`
	EnabledAt    time.Time  `json:"enabled_at"`
	EstimatedEnd *time.Time `json:"estimated_end,omitempty"`
	// PausedQueues are the queues enabling paused, which disabling resumes.
	PausedQueues []string `json:"paused_queues"`
	// Enables counts the enablings of this spell: each changes the stored state, even one with
	// nothing new, so that a disabling that read the state before it loses its removal and runs
	// again, resuming what it paused.
	Enables int64 `json:"enables,omitempty"`
}

// maintenanceCache is this server's view of the mode for fetches. The zero value is ready.
type maintenanceCache struct {
	mu sync.Mutex
	at time.Time
	on bool
}

// maintenanceOn reports whether maintenance mode is on, rereading it at most every
// MaintenanceRecheck. A store that keeps no settings has no maintenance mode; a failed read keeps the
// last answer.
func (s *Server) maintenanceOn(ctx context.Context) bool {
	ss, ok := s.store.(store.SettingStore)
	if !ok {
		return false
	}
	c := &s.maintenance
	c.mu.Lock()
	if time.Since(c.at) < MaintenanceRecheck {
		on := c.on
		c.mu.Unlock()
		return on
	}
	c.mu.Unlock()
	v, err := ss.GetSetting(ctx, maintenanceKey)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		s.log.Warn("pronto serve: reading the maintenance mode failed", "err", err)
		return c.on
	}
	c.at, c.on = time.Now(), v != nil
	return c.on
}

// setMaintenanceCache records a mode change made through this server.
func (s *Server) setMaintenanceCache(on bool) {
	s.maintenance.mu.Lock()
	s.maintenance.at, s.maintenance.on = time.Now(), on
	s.maintenance.mu.Unlock()
}

// loadMaintenance reads the stored state (nil when off), or writes the error.
func (s *Server) loadMaintenance(w http.ResponseWriter, r *http.Request) (store.SettingStore, *maintenanceState, bool) {
	ss := s.settings(w, r, "maintenance mode")
	if ss == nil {
		return nil, nil, false
	}
	v, err := ss.GetSetting(r.Context(), maintenanceKey)
	if err != nil {
		s.writeError(w, r, fromClientError(err, "maintenance mode", ""))
		return nil, nil, false
	}
	if v == nil {
		return ss, nil, true
	}
	var st maintenanceState
	if err := json.Unmarshal(v, &st); err != nil {
		s.writeError(w, r, errorf(http.StatusInternalServerError, "internal_error", "the stored maintenance state does not decode: %v", err))
		return nil, nil, false
	}
	return ss, &st, true
}

func maintenanceView(st *maintenanceState) map[string]any {
	if st == nil {
		return map[string]any{"maintenance": false}
	}
	out := map[string]any{"maintenance": true, "enabled_at": st.EnabledAt.UTC().Format(time.RFC3339Nano),
		"paused_queues": st.PausedQueues, "reason": st.Reason, "estimated_end": nil}
	if st.EstimatedEnd != nil {
		out["estimated_end"] = st.EstimatedEnd.UTC().Format(time.RFC3339Nano)
	}
	return out
}

// GET /ojs/v1/admin/system/maintenance: {"maintenance": false} or {"maintenance": true, "reason",
// "enabled_at", "estimated_end", "paused_queues"}.
func (s *Server) adminGetMaintenance(w http.ResponseWriter, r *http.Request) {
	_, st, ok := s.loadMaintenance(w, r)
	if !ok {
		return
	}
	s.setMaintenanceCache(st != nil)
	writeJSONValue(w, http.StatusOK, maintenanceView(st))
}

// maintenanceRequest is the body of POST /ojs/v1/admin/system/maintenance.
type maintenanceRequest struct {
	Enabled           *bool  `json:"enabled"`
	Reason            string `json:"reason"`
	EstimatedDuration string `json:"estimated_duration"`
}

// POST /ojs/v1/admin/system/maintenance {"enabled", "reason"?, "estimated_duration"?}: turns the
// mode on (pausing the queues not paused, recorded) or off (resuming those). Enabling again updates
// the reason and estimate and pauses queues that appeared since.
func (s *Server) adminSetMaintenance(w http.ResponseWriter, r *http.Request) {
	var estimate time.Duration
	req, ok := readRequest(s, w, r, "maintenance request", func(body []byte) (maintenanceRequest, *apiError) {
		var q maintenanceRequest
		if err := json.NewDecoder(bytes.NewReader(body)).Decode(&q); err != nil {
			return q, invalid("", "maintenance request: %v (send {\"enabled\": true, \"reason\": \"...\", \"estimated_duration\": \"PT30M\"})", err)
		}
		if q.Enabled == nil {
			return q, invalid("enabled", "\"enabled\" (true or false) is required")
		}
		if q.EstimatedDuration != "" {
			d, err := isodur.Parse(q.EstimatedDuration)
			if err != nil || d <= 0 {
				return q, invalid("estimated_duration", "estimated_duration %q must be a positive ISO 8601 duration such as \"PT30M\"", q.EstimatedDuration)
			}
			estimate = d
		}
		return q, nil
	})
	if !ok {
		return
	}
	ss := s.settings(w, r, "maintenance mode")
	if ss == nil {
		return
	}
	if *req.Enabled {
		s.enableMaintenance(w, r, ss, req.Reason, estimate)
	} else {
		s.disableMaintenance(w, r, ss)
	}
}

// queueFailure is a queue's pause or resume that failed within a change of the maintenance state.
type queueFailure struct {
	queue string
	err   error
}

func (e *queueFailure) Error() string { return e.queue + ": " + e.err.Error() }
func (e *queueFailure) Unwrap() error { return e.err }

// decodeMaintenance reads the stored state (nil: off).
func decodeMaintenance(v json.RawMessage) (*maintenanceState, error) {
	if v == nil {
		return nil, nil
	}
	var st maintenanceState
	if err := json.Unmarshal(v, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// writeMaintenanceError answers a failed change of the maintenance state.
func (s *Server) writeMaintenanceError(w http.ResponseWriter, r *http.Request, err error) {
	var qf *queueFailure
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &qf):
		s.writeError(w, r, fromClientError(qf.err, "queue", qf.queue))
	case errors.As(err, &se), errors.As(err, &te):
		s.writeError(w, r, errorf(http.StatusInternalServerError, "internal_error", "the stored maintenance state does not decode: %v", err))
	default:
		s.writeError(w, r, fromClientError(err, "maintenance mode", ""))
	}
}

// disableMaintenance resumes the queues the stored state records, then removes the state, if it is
// still the state whose queues it resumed: when a concurrent enabling changed it meanwhile, every
// queue it records is resumed again on the next try (one resumed on the first try may have been
// paused again since).
func (s *Server) disableMaintenance(w http.ResponseWriter, r *http.Request, ss store.SettingStore) {
	ctx := r.Context()
	now := time.Now().UTC()
	resumed := []string{}
	wasOn := false
	err := store.UpdateSetting(ctx, ss, maintenanceKey, func(old json.RawMessage) (json.RawMessage, error) {
		st, err := decodeMaintenance(old)
		if err != nil || st == nil {
			return nil, err
		}
		wasOn = true
		for _, q := range st.PausedQueues {
			if err := s.client.QueueResume(ctx, q); err != nil {
				return nil, &queueFailure{q, err} // the state stays: disabling again resumes the rest
			}
			if !slices.Contains(resumed, q) {
				resumed = append(resumed, q)
			}
		}
		return nil, nil
	})
	if err != nil {
		s.writeMaintenanceError(w, r, err)
		return
	}
	s.setMaintenanceCache(false)
	out := map[string]any{"maintenance": false, "resumed_queues": resumed}
	if wasOn {
		out["disabled_at"] = now.Format(time.RFC3339Nano)
	}
	writeJSONValue(w, http.StatusOK, out)
}

// enableMaintenance records the queues not paused in the stored state, added to those it records
// already (whoever enabled the mode), then pauses them. It records first: a failure in between
// leaves a state whose disabling resumes them, and an enabling through another server that finds
// them paused already finds them recorded. A disabling through another server that removed the
// state between the record and the pauses would leave them paused with the mode off: the state is
// read again after the pauses, and the queues it no longer records are resumed, the enabling
// answering 409.
func (s *Server) enableMaintenance(w http.ResponseWriter, r *http.Request, ss store.SettingStore, reason string, estimate time.Duration) {
	ctx := r.Context()
	now := time.Now().UTC()
	qs, err := s.client.QueueList(ctx)
	if err != nil {
		s.writeError(w, r, fromClientError(err, "queue", ""))
		return
	}
	known := map[string]bool{}
	var toPause []string
	for _, q := range qs {
		known[q.Name] = true
		if !q.Paused {
			toPause = append(toPause, q.Name)
		}
	}
	for name := range s.client.Stats().Queues {
		if !known[name] {
			known[name] = true
			toPause = append(toPause, name)
		}
	}
	sort.Strings(toPause)
	var st *maintenanceState
	err = store.UpdateSetting(ctx, ss, maintenanceKey, func(old json.RawMessage) (json.RawMessage, error) {
		var err error
		if st, err = decodeMaintenance(old); err != nil {
			return nil, err
		}
		if st == nil {
			st = &maintenanceState{EnabledAt: now, PausedQueues: []string{}}
		}
		st.Reason = reason
		st.Enables++
		st.EstimatedEnd = nil
		if estimate > 0 {
			end := now.Add(estimate)
			st.EstimatedEnd = &end
		}
		for _, q := range toPause {
			if !slices.Contains(st.PausedQueues, q) {
				st.PausedQueues = append(st.PausedQueues, q)
			}
		}
		return json.Marshal(st)
	})
	if err != nil {
		s.writeMaintenanceError(w, r, err)
		return
	}
	s.setMaintenanceCache(true)
	for _, q := range toPause {
		if err := s.client.QueuePause(ctx, q); err != nil {
			s.writeError(w, r, fromClientError(err, "queue", q))
			return
		}
	}
	raw, err := ss.GetSetting(ctx, maintenanceKey)
	now2, derr := decodeMaintenance(raw)
	if err == nil && derr == nil && now2 != nil && !slices.ContainsFunc(toPause, func(q string) bool { return !slices.Contains(now2.PausedQueues, q) }) {
		writeJSONValue(w, http.StatusOK, maintenanceView(now2))
		return
	}
	if err != nil || derr != nil {
		// Unknown: the state may still record them, so they stay paused for its disabling.
		s.writeMaintenanceError(w, r, errors.Join(err, derr))
		return
	}
	// Disabled meanwhile: what this enabling paused and no state records goes back.
	for _, q := range toPause {
		if now2 != nil && slices.Contains(now2.PausedQueues, q) {
			continue
		}
		if err := s.client.QueueResume(ctx, q); err != nil {
			s.writeError(w, r, fromClientError(err, "queue", q))
			return
		}
	}
	if now2 == nil {
		s.setMaintenanceCache(false)
	}
	s.writeError(w, r, conflict("maintenance mode was disabled through another server while it was being enabled: its queues are resumed; enable it again"))
}
