// Package server is pronto's HTTP API: the Open Job Spec (OJS) HTTP binding 1.0, conformance levels
// 0 to 4 (workflows, unique jobs, rate limits), over a *pronto.Client and its store. Any OJS SDK can enqueue jobs through it, and any OJS
// worker can fetch, acknowledge, fail and heartbeat them, beside Go workers registered on the same
// client. `pronto serve` runs it; docs/http-api.md describes the endpoints, authentication, limits
// and pronto's extensions.
//
// The handler is safe for concurrent use. It answers every failure with an OJS error body
// ({"error": {"code", "message", "retryable", "details", "request_id"}}), never with a panic or an
// HTML page, bounds request bodies (413 beyond the limit), and, when an API key is configured,
// requires it as a Bearer token on every endpoint except health.
package server

import (
	"bytes"
	"context"
	"crypto/subtle"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/internal/version"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/webhook"
)

// DefaultMaxBodyBytes bounds request bodies unless Config.MaxBodyBytes says otherwise: 1 MiB.
const DefaultMaxBodyBytes = 1 << 20

// Version is the implementation version reported by the manifest: pronto's one version string, as
// 'pronto version' prints it (from the module's build info).
var Version = version.String()

// Config configures a Server.
type Config struct {
	// Client is the pronto client the API works through (required). Its store holds the jobs.
	Client *pronto.Client
	// APIKey, when set, must be sent as "Authorization: Bearer <key>" on every request except
	// GET /ojs/v1/health and GET /ojs/v1/ready (probes).
	APIKey string
	// MaxBodyBytes bounds request bodies (default DefaultMaxBodyBytes); larger ones get 413.
	MaxBodyBytes int64
	// Backend names the store in the manifest and health answers ("postgres", "sqlite", "memory").
	// Empty: guessed from the store's type.
	Backend string
	// TestMode enables what only a conformance run needs: POST /ojs/v1/_test/reset, which deletes
	// every job, cron schedule and event, and the options.metadata.test_directive of jobs, which makes
	// the heartbeat of the worker holding the job answer "quiet" or "terminate". Never enable it in
	// production.
	TestMode bool
	// EventBuffer is how many events GET /ojs/v1/events keeps (default DefaultEventBuffer).
	EventBuffer int
	// WebhookRetryInterval and WebhookMaxRetryInterval set the backoff of webhook deliveries
	// (default webhook.DefaultRetryInterval and webhook.DefaultMaxRetryInterval).
	WebhookRetryInterval, WebhookMaxRetryInterval time.Duration
	// MaxBatch bounds the jobs of one batch enqueue (default 10000).
	MaxBatch int
	// Logger receives server errors (default: discarded).
	Logger *slog.Logger
	// Handlers are extra endpoints outside /ojs/ (such as "/metrics" or "/debug/pprof/"), served
	// behind the same API key as the rest. A key ending in "/" matches every path below it; other
	// keys match exactly.
	Handlers map[string]http.Handler
	// WorkerStaleAfter is how long an OJS worker may go unheard before the admin API calls it stale
	// and lets it be deregistered (default DefaultWorkerStaleAfter).
	WorkerStaleAfter time.Duration
	// RequireTenant enables multi-tenancy in the sense of ojs-multi-tenancy.md §5.1: every enqueued
	// job must name its tenant (meta.tenant_id or X-OJS-Tenant), else 422; the manifest then lists the
	// multi-tenancy extension.
	RequireTenant bool
	// RequestTimeout bounds how long a request of the OJS API may wait on the store (default
	// DefaultRequestTimeout, or none on the memory store, which has nothing to wait on; negative:
	// no bound). A store that does not answer within it (a
	// database behind a network partition, a lock held too long) gets a retryable 504
	// backend_error instead of a connection the HTTP server's WriteTimeout cuts without an answer.
	// Progress streams are not bounded by it.
	RequestTimeout time.Duration
}

// DefaultRequestTimeout is Config.RequestTimeout's default: under WriteTimeout, so the 504 can still
// be written.
const DefaultRequestTimeout = WriteTimeout - 5*time.Second

