package server

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pronto-jobs/pronto"
)

// Progress streams (ojs-progress.md 7.2): GET /ojs/v1/jobs/{id}/progress/stream.
const (
	// ProgressStreamPoll is how often a progress stream rereads its job. Progress is written at
	// most once a second per job (pronto.ProgressInterval), so polling faster shows nothing more;
	// reports and outcomes that pass through this server wake the stream at once.
	ProgressStreamPoll = time.Second
	// ProgressStreamKeepAlive is the longest a stream stays silent: a comment line is sent then,
	// so that proxies and load balancers do not close an idle connection.
	ProgressStreamKeepAlive = 15 * time.Second
	// MaxProgressStreams bounds the progress streams one server keeps open at once (each rereads
	// its job every ProgressStreamPoll); one more answers 503 with Retry-After.
	MaxProgressStreams = 1000
)

// progressStreams counts the open progress streams and wakes those of a job when this server sees
// an event about it. The zero value is ready.
type progressStreams struct {
	mu   sync.Mutex
	open int
	// watched is open, read without the lock by wake: most events concern no stream at all.
	watched atomic.Int64
	byJob   map[string]map[*streamWatch]struct{}
	done    chan struct{} // closed by stop (made on first use)
	stopped bool
}

// doneCh returns the channel stop closes.
func (ps *progressStreams) doneCh() <-chan struct{} {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.done == nil {
		ps.done = make(chan struct{})
	}
	return ps.done
}

// stop ends every open stream and refuses new ones: the server is draining (a stream would hold a
// graceful shutdown for as long as its job runs). Clients reconnect, to another server.
func (ps *progressStreams) stop() {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.done == nil {
		ps.done = make(chan struct{})
	}
	if !ps.stopped {
		ps.stopped = true
		close(ps.done)
	}
}

// streamWatch is one open stream's registration.
type streamWatch struct {
	wake chan struct{} // buffered(1): the job changed
	// final is the job as an event that ended it left it (terminal), set before its wake: a job
	// removed as it completes (RemoveCompleted) cannot be read again to learn how it ended.
	final atomic.Pointer[pronto.JobRow]
}

// watch registers a stream of job id; it returns the stream's registration and its release, or
// ok false when MaxProgressStreams are open or the streams were stopped.
func (ps *progressStreams) watch(id string) (w *streamWatch, release func(), ok bool) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.open >= MaxProgressStreams || ps.stopped {
		return nil, nil, false
	}
	ps.open++
	ps.watched.Store(int64(ps.open))
	if ps.byJob == nil {
		ps.byJob = map[string]map[*streamWatch]struct{}{}
	}
	set := ps.byJob[id]
	if set == nil {
		set = map[*streamWatch]struct{}{}
		ps.byJob[id] = set
	}
	w = &streamWatch{wake: make(chan struct{}, 1)}
	set[w] = struct{}{}
	return w, func() {
		ps.mu.Lock()
		defer ps.mu.Unlock()
		ps.open--
		ps.watched.Store(int64(ps.open))
		delete(set, w)
		if len(set) == 0 {
			delete(ps.byJob, id)
		}
	}, true
}

