package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
)

// historyLen is how many chart points (one per tick) the hub keeps: five minutes at the default tick.
const historyLen = 300

// point is one tick of the throughput and pickup-latency charts.
type point struct {
	T         int64   `json:"t"` // unix milliseconds
	Completed float64 `json:"completed"`
	Failed    float64 `json:"failed"`
	// LatencyMS is the mean wait between due and start of the jobs seen starting in this tick, -1 when
	// none started.
	LatencyMS float64 `json:"latency_ms"`
}

// update is one server-sent event.
type update struct {
	Queues []queueView `json:"queues"`
	// Clients are the live clients of the store (nil when they could not be read this tick).
	Clients []clientView `json:"clients"`
	Point   point        `json:"point"`
	// Jobs are the jobs this client saw change in the tick (at most 200), so an open job or workflow
	// page refreshes only when it has to.
	Jobs []jobChange `json:"jobs"`
}

// storeDown is the "down" event: the queue counts could not be read, so the page stops calling its
// numbers live. Problem and Message are a classification, never the store's error text, which
// names hosts, users and databases.
type storeDown struct {
	// Problem is a store.Condition ("unreachable", "timeout", "lock_timeout", "statement_timeout",
	// "read_only", ...) or "error": a database that answered busy is not called unreachable.
	Problem string `json:"problem"`
	Message string `json:"message"`
	// Label is the short text of the page's indicator ("store unreachable", "database busy", ...).
	Label string `json:"label"`
	// Since is when the counts the page shows were read (unix milliseconds), 0 if never.
	Since int64 `json:"since,omitempty"`
}

// defaultPingInterval is how often the event stream sends its "ping" event unless Config says:
// often enough to keep proxies from closing an idle stream, and the page's watchdog (three missed
// pings) notices a frozen stream within 15 s.
const defaultPingInterval = 5 * time.Second

// downRepeat is how often a failing store is reported again (to the log and the browsers) while
// the problem stays the same.
const downRepeat = 10 * time.Second

// classifyStoreError says what kind of failure err is, in words safe for any page: the error
// itself goes to the log only. problem is the store's condition (store.ConditionOf), "error" for
// an error that says nothing of the backend's condition.
func classifyStoreError(s store.Store, err error) (problem, message string) {
	switch c := store.ConditionOf(s, err); c {
	case store.ConditionError, store.ConditionNone:
		return "error", "reading the queue counts failed (the server's log has the error)"
	default:
		return string(c), c.Message()
	}
}

// problemLabel is the short name of a problem for the page's indicator and the start of its
// messages: "unreachable" only for a store that cannot be reached, as an operator acts on it.
func problemLabel(problem string) string {
	switch store.Condition(problem) {
	case store.ConditionUnreachable:
		return "store unreachable"
	case store.ConditionTimeout:
		return "store not answering"
	case store.ConditionLockTimeout, store.ConditionStatementTimeout, store.ConditionBusy:
		return "database busy"
	case store.ConditionLoading:
		return "store loading"
	case store.ConditionBusyScript:
		return "store busy"
	case store.ConditionMasterDown:
		return "store replica without its master"
	case store.ConditionClusterDown:
		return "store cluster down"
	case store.ConditionReadOnly:
		return "database read-only"
	case store.ConditionInsufficientResources:
		return "database out of resources"
	case store.ConditionIdleSessionTimeout:
		return "database session ended"
	case store.ConditionUnavailable:
		return "store unavailable"
	}
	return "store error"
}

// storeProblemText is a failed request's error as the page shows it: "store unreachable: cannot
// connect to the store", "database busy: lock timeout (...)".
func storeProblemText(s store.Store, err error) string {
	problem, msg := classifyStoreError(s, err)
	label := problemLabel(problem)
	if strings.HasPrefix(msg, label) {
		return msg
	}
	return label + ": " + msg
}

// isStoreDown reports whether err says the store cannot be reached, did not answer in time or
// cannot serve now (busy, read-only, ...): an error of the store's condition rather than of the
// request.
func isStoreDown(s store.Store, err error) bool {
	p, _ := classifyStoreError(s, err)
	return p != "error"
}

// sseFrame is one server-sent event; a named event (not "message") needs its own listener.
func sseFrame(event string, v any) []byte {
	b, _ := json.Marshal(v)
	if event == "" {
		return fmt.Appendf(nil, "data: %s\n\n", b)
	}
	return fmt.Appendf(nil, "event: %s\ndata: %s\n\n", event, b)
}

type jobChange struct {
	ID         string       `json:"id"`
	State      pronto.State `json:"state"`
	WorkflowID string       `json:"workflow_id,omitempty"`
}

// hub takes a snapshot per tick while at least one browser listens and fans it out. Throughput comes
// from the change in completed and discarded counts (so jobs finished by other processes count) or from
// this client's events when those say more; pickup latency from the jobs seen starting.
type hub struct {
	c    *pronto.Client
	tick time.Duration
	log  *slog.Logger

	mu      sync.Mutex
	subs    map[chan []byte]bool // each receives whole SSE frames
	down    []byte               // the last "down" frame while the store fails, for new subscribers
	hist    []point
	running bool
	pokeCh  chan struct{}
	stopCh  chan struct{}
	stopped bool
}