// Server is the OJS HTTP API as an http.Handler.
type Server struct {
	client   *pronto.Client
	store    store.Store
	apiKey   []byte
	maxBody  int64
	maxBatch int
	// requestTimeout is Config.RequestTimeout (0: none).
	requestTimeout time.Duration
	backend        string
	testMode       bool
	log            *slog.Logger
	started        time.Time
	source         string

	events      *eventLog
	fetched     *fetchedJobs
	unsubscribe func()
	eventsDone  chan struct{}
	// workflowQueue feeds runWorkflowEvents the step outcomes whose workflow events need a store
	// read (workflowevents.go); workflowDone is closed when it returns.
	workflowQueue chan *pronto.Event
	workflowDone  chan struct{}
	closeOnce     sync.Once

	draining atomic.Bool

	// streams are the open progress streams (progressstream.go).
	streams progressStreams
	// eventStreams counts the open event streams (eventstream.go).
	eventStreams eventStreamsOpen
	// webhooks dispatches the events to the registered webhooks, kept in webhookStore (nil both
	// when the store keeps no settings; webhookapi.go).
	webhooks     *webhook.Dispatcher
	webhookStore store.SettingStore
	// order keeps job.enqueued first among the events of a job this server inserts (eventorder.go).
	order enqueueOrder
	// history holds the per-minute and per-hour statistics (statshistory.go).
	history statsHistory
	// workers throttles the worker record writes (workersapi.go).
	workers workerTracker
	// sched orders the fetches through pools and counts dispatches (poolsched.go).
	sched sched
	// poolRooms keeps each pool's concurrency among this server's fetches (poolroom.go).
	poolRooms poolRooms
	// requireTenant is Config.RequireTenant (tenant.go).
	requireTenant bool
	// maintenance caches the maintenance mode for fetches (maintenance.go).
	maintenance maintenanceCache

	// schemas is the schema registry's cache (schemaapi.go).
	schemas  *schemaRegistry
	handlers map[string]http.Handler
}

// New returns a Server over cfg.Client. Close releases its subscription to the client's events.
func New(cfg Config) (*Server, error) {
	if cfg.Client == nil {
		return nil, errors.New("server: Config.Client is nil")
	}
	s := &Server{
		client:        cfg.Client,
		store:         cfg.Client.Store(),
		maxBody:       cfg.MaxBodyBytes,
		maxBatch:      cfg.MaxBatch,
		backend:       cfg.Backend,
		testMode:      cfg.TestMode,
		log:           cfg.Logger,
		started:       time.Now(),
		source:        "ojs://pronto/api",
		events:        newEventLog(cfg.EventBuffer),
		fetched:       newFetchedJobs(100000),
		workers:       workerTracker{staleAfter: cfg.WorkerStaleAfter},
		eventsDone:    make(chan struct{}),
		handlers:      cfg.Handlers,
		workflowQueue: make(chan *pronto.Event, workflowQueueSize),
		workflowDone:  make(chan struct{}),
	}
	s.events.workers.every = workerHeartbeatEventEvery
	s.requireTenant = cfg.RequireTenant
	s.schemas = newSchemaRegistry(s.store)
	if cfg.APIKey != "" {
		s.apiKey = []byte(cfg.APIKey)
	}
	if s.maxBody <= 0 {
		s.maxBody = DefaultMaxBodyBytes
	}
	if s.maxBatch <= 0 {
		s.maxBatch = 10000
	}
	switch {
	case cfg.RequestTimeout > 0:
		s.requestTimeout = cfg.RequestTimeout
	case cfg.RequestTimeout < 0:
	case backendName(s.store) == "memory":
		// Nothing to wait on but this process: the deadline would only cost each request its timer.
	default:
		s.requestTimeout = DefaultRequestTimeout
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.backend == "" {
		s.backend = backendName(s.store)
	}
	s.startWebhooks(&cfg) // before the first event is recorded
	// The kinds the event log records (see consumeClientEvents), so the client never copies a job
	// for an event nobody here reads.
	ch, unsub := cfg.Client.Subscribe(pronto.EventCompleted, pronto.EventFailed, pronto.EventDiscarded,
		pronto.EventCancelled, pronto.EventSnoozed, pronto.EventRetried, pronto.EventProgress, pronto.EventProgressStalled,
		pronto.EventProgressCompleted, pronto.EventDeadLetterPruned, pronto.EventRescued,
		pronto.EventTenantThrottled, pronto.EventTenantThrottleReleased, pronto.EventTenantCreated,
		pronto.EventRateLimitExceeded, pronto.EventRateLimitReleased, pronto.EventWorkerStopped,
		pronto.EventPriorityChanged)
	s.unsubscribe = unsub
	go s.runWorkflowEvents()
	go s.consumeClientEvents(ch)
	return s, nil
}

// backendName guesses a store's name from its package.
func backendName(st store.Store) string {
	t := strings.TrimPrefix(typeName(st), "*")
	if pkg, _, ok := strings.Cut(t, "."); ok {
		return pkg
	}
	return t
}

// Close stops following the client's events. The handler keeps answering requests.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.streams.stop()
		s.unsubscribe()
		<-s.eventsDone
		if s.webhooks != nil {
			// The events recorded so far get their delivery jobs, within a bound.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			s.webhooks.Close(ctx)
			cancel()
		}
		close(s.workflowQueue) // the consumer, its only sender, has returned
		<-s.workflowDone
	})
	return nil
}

