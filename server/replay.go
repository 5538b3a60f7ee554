package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/isodur"
	"github.com/pronto-jobs/pronto/internal/skewclock"
	"github.com/pronto-jobs/pronto/store"
)

// Automatic replay of dead-letter jobs (ojs-dead-letter.md 7). The rules live in the store's settings
// under replayRulesKey, so every server of a deployment serves the same ones, and RunReplay applies
// them on the one server whose client leads the cluster's maintenance. A replay is a retry with
// changes (pronto.Client.JobRetryWith): the job is inserted again, available, with fresh attempts and
// its replay recorded in its meta (7.2), and the dead-letter entry is deleted. Because the count
// travels in the meta, a job that fails again and returns to the dead letter queue carries it, and a
// rule stops replaying it at max_replays.

// replayRulesKey is the setting that holds the rules.
const replayRulesKey = "dead_letter.replay_rules"

// DefaultReplayInterval is how often RunReplay looks for dead-letter jobs due for replay. Each pass
// with enabled rules lists the dead-letter jobs their filters select (at most 10,000 a rule), so it
// is not run more often than replay delays need.
const DefaultReplayInterval = 30 * time.Second

const (
	// maxReplayRules bounds the rules of a deployment.
	maxReplayRules = 100
	// replayPerPass bounds the jobs one rule replays in one pass; the rest wait for the next.
	replayPerPass = 1000
	// The meta keys of 7.2.
	metaReplayCount = "ojs.replay_count"
	metaReplayedAt  = "ojs.last_replayed_at"
	metaReplayRule  = "ojs.replay_rule"
)

// replayRule is one rule as stored and served.
type replayRule struct {
	Name   string `json:"name"`
	Filter struct {
		// Queue is one queue, or empty for every queue.
		Queue string `json:"queue,omitempty"`
		// Type is a job type, or a prefix ending in *.
		Type string `json:"type,omitempty"`
		// ErrorType is the type of the job's last error, or a prefix ending in *.
		ErrorType string `json:"error_type,omitempty"`
	} `json:"filter"`
	Delay      string `json:"delay"`
	MaxReplays int    `json:"max_replays"`
	Enabled    bool   `json:"enabled"`
}

// replayRules is the body of GET and PUT /ojs/v1/dead-letter/replay-rules, and the stored value.
type replayRules struct {
	Rules []replayRule `json:"replay_rules"`
}

// decodeReplayRules reads and checks a PUT body: every field known, names unique, filters valid,
// delays ISO 8601 durations, max_replays positive. enabled defaults to true.
func decodeReplayRules(body []byte) (*replayRules, *apiError) {
	var in struct {
		Rules *[]json.RawMessage `json:"replay_rules"`
	}
	d := json.NewDecoder(bytes.NewReader(body))
	d.DisallowUnknownFields()
	if err := d.Decode(&in); err != nil {
		return nil, invalid("", "replay rules: %v (send {\"replay_rules\": [{\"name\", \"filter\", \"delay\", \"max_replays\", \"enabled\"}, ...]})", err)
	}
	if in.Rules == nil {
		return nil, invalid("replay_rules", "replay_rules is required (an empty array removes every rule)")
	}
	if len(*in.Rules) > maxReplayRules {
		return nil, invalid("replay_rules", "at most %d replay rules, got %d", maxReplayRules, len(*in.Rules))
	}
	out := &replayRules{Rules: make([]replayRule, 0, len(*in.Rules))}
	seen := map[string]bool{}
	for i, raw := range *in.Rules {
		field := fmt.Sprintf("replay_rules[%d]", i)
		r := replayRule{Enabled: true}
		if e := knownMembers(raw, field, "replay rule", "name", "filter", "delay", "max_replays", "enabled"); e != nil {
			return nil, e
		}
		if f := rawMember(raw, "filter"); f != nil {
			if e := knownMembers(f, field+".filter", "replay rule filter", "queue", "type", "error_type"); e != nil {
				return nil, e
			}
		}
		d := json.NewDecoder(bytes.NewReader(raw))
		d.DisallowUnknownFields()
		if err := d.Decode(&r); err != nil {
			return nil, invalid(field, "%s: %v", field, err)
		}
		switch {
		case r.Name == "" || len(r.Name) > 255 || !utf8.ValidString(r.Name) || strings.ContainsFunc(r.Name, isControl):
			return nil, invalid(field+".name", "%s.name: 1 to 255 characters of UTF-8 text, no control characters", field)
		case seen[r.Name]:
			return nil, invalid(field+".name", "%s.name: %q names two rules", field, r.Name)
		case r.MaxReplays < 1:
			return nil, invalid(field+".max_replays", "%s.max_replays: a positive number of replays is required", field)
		}
		seen[r.Name] = true
		if r.Filter.Queue != "" {
			if e := checkQueueName(r.Filter.Queue); e != nil {
				return nil, invalid(field+".filter.queue", "%s.filter.queue: %s", field, e.message)
			}
		}
		if _, e := parseFilter("", "", r.Filter.Type); e != nil || strings.Contains(r.Filter.Type, ",") {
			return nil, invalid(field+".filter.type", "%s.filter.type %q: one job type, or a prefix ending in *", field, r.Filter.Type)
		}
		if r.Delay == "" {
			return nil, invalid(field+".delay", "%s.delay: an ISO 8601 duration is required (PT0S for none)", field)
		}
		if d, err := isodur.Parse(r.Delay); err != nil || d < 0 {
			return nil, invalid(field+".delay", "%s.delay %q: not a non-negative ISO 8601 duration (such as PT1H)", field, r.Delay)
		}
		out.Rules = append(out.Rules, r)
	}
	return out, nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// settings returns the store's settings, or answers 501 (the store keeps none, so there is no
// what) and returns nil.
func (s *Server) settings(w http.ResponseWriter, r *http.Request, what string) store.SettingStore {
	ss, ok := s.store.(store.SettingStore)
	if !ok {
		s.writeError(w, r, errorf(http.StatusNotImplemented, CodeUnsupported, "this server's store (%s) keeps no settings: no %s", s.backend, what))
		return nil
	}
	return ss
}

// loadReplayRules reads the stored rules (none when nothing is stored).
func loadReplayRules(ctx context.Context, ss store.SettingStore) (*replayRules, error) {
	v, err := ss.GetSetting(ctx, replayRulesKey)
	if err != nil {
		return nil, err
	}
	rules := &replayRules{Rules: []replayRule{}}
	if v == nil {
		return rules, nil
	}
	if err := json.Unmarshal(v, rules); err != nil {
		return nil, fmt.Errorf("the stored replay rules do not decode: %w", err)
	}
	return rules, nil
}

// replayRules serves /ojs/v1/dead-letter/replay-rules (and its admin twin).
func (s *Server) replayRules(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
		s.getReplayRules(w, r)
	case http.MethodPut:
		s.putReplayRules(w, r)
	default:
		s.writeError(w, r, methodNotAllowed(r, "GET", "PUT"))
	}
}

