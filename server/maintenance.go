package server

import (
	"bytes"
	"context"
	"encoding/json"
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
	ss, st, ok := s.loadMaintenance(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	now := time.Now().UTC()
	if !*req.Enabled {
		if st == nil {
			s.setMaintenanceCache(false)
			writeJSONValue(w, http.StatusOK, map[string]any{"maintenance": false, "resumed_queues": []string{}})
			return
		}
		for _, q := range st.PausedQueues {
			if err := s.client.QueueResume(ctx, q); err != nil {
				s.writeError(w, r, fromClientError(err, "queue", q))
				return // the state stays: disabling again resumes the rest
			}
		}
		if err := ss.SetSetting(ctx, maintenanceKey, nil); err != nil {
			s.writeError(w, r, fromClientError(err, "maintenance mode", ""))
			return
		}
		s.setMaintenanceCache(false)
		writeJSONValue(w, http.StatusOK, map[string]any{"maintenance": false, "disabled_at": now.Format(time.RFC3339Nano),
			"resumed_queues": st.PausedQueues})
		return
	}
	if st == nil {
		st = &maintenanceState{EnabledAt: now, PausedQueues: []string{}}
	}
	st.Reason = req.Reason
	st.EstimatedEnd = nil
	if estimate > 0 {
		end := now.Add(estimate)
		st.EstimatedEnd = &end
	}
	qs, err := s.client.QueueList(ctx)
	if err != nil {
		s.writeError(w, r, fromClientError(err, "queue", ""))
		return
	}
	paused := map[string]bool{}
	var toPause []string
	for _, q := range qs {
		paused[q.Name] = q.Paused
		if !q.Paused {
			toPause = append(toPause, q.Name)
		}
	}
	for name := range s.client.Stats().Queues {
		if _, known := paused[name]; !known {
			paused[name] = false
			toPause = append(toPause, name)
		}
	}
	sort.Strings(toPause)
	for _, q := range toPause {
		if !slices.Contains(st.PausedQueues, q) {
			st.PausedQueues = append(st.PausedQueues, q)
		}
	}
	// Record first, pause after: a failure in between leaves a state whose disabling resumes them.
	b, err := json.Marshal(st)
	if err != nil {
		s.writeError(w, r, errorf(http.StatusInternalServerError, "internal_error", "encoding the maintenance state: %v", err))
		return
	}
	if err := ss.SetSetting(ctx, maintenanceKey, b); err != nil {
		s.writeError(w, r, fromClientError(err, "maintenance mode", ""))
		return
	}
	s.setMaintenanceCache(true)
	for _, q := range toPause {
		if err := s.client.QueuePause(ctx, q); err != nil {
			s.writeError(w, r, fromClientError(err, "queue", q))
			return
		}
	}
	writeJSONValue(w, http.StatusOK, maintenanceView(st))
}