// Drain makes heartbeats answer "quiet" from now on: workers stop fetching and finish what they hold.
// It also ends the open progress and event streams and refuses new ones. Call it when the server is about to
// shut down.
func (s *Server) Drain() {
	s.draining.Store(true)
	s.streams.stop() // progress streams end: they would hold a graceful shutdown
}

// RunCron runs the client's cron scheduler (see pronto.Client.RunCron) and records its occurrences as
// cron.triggered and cron.skipped events. It returns when ctx is done.
func (s *Server) RunCron(ctx context.Context) error {
	return s.client.RunCron(ctx, &pronto.CronConfig{OnFire: s.onCronFire, BeforeInsert: s.onCronInsert})
}

// Header values shared by every response (net/http never modifies them).
var (
	ojsVersionValue  = []string{"1.0"}
	contentTypeValue = []string{ojsMediaType}
)

// requestIDs makes request ids: "req_", a UUIDv7 made once per process, and a sequence number, so
// that each is unique and costs one allocation.
var requestIDs struct {
	prefix string
	seq    atomic.Uint64
}

func init() { requestIDs.prefix = "req_" + uuidv7.New() + "-" }

func newRequestID() string {
	b := make([]byte, 0, len(requestIDs.prefix)+20)
	b = append(b, requestIDs.prefix...)
	return string(strconv.AppendUint(b, requestIDs.seq.Add(1), 10))
}

// stampHeaders sets the headers every answer carries: OJS-Version, and X-Request-Id, the client's
// own when it is printable and at most 128 bytes, else a new one.
func stampHeaders(h http.Header, r *http.Request) {
	h["Ojs-Version"] = ojsVersionValue
	rid := r.Header.Get("X-Request-Id")
	if rid == "" || len(rid) > 128 || !printable(rid) {
		rid = newRequestID()
	}
	h["X-Request-Id"] = []string{rid}
}

