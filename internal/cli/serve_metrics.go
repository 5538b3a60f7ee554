package cli

import "net/http"

// metricsOnly is the handler of --metrics-addr: metrics at /metrics, 404 on every other path, as
// that address promises nothing else (docs/observability.md); it answered the metrics on any path.
func metricsOnly(metrics http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics)
	return mux
}