// GET /ojs/v1/dead-letter/replay-rules: the rules.
func (s *Server) getReplayRules(w http.ResponseWriter, r *http.Request) {
	ss := s.settings(w, r, "replay rules")
	if ss == nil {
		return
	}
	rules, err := loadReplayRules(r.Context(), ss)
	if err != nil {
		s.writeError(w, r, fromClientError(err, "replay rules", ""))
		return
	}
	writeJSONValue(w, http.StatusOK, rules)
}

// PUT /ojs/v1/dead-letter/replay-rules: replaces every rule; answers the rules stored.
func (s *Server) putReplayRules(w http.ResponseWriter, r *http.Request) {
	ss := s.settings(w, r, "replay rules")
	if ss == nil {
		return
	}
	rules, ok := readRequest(s, w, r, "replay rules", decodeReplayRules)
	if !ok {
		return
	}
	var v json.RawMessage
	if len(rules.Rules) > 0 {
		b, err := json.Marshal(rules)
		if err != nil {
			s.writeError(w, r, errorf(http.StatusInternalServerError, "internal_error", "encoding the replay rules: %v", err))
			return
		}
		v = b
	}
	if err := ss.SetSetting(r.Context(), replayRulesKey, v); err != nil {
		s.writeError(w, r, fromClientError(err, "replay rules", ""))
		return
	}
	writeJSONValue(w, http.StatusOK, rules)
}

// RunReplay applies the dead-letter replay rules every interval (DefaultReplayInterval when not
// positive) until ctx is done. Run it in every server: a pass runs only on the one whose client
// leads the cluster's maintenance, and not in maintenance mode.
func (s *Server) RunReplay(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = DefaultReplayInterval
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if !s.client.IsLeader() {
			continue
		}
		now, err := s.storeNow(ctx)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("pronto serve: dead-letter replay skipped", "err", err)
			}
			continue
		}
		if _, err := s.replayPass(ctx, now); err != nil && ctx.Err() == nil {
			s.log.Warn("pronto serve: dead-letter replay failed", "err", err)
		}
	}
}

// replayPass replays, for each enabled rule, the dead-letter jobs it matches that were discarded at
// least the rule's delay before now and were replayed fewer than max_replays times. It returns how
// many it replayed.
func (s *Server) replayPass(ctx context.Context, now time.Time) (int, error) {
	ss, ok := s.store.(store.SettingStore)
	if !ok || s.maintenanceOn(ctx) {
		return 0, nil
	}
	rules, err := loadReplayRules(ctx, ss)
	if err != nil {
		return 0, err
	}
	replayed := 0
	var errs []error
	for _, rule := range rules.Rules {
		if !rule.Enabled {
			continue
		}
		n, err := s.replayRule(ctx, rule, now)
		replayed += n
		if err != nil {
			errs = append(errs, fmt.Errorf("rule %q: %w", rule.Name, err))
		}
	}
	return replayed, errors.Join(errs...)
}