func newHub(c *pronto.Client, tick time.Duration, log *slog.Logger) *hub {
	return &hub{c: c, tick: tick, log: log, subs: map[chan []byte]bool{}, pokeCh: make(chan struct{}, 1), stopCh: make(chan struct{})}
}

func (h *hub) history() []point {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]point{}, h.hist...)
}

// poke asks for a snapshot now (after an action changed what the browsers show).
func (h *hub) poke() {
	select {
	case h.pokeCh <- struct{}{}:
	default:
	}
}

func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.stopped {
		h.stopped = true
		close(h.stopCh)
	}
}

func (h *hub) subscribe() (chan []byte, bool) {
	ch := make(chan []byte, 8)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return nil, false
	}
	h.subs[ch] = true
	if h.down != nil {
		ch <- h.down // a new page learns at once that the counts it is about to read are stale
	}
	if !h.running {
		h.running = true
		go h.loop()
	}
	return ch, true
}

func (h *hub) unsubscribe(ch chan []byte) {
	h.mu.Lock()
	delete(h.subs, ch)
	h.mu.Unlock()
}

// loop runs while anyone listens: it ends (and the next subscriber starts it again) when the last
// browser leaves, so an unwatched dashboard costs the database nothing.
func (h *hub) loop() {
	events, unsub := h.c.Subscribe()
	defer unsub()
	t := time.NewTicker(h.tick)
	defer t.Stop()
	var (
		last            time.Time
		prevDone        = map[string]int64{}
		prevDisc        = map[string]int64{}
		evDone, evFail  int
		latSum          time.Duration
		latN            int
		changes         []jobChange
		seenStart       = map[string]time.Time{}
		havePrev        bool
		changedOverflow bool
		// The store's failures: reported when they start, change kind, and every downRepeat.
		lastGood    time.Time
		downProblem string
		downSent    time.Time
	)
	sample := func(j *pronto.JobRow) {
		if j.StartedAt.IsZero() || j.ScheduledAt.IsZero() {
			return
		}
		if seenStart[j.ID].Equal(j.StartedAt) {
			return
		}
		seenStart[j.ID] = j.StartedAt
		if d := j.StartedAt.Sub(j.ScheduledAt); d >= 0 {
			latSum += d
			latN++
		}
	}
	snapshot := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		now := time.Now()
		qs, err := h.c.QueueList(ctx)
		if err != nil {
			problem, msg := classifyStoreError(h.c.Store(), err)
			if problem == downProblem && now.Sub(downSent) < downRepeat {
				return
			}
			downProblem, downSent = problem, now
			h.log.Warn("dashboard: queue snapshot failed", "problem", problem, "err", err)
			d := storeDown{Problem: problem, Message: msg, Label: problemLabel(problem)}
			if !lastGood.IsZero() {
				d.Since = lastGood.UnixMilli()
			}
			h.broadcast(sseFrame("down", d), true)
			return
		}
		if downProblem != "" {
			h.log.Info("dashboard: the store answers again")
			downProblem = ""
		}
		lastGood = now
		var clients []clientView
		if cl, err := h.c.ClientList(ctx); err != nil {
			h.log.Warn("dashboard: client list failed", "err", err)
		} else {
			clients = clientViews(cl)
		}
		// Jobs seen starting since the last tick give pickup latency, whichever process runs them.
		for _, st := range []pronto.State{pronto.StateActive, pronto.StateCompleted} {
			res, err := h.c.JobList(ctx, &pronto.JobListParams{States: []pronto.State{st}, Descending: true, Limit: 50})
			if err != nil {
				continue
			}
			for _, j := range res.Jobs {
				if !last.IsZero() && j.StartedAt.After(last.Add(-h.tick)) {
					sample(j)
				}
			}
		}
		if len(seenStart) > 5000 {
			seenStart = map[string]time.Time{}
		}
		var done, disc int64
		for _, q := range qs {
			if havePrev {
				done += max(0, q.Counts[pronto.StateCompleted]-prevDone[q.Name])
				disc += max(0, q.Counts[pronto.StateDiscarded]-prevDisc[q.Name])
			}
			prevDone[q.Name], prevDisc[q.Name] = q.Counts[pronto.StateCompleted], q.Counts[pronto.StateDiscarded]
		}
		secs := h.tick.Seconds()
		if !last.IsZero() {
			secs = now.Sub(last).Seconds()
		}
		p := point{T: now.UnixMilli(), LatencyMS: -1}
		if havePrev && secs > 0 {
			p.Completed = float64(max(done, int64(evDone))) / secs
			p.Failed = float64(max(disc, int64(evFail))) / secs
		}
		if latN > 0 {
			p.LatencyMS = float64(latSum.Microseconds()) / 1000 / float64(latN)
		}
		havePrev, last = true, now
		evDone, evFail, latSum, latN = 0, 0, 0, 0
		if changedOverflow {
			changes = append(changes[:0], jobChange{ID: "*"})
		}
		u := update{Queues: queueViews(qs), Clients: clients, Point: p, Jobs: changes}
		if u.Jobs == nil {
			u.Jobs = []jobChange{}
		}
		changes, changedOverflow = nil, false
		h.mu.Lock()
		h.hist = append(h.hist, p)
		if len(h.hist) > historyLen {
			h.hist = h.hist[len(h.hist)-historyLen:]
		}
		h.mu.Unlock()
		h.broadcast(sseFrame("", u), false)
	}
	snapshot()
	for {
		select {
		case <-h.stopCh:
			return
		case e, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			switch e.Kind {
			case pronto.EventCompleted:
				evDone++
			case pronto.EventFailed, pronto.EventDiscarded:
				evFail++
			}
			if e.Job != nil {
				sample(e.Job)
				if len(changes) < 200 {
					changes = append(changes, jobChange{ID: e.Job.ID, State: e.Job.State, WorkflowID: e.Job.WorkflowID})
				} else {
					changedOverflow = true
				}
			}
		case <-h.pokeCh:
			snapshot()
		case <-t.C:
			h.mu.Lock()
			if len(h.subs) == 0 {
				h.running = false
				h.down = nil // the next loop reads the store afresh
				h.mu.Unlock()
				return
			}
			h.mu.Unlock()
			snapshot()
		}
	}
}