// ServeHTTP routes one request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	stampHeaders(w.Header(), r)
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.log.Error("pronto serve: handler panicked", "method", r.Method, "path", r.URL.Path, "panic", v)
			e := errorf(http.StatusInternalServerError, CodeBackendError, "internal error")
			e.retryable = true
			s.writeError(w, r, e)
		}
	}()

	path := r.URL.Path
	if path == "/ojs/v1/health" {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			s.writeError(w, r, methodNotAllowed(r, "GET", "HEAD"))
			return
		}
		s.health(w, r)
		return
	}
	if path == "/ojs/v1/ready" {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			s.writeError(w, r, methodNotAllowed(r, "GET", "HEAD"))
			return
		}
		s.ready(w, r)
		return
	}
	if crossSite(r) {
		s.writeError(w, r, errorf(http.StatusForbidden, CodeForbidden,
			"a cross-site request (Origin %q) may not change anything here: OJS clients send no Origin", r.Header.Get("Origin")))
		return
	}
	if s.apiKey != nil && !s.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="pronto"`)
		s.writeError(w, r, errorf(http.StatusUnauthorized, CodeUnauthenticated,
			"missing or wrong API key: send it as \"Authorization: Bearer <key>\""))
		return
	}
	if r.ContentLength > s.maxBody {
		s.writeError(w, r, tooLargeSized(r.ContentLength, s.maxBody))
		return
	}
	if r.Body != nil && r.Body != http.NoBody && r.ContentLength <= 0 {
		// A body of a known length is already limited to it (net/http reads no further).
		r.Body = http.MaxBytesReader(w, r.Body, s.maxBody)
	}
	if path == "/ojs/manifest" {
		if r.Method != http.MethodGet {
			s.writeError(w, r, methodNotAllowed(r, "GET"))
			return
		}
		s.manifest(w, r)
		return
	}
	rest, ok := strings.CutPrefix(path, "/ojs/v1/")
	if ok {
		if e := unsupportedVersion(r); e != nil {
			s.writeError(w, r, e)
			return
		}
	}
	if !ok {
		if h := s.extraHandler(path); h != nil {
			h.ServeHTTP(w, r)
			return
		}
		s.writeError(w, r, routeNotFound(r))
		return
	}
	if s.requestTimeout > 0 && !strings.HasSuffix(rest, "/stream") { // the progress and event streams
		ctx, cancel := context.WithTimeout(r.Context(), s.requestTimeout)
		defer cancel()
		r = r.WithContext(ctx)
	}
	s.route(w, r, rest)
}

// extraHandler returns the Config.Handlers entry for path, or nil.
func (s *Server) extraHandler(path string) http.Handler {
	if h := s.handlers[path]; h != nil {
		return h
	}
	for prefix, h := range s.handlers {
		if strings.HasSuffix(prefix, "/") && strings.HasPrefix(path, prefix) {
			return h
		}
	}
	return nil
}

// RequireAPIKey wraps h so that it answers only requests bearing key as "Authorization: Bearer
// <key>" (as the OJS API does), with an OJS 401 error otherwise. An empty key requires nothing.
// pronto serve uses it for endpoints on a separate address (--metrics-addr).
func RequireAPIKey(key string, h http.Handler) http.Handler {
	if key == "" {
		return h
	}
	s := &Server{apiKey: []byte(key), log: slog.New(slog.DiscardHandler)}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.authorized(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="pronto"`)
			w.Header().Set("X-Request-Id", newRequestID())
			s.writeError(w, r, errorf(http.StatusUnauthorized, CodeUnauthenticated,
				"missing or wrong API key: send it as \"Authorization: Bearer <key>\""))
			return
		}
		h.ServeHTTP(w, r)
	})
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// authorized checks "Authorization: Bearer <key>". The scheme is case-insensitive and may be
// followed by several spaces (RFC 7235, 2.1).
func (s *Server) authorized(r *http.Request) bool {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(strings.TrimSpace(token)), s.apiKey) == 1
}

func tooLarge(limit int64) *apiError {
	e := errorf(http.StatusRequestEntityTooLarge, CodePayloadTooLarge, "request body exceeds the limit of %d bytes", limit)
	e.details = map[string]any{"max_bytes": limit}
	return e
}

// tooLargeSized is tooLarge for a body whose size is known (its Content-Length): the answer says it,
// as ojs-json-format.md §8.1 asks.
func tooLargeSized(size, limit int64) *apiError {
	e := errorf(http.StatusRequestEntityTooLarge, CodePayloadTooLarge, "request body of %d bytes exceeds the limit of %d bytes", size, limit)
	e.details = map[string]any{"max_bytes": limit, "actual_bytes": size}
	return e
}

// unsupportedVersion refuses a request whose OJS-Version header asks for a version of the spec
// other than 1.0 (ojs-http-binding.md §3.2: 422 unsupported). "1", "1.0" and the SemVer forms
// 1.0.x that SDKs send are 1.0. The health, readiness and manifest endpoints answer any version:
// they are how a client learns what the server speaks.
func unsupportedVersion(r *http.Request) *apiError {
	vs, ok := r.Header["Ojs-Version"]
	if !ok {
		return nil
	}
	v := ""
	if len(vs) > 0 {
		v = strings.TrimSpace(vs[0])
	}
	if v == "" || v == "1" || specVersion10(v) { // an empty header asks for nothing
		return nil
	}
	e := errorf(http.StatusUnprocessableEntity, CodeUnsupported,
		"OJS-Version %q is not supported: this server speaks OJS 1.0", v)
	e.details = map[string]any{"requested_version": v, "supported_versions": []string{"1.0"}}
	return e
}

