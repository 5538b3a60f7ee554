package cli

import (
	"io"
	"net/http"
	"net/http/pprof"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/promexport"
)

// serveObservability is what pronto serve exposes beside the OJS API: Prometheus metrics of its
// client (and of the Go runtime and process), and, when asked, Go's profiler.
type serveObservability struct {
	m        *promexport.Metrics
	reg      *prometheus.Registry
	metrics  http.Handler            // /metrics
	handlers map[string]http.Handler // served by the API server, behind its key
}

// newServeObservability instruments cfg (before the client is built). separateMetrics leaves
// /metrics off the API's address (it is served on --metrics-addr instead); metricsOpts are the
// exporter's options (--metrics-tenant-labels, --metrics-priority-labels).
func newServeObservability(cfg *pronto.Config, pprofOn, separateMetrics bool, metricsOpts promexport.Options) *serveObservability {
	o := &serveObservability{m: promexport.New(&metricsOpts), handlers: map[string]http.Handler{}}
	o.m.Instrument(cfg)
	reg := prometheus.NewRegistry()
	o.reg = reg
	reg.MustRegister(o.m, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	o.metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	if !separateMetrics {
		o.handlers["/metrics"] = o.metrics
	}
	if pprofOn {
		// pprof.Index serves the named profiles below /debug/pprof/ as well.
		o.handlers["/debug/pprof/"] = http.HandlerFunc(pprof.Index)
		o.handlers["/debug/pprof/cmdline"] = http.HandlerFunc(redactedCmdline)
		o.handlers["/debug/pprof/profile"] = http.HandlerFunc(pprof.Profile)
		o.handlers["/debug/pprof/symbol"] = http.HandlerFunc(pprof.Symbol)
		o.handlers["/debug/pprof/trace"] = http.HandlerFunc(pprof.Trace)
	}
	return o
}

// countWebhookDrops exports the server's count of events its webhooks missed.
func (o *serveObservability) countWebhookDrops(srv interface{ WebhookEventsDropped() int64 }) {
	o.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "pronto_webhook_events_dropped_total",
		Help: "Events recorded for a webhook that were not delivered: the dispatch buffer was full, the store refused their delivery jobs, or the server stopped before the store took them.",
	}, func() float64 { return float64(srv.WebhookEventsDropped()) }))
}

// attach follows the client's events; the returned function stops.
func (o *serveObservability) attach(c *pronto.Client) func() { return o.m.Attach(c) }

// redactedCmdline answers as pprof.Cmdline does (the arguments, NUL-separated) with the secrets
// hidden: every holder of the API key (each OJS worker) may read the profiler, and the command
// line may carry the database password and the API key itself.
func redactedCmdline(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, strings.Join(redactArgs(os.Args), "\x00"))
}

// secretFlags are the flags whose value is a secret outright; URLs anywhere are redacted by
// redactAny.
var secretFlags = map[string]bool{"api-key": true}

// redactArgs returns args with the value of each secret flag replaced ("--api-key k", "-api-key=k")
// and the passwords of every URL or DSN-like value hidden (redactAny).
func redactArgs(args []string) []string {
	out := make([]string, len(args))
	secretNext := false
	for i, a := range args {
		switch {
		case secretNext:
			out[i], secretNext = "xxxxx", false
			continue
		case strings.HasPrefix(a, "-"):
			name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
			if secretFlags[name] {
				if hasValue {
					out[i] = a[:strings.Index(a, "=")+1] + "xxxxx"
				} else {
					out[i], secretNext = a, true
				}
				continue
			}
		}
		out[i] = redactAny(a)
	}
	return out
}
