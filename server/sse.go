package server

import (
	"net/http"
	"time"
)

// startSSE answers 200 with the headers of a server-sent event stream and returns the function that
// writes and flushes a piece of it, which reports false once the client is gone.
func startSSE(w http.ResponseWriter) func(b []byte) bool {
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	return func(b []byte) bool {
		// The server's WriteTimeout covers one request; a stream pushes its deadline on.
		_ = rc.SetWriteDeadline(time.Now().Add(ProgressStreamKeepAlive + WriteTimeout))
		if _, err := w.Write(b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
}

// streamsDraining is the answer to a stream asked for while the server drains for shutdown.
func streamsDraining() *apiError {
	return &apiError{status: http.StatusServiceUnavailable, code: "unavailable", retryable: true,
		headers: map[string]string{"Retry-After": "1"}, message: "this server is shutting down; stream from another"}
}