func routeNotFound(r *http.Request) *apiError {
	e := errorf(http.StatusNotFound, CodeNotFound, "no endpoint %s %s", r.Method, r.URL.Path)
	e.hint = "OJS endpoints live under /ojs/v1/ (and /ojs/manifest)"
	return e
}

func methodNotAllowed(r *http.Request, allowed ...string) *apiError {
	e := errorf(http.StatusMethodNotAllowed, CodeMethodNotAllowed, "%s is not allowed on %s; use %s",
		r.Method, r.URL.Path, strings.Join(allowed, " or "))
	e.details = map[string]any{"allowed": allowed}
	e.headers = map[string]string{"Allow": strings.Join(allowed, ", ")} // RFC 9110 §15.5.6
	return e
}

// route dispatches a path below /ojs/v1/.
func (s *Server) route(w http.ResponseWriter, r *http.Request, rest string) {
	var segBuf [4]string
	seg := splitPath(segBuf[:0], rest)
	m := r.Method
	want := func(method string, h func()) {
		if m != method {
			s.writeError(w, r, methodNotAllowed(r, method))
			return
		}
		h()
	}
	// ojs-backpressure.md §6.2 (backpressure.go), apart from the admin endpoints' own routes.
	if len(seg) == 4 && seg[0] == "admin" && seg[1] == "queues" && seg[3] == "config" {
		s.queueConfig(w, r, seg[2])
		return
	}
	switch seg[0] {
	case "jobs":
		switch {
		case len(seg) == 1:
			want(http.MethodPost, func() { s.enqueue(w, r) })
			return
		case len(seg) == 2 && seg[1] == "batch":
			want(http.MethodPost, func() { s.enqueueBatch(w, r) })
			return
		case len(seg) == 2 && seg[1] == "bulk":
			want(http.MethodPost, func() { s.bulkEnqueue(w, r) })
			return
		case len(seg) == 3 && seg[1] == "bulk":
			if op := bulkOps[seg[2]]; op != nil {
				want(http.MethodPost, func() { s.bulkJobOp(w, r, op) })
				return
			}
		case len(seg) == 2:
			switch m {
			case http.MethodGet:
				s.getJob(w, r, seg[1])
			case http.MethodDelete:
				s.cancelJob(w, r, seg[1])
			case http.MethodPatch:
				s.patchJob(w, r, seg[1])
			default:
				s.writeError(w, r, methodNotAllowed(r, "GET", "DELETE", "PATCH"))
			}
			return
		case len(seg) == 4 && seg[2] == "progress" && seg[3] == "stream":
			want(http.MethodGet, func() { s.progressStream(w, r, seg[1]) })
			return
		case len(seg) == 3 && seg[2] == "progress":
			switch m {
			case http.MethodGet:
				s.getProgress(w, r, seg[1])
			case http.MethodPut:
				s.putProgress(w, r, seg[1])
			default:
				s.writeError(w, r, methodNotAllowed(r, "GET", "PUT"))
			}
			return
		case len(seg) == 3 && seg[2] == "activate":
			want(http.MethodPost, func() { s.activateJob(w, r, seg[1]) })
			return
		}
	case "workers":
		if len(seg) == 2 {
			switch seg[1] {
			case "fetch":
				want(http.MethodPost, func() { s.fetch(w, r) })
				return
			case "ack":
				want(http.MethodPost, func() { s.ack(w, r) })
				return
			case "nack":
				want(http.MethodPost, func() { s.nack(w, r) })
				return
			case "heartbeat":
				want(http.MethodPost, func() { s.heartbeat(w, r) })
				return
			}
		}
	case "queues":
		switch {
		case len(seg) == 1:
			want(http.MethodGet, func() { s.listQueues(w, r) })
			return
		case len(seg) == 3 && seg[2] == "stats":
			want(http.MethodGet, func() { s.queueStats(w, r, seg[1]) })
			return
		case len(seg) == 3 && seg[2] == "priority-stats":
			want(http.MethodGet, func() { s.queuePriorityStats(w, r, seg[1]) })
			return
		case len(seg) == 3 && (seg[2] == "pause" || seg[2] == "resume"):
			want(http.MethodPost, func() { s.pauseQueue(w, r, seg[1], seg[2] == "pause") })
			return
		}
	case "admin":
		if len(seg) >= 2 && seg[1] == "tenants" && s.routeTenants(w, r, seg) { // tenantapi.go
			return
		}
		if len(seg) >= 2 && seg[1] == "webhooks" && s.routeWebhooks(w, r, seg) { // webhookapi.go
			return
		}
		if len(seg) >= 2 && seg[1] == "pools" && s.routePools(w, r, seg) { // poolapi.go
			return
		}
		if len(seg) == 3 && seg[1] == "scheduling" && seg[2] == "stats" {
			want(http.MethodGet, func() { s.schedulingStats(w, r) }) // poolapi.go
			return
		}
		if s.routeAdmin(w, r, seg) {
			return
		}
	case "dead-letter":
		switch {
		case len(seg) == 2 && seg[1] == "stats":
			want(http.MethodGet, func() { s.deadLetterStats(w, r) })
			return
		case len(seg) == 1:
			switch m {
			case http.MethodGet:
				s.listDeadLetter(w, r)
			case http.MethodDelete:
				s.adminPurgeDeadLetter(w, r)
			default:
				s.writeError(w, r, methodNotAllowed(r, "GET", "DELETE"))
			}
			return
		case len(seg) == 2 && seg[1] == "retry":
			want(http.MethodPost, func() { s.retryDeadLetterMany(w, r) })
			return
		case len(seg) == 2 && seg[1] == "retention": // replay.go
			s.deadLetterRetentionRoute(w, r)
			return
		case len(seg) == 2 && seg[1] == "replay-rules": // replay.go
			s.replayRules(w, r)
			return
		case len(seg) == 2:
			switch m {
			case http.MethodGet:
				s.getDeadLetter(w, r, seg[1])
			case http.MethodDelete:
				s.deleteDeadLetter(w, r, seg[1])
			default:
				s.writeError(w, r, methodNotAllowed(r, "GET", "DELETE"))
			}
			return
		case len(seg) == 3 && seg[2] == "retry":
			want(http.MethodPost, func() { s.retryDeadLetter(w, r, seg[1]) })
			return
		}
	case "cron":
		switch {
		case len(seg) == 1:
			switch m {
			case http.MethodGet:
				s.listCron(w, r)
			case http.MethodPost:
				s.registerCron(w, r)
			default:
				s.writeError(w, r, methodNotAllowed(r, "GET", "POST"))
			}
			return
		case len(seg) == 2:
			switch m {
			case http.MethodGet:
				s.getCron(w, r, seg[1])
			case http.MethodDelete:
				s.deleteCron(w, r, seg[1])
			default:
				s.writeError(w, r, methodNotAllowed(r, "GET", "DELETE"))
			}
			return
		}
	case "workflows":
		switch {
		case len(seg) == 1:
			want(http.MethodPost, func() { s.createWorkflow(w, r) })
			return
		case len(seg) == 2:
			switch m {
			case http.MethodGet:
				s.getWorkflow(w, r, seg[1])
			case http.MethodDelete:
				s.cancelWorkflow(w, r, seg[1])
			default:
				s.writeError(w, r, methodNotAllowed(r, "GET", "DELETE"))
			}
			return
		case len(seg) == 3 && seg[2] == "jobs":
			want(http.MethodGet, func() { s.workflowJobs(w, r, seg[1]) })
			return
		case len(seg) == 3 && seg[2] == "progress":
			want(http.MethodGet, func() { s.workflowProgress(w, r, seg[1]) })
			return
		}
	case "rate-limits":
		switch {
		case len(seg) == 1:
			want(http.MethodGet, func() { s.listRateLimits(w, r) })
			return
		case len(seg) == 2:
			switch m {
			case http.MethodGet:
				s.getRateLimit(w, r, seg[1])
			case http.MethodPut:
				s.putRateLimit(w, r, seg[1])
			case http.MethodDelete:
				s.deleteRateLimit(w, r, seg[1])
			default:
				s.writeError(w, r, methodNotAllowed(r, "GET", "PUT", "DELETE"))
			}
			return
		}
	case "events":
		if len(seg) == 1 {
			want(http.MethodGet, func() { s.listEvents(w, r) })
			return
		}
		if len(seg) == 2 && seg[1] == "stream" {
			want(http.MethodGet, func() { s.eventStream(w, r) })
			return
		}
	case "schemas":
		s.routeSchemas(w, r, seg)
		return
	case "_test":
		if s.testMode && len(seg) == 2 && seg[1] == "reset" {
			want(http.MethodPost, func() { s.reset(w, r) })
			return
		}
	}
	s.writeError(w, r, routeNotFound(r))
}