// wake tells the streams of job j that it changed, handing them j when it ended (never blocks).
func (ps *progressStreams) wake(j *pronto.JobRow) {
	if ps.watched.Load() == 0 {
		// No stream is open; one opening now reads the job after this change anyway, or polls.
		return
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for w := range ps.byJob[j.ID] {
		if j.State.Terminal() {
			w.final.Store(j)
		}
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// goneGrace is how long a stream whose job is gone waits for the event that ended it: the job is
// removed as it completes (RemoveCompleted) before that event reaches this server's event log.
const goneGrace = 2 * time.Second

// ended returns the job as the event that ended it left it, waiting up to goneGrace for that event,
// or nil when none came (the job was deleted, or ended through another server).
func (w *streamWatch) ended(ctx context.Context) *pronto.JobRow {
	if j := w.final.Load(); j != nil {
		return j
	}
	t := time.NewTimer(goneGrace)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			return w.final.Load()
		case <-w.wake:
			if j := w.final.Load(); j != nil {
				return j
			}
		}
	}
}

// streamEvents maps a terminal state to the event that ends a progress stream.
var streamEvents = map[pronto.State]string{
	pronto.StateCompleted: "completed",
	pronto.StateDiscarded: "failed",
	pronto.StateCancelled: "cancelled",
}

// GET /ojs/v1/jobs/{id}/progress/stream: server-sent events of the job's progress. One "progress"
// event per progress write (the current progress first, when there is one), then "completed",
// "failed" (discarded) or "cancelled" when the job ends, and the stream closes; a job removed as it
// completed (RemoveCompleted) ends it with "completed" too, when its completion passed through this
// server. A job deleted while watched ends the stream with an "error" event. The stream follows the
// job across retries (a new attempt's progress starts afresh, ojs-progress.md 5.3).
func (s *Server) progressStream(w http.ResponseWriter, r *http.Request, id string) {
	j := s.lookupJob(w, r, &id)
	if j == nil {
		return
	}
	ctx := r.Context()
	watch, release, ok := s.streams.watch(id)
	if !ok && s.draining.Load() {
		s.writeError(w, r, streamsDraining())
		return
	}
	if !ok {
		s.writeError(w, r, &apiError{status: http.StatusServiceUnavailable, code: "unavailable", retryable: true,
			headers: map[string]string{"Retry-After": "5"},
			message: "too many progress streams are open on this server (" + strconv.Itoa(MaxProgressStreams) + "); poll GET /ojs/v1/jobs/{id}/progress instead"})
		return
	}
	defer release()

	send := startSSE(w)
	if !send([]byte(": job " + id + "\n\n")) {
		return
	}

	done := s.streams.doneCh()
	poll := time.NewTicker(ProgressStreamPoll)
	defer poll.Stop()
	lastWrite := time.Now()
	var sent time.Time // UpdatedAt of the last progress sent
	// last is the latest progress read: a row read as the job ends (finished, or removed as it
	// completed) may no longer carry it, and the final event reports it.
	var last *pronto.JobProgress
	var lastAttempt int
	for {
		if j.Progress != nil {
			last, lastAttempt = j.Progress, j.Attempt
		} else if j.Attempt != lastAttempt {
			last = nil // a new attempt's progress starts afresh (ojs-progress.md 5.3)
		}
		if p := j.Progress; p != nil && !p.UpdatedAt.Equal(sent) && j.State == pronto.StateActive {
			sent = p.UpdatedAt
			if !send(progressEvent("progress", j, p)) {
				return
			}
			lastWrite = time.Now()
		}
		if ev, end := streamEvents[j.State]; end {
			send(progressEvent(ev, j, lastReport(j.Progress, last)))
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-done: // draining: end the stream so that shutdown need not wait for the job
			return
		case <-watch.wake:
		case <-poll.C:
		}
		next, err := s.client.JobGet(ctx, id)
		switch {
		case errors.Is(err, pronto.ErrNotFound):
			if fin := watch.ended(ctx); fin != nil {
				end := *fin
				send(progressEvent(streamEvents[end.State], &end, lastReport(end.Progress, last)))
				return
			}
			send([]byte("event: error\ndata: {\"code\":\"not_found\",\"message\":\"the job was deleted\"}\n\n"))
			return
		case err != nil:
			if ctx.Err() != nil {
				return
			}
			s.log.Warn("pronto serve: a progress stream could not read its job", "job", id, "err", err)
		default:
			j = next
		}
		if time.Since(lastWrite) >= ProgressStreamKeepAlive {
			if !send([]byte(": keep-alive\n\n")) {
				return
			}
			lastWrite = time.Now()
		}
	}
}

// progressEvent formats one server-sent event: {"progress", "data", "state", "attempt",
// "updated_at"}, progress reading 1 on completion.
// lastReport is p, the progress of the row that ended a stream, with the data of last, the latest
// progress the stream read, where p has none: the ending row may have been read before the last
// report, or after its progress was cleared.
func lastReport(p, last *pronto.JobProgress) *pronto.JobProgress {
	switch {
	case p == nil:
		return last
	case len(p.Data) == 0 && last != nil && len(last.Data) > 0:
		q := *p
		q.Data = last.Data
		return &q
	}
	return p
}

func progressEvent(event string, j *pronto.JobRow, p *pronto.JobProgress) []byte {
	b := make([]byte, 0, 256)
	b = append(b, "event: "...)
	b = append(b, event...)
	b = append(b, "\ndata: {"...)
	switch {
	case j.State == pronto.StateCompleted:
		b = appendRawField(b, "progress", []byte("1"))
	case p != nil && p.Value != nil:
		b = strconv.AppendFloat(appendKey(b, "progress"), *p.Value, 'f', -1, 64)
	default:
		b = appendRawField(b, "progress", []byte("null"))
	}
	if p != nil && len(p.Data) > 0 {
		// A line break would end the SSE data line (data reported before reports were compacted,
		// or through the Go API, may hold one).
		b = appendRawField(b, "data", compactJSON(p.Data))
	} else {
		b = appendRawField(b, "data", []byte("null"))
	}
	b = appendStringField(b, "state", string(j.State))
	b = appendIntField(b, "attempt", int64(j.Attempt))
	at := j.CompletedAt
	if p != nil && (event == "progress" || at.IsZero()) {
		at = p.UpdatedAt
	}
	if at.IsZero() {
		at = time.Now()
	}
	b = appendTimeField(b, "updated_at", at)
	return append(b, "}\n\n"...)
}