// broadcast sends frame to every subscriber; down says it reports a failing store (kept for the
// pages that subscribe while it lasts), else the store answered.
func (h *hub) broadcast(frame []byte, down bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if down {
		h.down = frame
	} else {
		h.down = nil
	}
	for ch := range h.subs {
		select {
		case ch <- frame:
		default: // a slow browser misses a tick rather than stalling the others
		}
	}
}

// pingMisses is how many ping intervals the page's watchdog lets a stream stay silent before it
// closes it and opens another (PING_MISSES in app.js); a write to the stream may wait as long.
const pingMisses = 3

// streamsOpen and streamsStarted count this process's event streams, open now and ever started:
// a page that reconnects must hold one stream, not pile them up.
var streamsOpen, streamsStarted atomic.Int64

// streamsFullRetryAfter is the Retry-After (seconds) of an event stream refused because
// Config.MaxStreams are open.
const streamsFullRetryAfter = "5"

// GET /api/events: a server-sent event stream of updates, one per tick.
func (h *Handler) events(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, "streaming unsupported")
		return
	}
	// Counted before anything is held, so a refused stream costs nothing but its answer.
	if h.streams.Add(1) > int64(h.cfg.MaxStreams) {
		h.streams.Add(-1)
		w.Header().Set("Retry-After", streamsFullRetryAfter)
		writeError(w, http.StatusServiceUnavailable, fmt.Sprintf("too many live-update streams open (at most %d): try again later", h.cfg.MaxStreams))
		return
	}
	defer h.streams.Add(-1)
	ch, ok := h.hub.subscribe()
	if !ok {
		writeError(w, http.StatusServiceUnavailable, "the dashboard is shutting down")
		return
	}
	defer h.hub.unsubscribe(ch)
	streamsStarted.Add(1)
	streamsOpen.Add(1)
	defer streamsOpen.Add(-1)
	// The stream outlives the server's write timeout, if one is set: each write has a deadline of
	// its own instead, as long as the page's watchdog waits before it gives a silent stream up and
	// opens another. A write blocked longer is to a reader that stopped reading without closing (a
	// stalled proxy, a suspended host), which would hold this handler, its connection and a
	// graceful shutdown for good.
	rc := http.NewResponseController(w)
	stall := pingMisses * h.cfg.PingInterval
	send := func(b []byte) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(stall))
		if _, err := w.Write(b); err != nil {
			return false
		}
		fl.Flush()
		return true
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	// A ping at once tells the page the interval its watchdog counts in; keep-alive comments
	// reach no script, so a stream frozen without closing would otherwise look live forever.
	ping := fmt.Appendf(nil, "event: ping\ndata: {\"every_ms\":%d}\n\n", h.cfg.PingInterval.Milliseconds())
	if !send(append([]byte("retry: 2000\n\n"), ping...)) {
		return
	}
	keep := time.NewTicker(h.cfg.PingInterval)
	defer keep.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-h.hub.stopCh:
			return
		case b := <-ch:
			if !h.loggedIn(r) {
				return // logged out, or the session expired: the browser's retry gets a 401
			}
			if !send(b) {
				return
			}
		case <-keep.C:
			if !send(ping) {
				return
			}
		}
	}
}

func parseQuery(s string) (url.Values, error) {
	q, err := url.ParseQuery(s)
	if err != nil {
		return nil, fmt.Errorf("filter %q: %v", s, err)
	}
	return q, nil
}