// splitPath splits a path on "/" into buf (at most 5 segments: longer paths are no route).
func splitPath(buf []string, p string) []string {
	for len(buf) < 5 {
		head, tail, more := strings.Cut(p, "/")
		buf = append(buf, head)
		if !more {
			return buf
		}
		p = tail
	}
	return append(buf, p)
}

// readBody reads a request body within the size limit, answering the error itself when it fails.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, _ := strings.Cut(ct, ";")
		mt = strings.ToLower(strings.TrimSpace(mt))
		if mt != ojsMediaType && mt != "application/json" {
			s.writeError(w, r, invalid("", "unsupported Content-Type %q: send application/openjobspec+json or application/json", ct))
			return nil, false
		}
	}
	if r.Body == nil || r.Body == http.NoBody {
		return nil, true
	}
	// The body is read into a slice of its own (the decoded request keeps parts of it), sized to the
	// Content-Length when there is one.
	size := 512
	if cl := r.ContentLength; cl > 0 && cl <= s.maxBody {
		size = int(cl) + 1 // room for the read that meets the end
	}
	body, err := readAll(r.Body, size, s.maxBody)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			s.writeError(w, r, tooLarge(s.maxBody))
		} else {
			s.writeError(w, r, invalid("", "reading the request body failed: %v", err))
		}
		return nil, false
	}
	return body, true
}