// replayRule applies one rule.
func (s *Server) replayRule(ctx context.Context, rule replayRule, now time.Time) (int, error) {
	delay, err := isodur.Parse(rule.Delay)
	if err != nil {
		return 0, err
	}
	f, e := parseFilter(rule.Filter.Queue, string(pronto.StateDiscarded), rule.Filter.Type)
	if e != nil {
		return 0, errors.New(e.message)
	}
	errMatch := errorTypeMatcher(rule.Filter.ErrorType)
	type due struct {
		job   *pronto.JobRow
		count int
	}
	var jobs []due
	if _, err := s.scan(ctx, f, false, func(j *pronto.JobRow) bool {
		// Workflow jobs keep their id (their place in the workflow): retried with changes they could
		// not be, so no rule replays them.
		if !isDeadLetter(j) || j.WorkflowID != "" || j.CompletedAt.After(now.Add(-delay)) || !errMatch(j) {
			return true
		}
		if n := replayCount(j.Meta); n < rule.MaxReplays {
			jobs = append(jobs, due{j, n})
		}
		return len(jobs) < replayPerPass
	}); err != nil {
		return 0, err
	}
	replayed, failed := 0, 0
	var firstErr error
	at := now.UTC().Format(time.RFC3339)
	for _, d := range jobs {
		meta, err := json.Marshal(map[string]any{metaReplayCount: d.count + 1, metaReplayedAt: at, metaReplayRule: rule.Name})
		if err != nil {
			return replayed, err
		}
		nj, err := s.client.JobRetryWith(ctx, d.job.ID, pronto.RetryOverride{Meta: meta})
		switch {
		case errors.Is(err, pronto.ErrNotFound) || errors.Is(err, pronto.ErrInvalidTransition):
			continue // retried, deleted or pruned meanwhile
		case err != nil && nj == nil && ctx.Err() != nil:
			return replayed, fmt.Errorf("replaying job %s: %w", d.job.ID, err)
		case err != nil && nj == nil:
			// Not replayed, the dead-letter entry untouched (its queue is full, its args no longer
			// meet the schema, the store refused the insert): it is left for a later pass, and the
			// other jobs go on, so one full queue does not hold up the rule for every queue.
			if failed == 0 {
				firstErr = fmt.Errorf("replaying job %s: %w", d.job.ID, err)
			}
			failed++
			continue
		case err != nil:
			// Inserted again but still in the dead letter queue: stop here rather than risk more
			// such copies this pass (the next pass would replay it once more; the error says so).
			return replayed + 1, fmt.Errorf("replaying job %s: %w", d.job.ID, err)
		}
		replayed++
		s.jobEvent("dead_letter.replayed", nj, time.Now(), func(b []byte) []byte {
			b = appendStringField(b, "replayed_from", d.job.ID)
			b = appendStringField(b, "replay_rule", rule.Name)
			return appendIntField(b, "replay_count", int64(d.count+1))
		})
	}
	if failed > 0 {
		return replayed, fmt.Errorf("%d of %d matching jobs not replayed this pass, left for a later one (%d replayed); the first: %w",
			failed, len(jobs), replayed, firstErr)
	}
	return replayed, nil
}

// replayCount reads ojs.replay_count from a job's meta (0 when absent or not a number).
func replayCount(meta json.RawMessage) int {
	if !bytes.Contains(meta, []byte(metaReplayCount)) {
		return 0
	}
	var m struct {
		N float64 `json:"ojs.replay_count"`
	}
	if json.Unmarshal(meta, &m) != nil || m.N < 0 {
		return 0
	}
	return int(m.N)
}

// errorTypeMatcher returns whether a job's last error has type pattern (exact, or a prefix ending in
// *); an empty pattern matches every job.
func errorTypeMatcher(pattern string) func(*pronto.JobRow) bool {
	if pattern == "" {
		return func(*pronto.JobRow) bool { return true }
	}
	want, prefix := strings.CutSuffix(pattern, "*")
	return func(j *pronto.JobRow) bool {
		n := len(j.Errors)
		if n == 0 {
			return false
		}
		t := j.Errors[n-1].Type
		if prefix {
			return strings.HasPrefix(t, want)
		}
		return t == want
	}
}

// storeClock is implemented by the stores that several processes share (PostgreSQL's now(), Redis's
// TIME), whose clock stamped the discard times that a replay rule's delay counts from.
type storeClock interface {
	StoreNow(ctx context.Context) (time.Time, error)
}

// storeNow is the time replay rules judge their delays by: the store's clock when it has one every
// process shares, so that a leading server whose own clock runs an hour ahead does not replay jobs
// an hour before their rule's delay ends (nor one behind an hour after); else this process's.
func (s *Server) storeNow(ctx context.Context) (time.Time, error) {
	if sc, ok := s.store.(storeClock); ok {
		now, err := sc.StoreNow(ctx)
		if err != nil {
			return time.Time{}, fmt.Errorf("reading the store's clock: %w", err)
		}
		return now, nil
	}
	return s.processNow(), nil
}

// processClock is this process's clock (time.Now); a test can put it off for one server
// (export_clockskew_test.go) to play a process whose machine's clock is wrong.
var processClock skewclock.Clock[*Server]

// processNow is this process's clock, as a test may have put it off (processClock).
func (s *Server) processNow() time.Time { return processClock.Now(s) }
