package dashboard

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"runtime/debug"
	"sync"
	"time"
)

// DefaultRequestTimeout is Config.RequestTimeout's default: under the 30 s WriteTimeout pronto
// serve's HTTP server gives a request (server.WriteTimeout), so the 503 can still be written.
const DefaultRequestTimeout = 25 * time.Second

// timeoutGrace is how long past the request's deadline a handler may take to answer by itself
// (a bulk action saying how far it got) before the 503 replaces its answer: a store that ignores
// its context must not hold the page.
const timeoutGrace = time.Second

// timeoutText is the error of a request that ran out of time.
func (h *Handler) timeoutText() string {
	return fmt.Sprintf("the request ran past the dashboard's request timeout (%s): the store is slow or not answering; try again", h.cfg.RequestTimeout)
}

// bounded gives every request to next a deadline of Config.RequestTimeout. next's answer is held
// until it returns; if it has not returned timeoutGrace after the deadline, the client gets a 503
// naming the timeout instead and next's late answer is dropped. Not for event streams: they flush
// as they go and have their own end rules.
func (h *Handler) bounded(next http.Handler) http.Handler {
	if h.cfg.RequestTimeout <= 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), h.cfg.RequestTimeout)
		defer cancel()
		hw := &heldWriter{header: make(http.Header)}
		done := make(chan struct{})
		var panicked any
		go func() {
			defer func() {
				if p := recover(); p != nil {
					if p == http.ErrAbortHandler {
						panicked = p
					} else {
						panicked = fmt.Sprintf("%v\n\n%s", p, debug.Stack())
					}
				}
				close(done)
			}()
			next.ServeHTTP(hw, r.WithContext(ctx))
		}()
		late := time.NewTimer(h.cfg.RequestTimeout + timeoutGrace)
		defer late.Stop()
		select {
		case <-done:
			if panicked != nil {
				// As if next ran here: net/http logs it and drops the connection.
				panic(panicked)
			}
			hw.sendTo(w)
		case <-late.C:
			hw.drop()
			h.log.Warn("dashboard: request timed out", "method", r.Method, "path", r.URL.Path, "timeout", h.cfg.RequestTimeout)
			w.Header().Set("Retry-After", "5")
			msg := h.timeoutText()
			if r.Method == http.MethodPost {
				msg += " (part of the action may have been done: reload to see)"
			}
			writeError(w, http.StatusServiceUnavailable, msg)
		case <-r.Context().Done():
			// The browser went away: nobody to answer.
			hw.drop()
		}
	})
}

// heldWriter holds a response until the handler writing it returns (see bounded).
type heldWriter struct {
	header http.Header // the handler's alone until it returns

	mu      sync.Mutex
	code    int
	body    bytes.Buffer
	dropped bool
}

func (hw *heldWriter) Header() http.Header { return hw.header }

func (hw *heldWriter) WriteHeader(code int) {
	hw.mu.Lock()
	defer hw.mu.Unlock()
	if hw.code == 0 && code >= 200 {
		hw.code = code
	}
}

func (hw *heldWriter) Write(p []byte) (int, error) {
	hw.mu.Lock()
	defer hw.mu.Unlock()
	if hw.dropped {
		return 0, http.ErrHandlerTimeout
	}
	if hw.code == 0 {
		hw.code = http.StatusOK
	}
	return hw.body.Write(p)
}

// drop discards the response: later writes fail with http.ErrHandlerTimeout.
func (hw *heldWriter) drop() {
	hw.mu.Lock()
	defer hw.mu.Unlock()
	hw.dropped = true
	hw.body = bytes.Buffer{}
}

// sendTo writes the held response to w; the handler has returned.
func (hw *heldWriter) sendTo(w http.ResponseWriter) {
	dst := w.Header()
	for k, v := range hw.header {
		dst[k] = v
	}
	code := hw.code
	if code == 0 {
		code = http.StatusOK
	}
	w.WriteHeader(code)
	_, _ = w.Write(hw.body.Bytes())
}

// stepBudget tells an action done in steps (the pages a filter reads, the batches a bulk action
// runs) when to stop starting steps, so that it answers with what it did before its request's
// deadline rather than be cut off there (a 503 that says nothing of the jobs already changed).
type stepBudget struct {
	deadline time.Time     // zero: no deadline, every step runs
	margin   time.Duration // left free at the end to write the answer
	slowest  time.Duration // the longest step so far
}

// answerShare is the part of a request's time a stepped action leaves free for its answer and for
// a step slower than any before it.
const answerShare = 5

// budget returns the step budget of a request whose context is ctx.
func budget(ctx context.Context) *stepBudget {
	d, ok := ctx.Deadline()
	if !ok {
		return &stepBudget{}
	}
	return &stepBudget{deadline: d, margin: time.Until(d) / answerShare}
}

// begin starts a step; the returned function ends it.
func (b *stepBudget) begin() (end func()) {
	start := time.Now()
	return func() { b.slowest = max(b.slowest, time.Since(start)) }
}

// more says whether a step as slow as the slowest so far would still end margin before the
// deadline.
func (b *stepBudget) more() bool {
	return b.deadline.IsZero() || time.Now().Add(b.slowest+b.margin).Before(b.deadline)
}