// readAll reads rd to its end into a slice of capacity size at first, and fails with an
// *http.MaxBytesError beyond limit bytes.
func readAll(rd io.Reader, size int, limit int64) ([]byte, error) {
	b := make([]byte, 0, size)
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := rd.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if int64(len(b)) > limit {
			return nil, &http.MaxBytesError{Limit: limit}
		}
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// readObject reads a body that must be a JSON object (an empty body counts as {}).
func (s *Server) readObject(w http.ResponseWriter, r *http.Request, what string) ([]byte, bool) {
	body, ok := s.readBody(w, r)
	if !ok {
		return nil, false
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return []byte("{}"), true
	}
	return body, true
}

// readRequest reads a request's JSON object body and decodes it with decode. When either fails it
// writes the error response and returns false. A body that is not JSON at all (trailing bytes
// included) is invalid_payload before decode sees it, whatever the endpoint: decoders reading the
// first value with a json.Decoder would let trailing bytes through, or call broken JSON
// invalid_request, and the client must tell "your JSON is broken" from "a field is wrong".
func readRequest[T any](s *Server, w http.ResponseWriter, r *http.Request, what string, decode func(body []byte) (T, *apiError)) (T, bool) {
	return readBody(s, w, r, what, decode, true)
}

// readScanned is readRequest for the worker protocol's hot endpoints, whose decoders scan the body
// in one pass that refuses broken JSON and trailing bytes with invalid_payload themselves
// (decodeBodyInto, decodeObject): a second pass over every fetch, ack and batch body would cost
// more than the decode.
func readScanned[T any](s *Server, w http.ResponseWriter, r *http.Request, what string, decode func(body []byte) (T, *apiError)) (T, bool) {
	return readBody(s, w, r, what, decode, false)
}

func readBody[T any](s *Server, w http.ResponseWriter, r *http.Request, what string, decode func(body []byte) (T, *apiError), validate bool) (T, bool) {
	var zero T
	body, ok := s.readObject(w, r, what)
	if !ok {
		return zero, false
	}
	if validate {
		if e := notJSON(body, what); e != nil {
			s.writeError(w, r, e)
			return zero, false
		}
	}
	req, e := decode(body)
	if e != nil {
		s.writeError(w, r, e)
		return zero, false
	}
	return req, true
}

// discardBody drains what is left of a request body so the connection can be reused.
func discardBody(r *http.Request) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 1<<16))
	}
}
