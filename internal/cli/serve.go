package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	// Cron timezones must resolve on machines without a zoneinfo database.
	_ "time/tzdata"

	goredis "github.com/redis/go-redis/v9"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/dashboard"
	"github.com/pronto-jobs/pronto/promexport"
	"github.com/pronto-jobs/pronto/server"
	"github.com/pronto-jobs/pronto/store"
	redisstore "github.com/pronto-jobs/pronto/store/redis"
	"github.com/pronto-jobs/pronto/webhook"
)

// EnvAPIKey is the environment variable read when --api-key is not given.
const EnvAPIKey = "PRONTO_API_KEY"

// DefaultServeAddr is where `pronto serve` listens unless --addr says otherwise: loopback only.
const DefaultServeAddr = "127.0.0.1:8080"

const serveAbout = `Serve the Open Job Spec (OJS) HTTP API 1.0 over the database: any OJS SDK can enqueue
jobs, and OJS workers in any language can fetch, ack, nack and heartbeat them. Cron schedules
registered through the API are fired by the elected leader among the running servers.

The server listens on 127.0.0.1 unless told otherwise, and refuses a non-loopback address without an
API key. With a key (--api-key or $` + EnvAPIKey + `), every endpoint except /ojs/v1/health and
/ojs/v1/ready requires "Authorization: Bearer <key>", /metrics (Prometheus) included. It stops gracefully on SIGINT or SIGTERM.

The web dashboard is served at / on the same address; with an API key it asks for the key once.

Examples:
  pronto serve
  pronto serve --database-url postgres://localhost/app --addr 0.0.0.0:8080 --api-key "$KEY"
  curl -s -X POST http://127.0.0.1:8080/ojs/v1/jobs -H 'Content-Type: application/json' \
    -d '{"type":"email.send","args":["a@example.com"]}'`

// cmdServe runs the OJS HTTP API until ctx is done.
func cmdServe(ctx context.Context, r *runner, args []string) error {
	fs := r.newFlagSet("pronto serve [flags]", serveAbout).withDatabase()
	addr := fs.String("addr", DefaultServeAddr, "`HOST:PORT` to listen on (port 0 picks a free port)")
	apiKey := fs.String("api-key", "", "require this `KEY` as a Bearer token (default $"+EnvAPIKey+")")
	maxBody := fs.Int64("max-body-bytes", server.DefaultMaxBodyBytes, "largest request body accepted, in `BYTES`; larger ones get 413")
	migrate := fs.Bool("migrate", true, "apply pending schema migrations at start (creating an SQLite file if missing)")
	poolSize := fs.Int("pool-size", 32, "open at most `N` PostgreSQL connections")
	testMode := fs.Bool("test-mode", false, "enable POST /ojs/v1/_test/reset and test directives, for conformance runs only: never in production")
	drain := fs.duration("shutdown-timeout", 10*time.Second, "how long (`DURATION`) a graceful stop waits for requests in flight")
	metricsAddr := fs.String("metrics-addr", "", "serve /metrics (Prometheus) on this `HOST:PORT` instead of the API's address; the API key applies there too")
	requireTenant := fs.Bool("require-tenant", false, "refuse (422) every job without a tenant (meta.tenant_id or X-OJS-Tenant): multi-tenancy enabled, as ojs-multi-tenancy.md §5.1 defines it; the manifest then lists multi-tenancy")
	tenantLabels := fs.Bool("metrics-tenant-labels", false, "add per-tenant series (label tenant_id) to /metrics: one series per tenant and queue, so off by default")
	webhookWorkers := fs.Int("webhook-workers", 4, "deliver the registered webhooks' events (/ojs/v1/admin/webhooks) with `N` workers; 0: this process delivers none (another does)")
	priorityLabels := fs.Bool("metrics-priority-labels", false, "add ojs_queue_available_by_priority (labels queue, priority) to /metrics: a store query per queue with available jobs per scrape, so off by default")
	pprofOn := fs.Bool("pprof", false, "serve Go's profiler at /debug/pprof/ (behind the API key): for diagnosis, not left on")
	uiReadOnly := fs.Bool("ui-read-only", false, "serve the web dashboard at / without actions that change state")
	uiMaxStreams := fs.Int("ui-max-streams", dashboard.DefaultMaxStreams, "at most `N` dashboard live-update streams open at once; more are refused 503 with Retry-After")
	uiTimeout := fs.duration("ui-request-timeout", dashboard.DefaultRequestTimeout, "how long (`DURATION`) a dashboard request may take before it is answered 503 naming the timeout (0: no bound); the live-update stream is not bounded")
	uiTrustProto := fs.Bool("ui-trust-forwarded-proto", false, "the proxy in front terminates TLS and sets X-Forwarded-Proto: the dashboard's session cookie is Secure when it says https")
	removeCompleted := fs.Bool("remove-completed", false, "delete each job as its worker acknowledges it (ack), instead of keeping it completed until retention cleanup: GET of the job then answers 404 (pronto.Config.RemoveCompleted; workflow jobs and unique jobs holding their key while completed are kept)")
	stallAfter := fs.duration("progress-stall-timeout", 0, "emit progress.stalled for a running job that reported progress and then nothing for `DURATION` (0: off)")
	staleAfter := fs.duration("worker-stale-after", server.DefaultWorkerStaleAfter, "how long (`DURATION`) an OJS worker may go unheard before the admin API calls it stale and lets it be deregistered")
	notifyURL := fs.String("notify-url", "", "a Redis `URL` (redis://host:6379/0, ?channel=NAME) carrying notifications between processes sharing an SQLite file, or using PostgreSQL through a pooler that cannot LISTEN, so an insert in one wakes workers in the others at once (see docs/redis.md)")
	noisyEvery := fs.duration("tenant-noisy-interval", time.Minute, "how often (`DURATION`) the maintenance leader checks tenants for noisy neighbours (ojs-multi-tenancy.md §9.1; it counts every tenant's jobs); 0: no checks")
	noisyDepth := fs.Float64("tenant-noisy-depth-ratio", 10, "a tenant is noisy when its available jobs exceed `RATIO` times the other tenants' median (and 100); 0: signal off")
	noisyActive := fs.Float64("tenant-noisy-active-share", 0.5, "a tenant is noisy when its active jobs exceed this `SHARE` of all tenants' active jobs (and 10); 0: signal off")
	noisyEnqueue := fs.Float64("tenant-noisy-enqueue-ratio", 5, "a tenant is noisy when its jobs grow `RATIO` times faster than the others' average (and 1 a second); 0: signal off")
	noisyErrors := fs.Float64("tenant-noisy-error-ratio", 3, "a tenant is noisy when the share of its finished jobs discarded exceeds `RATIO` times the others' average (and 0.1); 0: signal off")
	throttle := fs.Bool("tenant-throttle", false, "throttle noisy tenants automatically: lower their fairness weight for --tenant-throttle-for (ojs-multi-tenancy.md §9.2); off: they are only logged")
	throttleFactor := fs.Float64("tenant-throttle-factor", 0.2, "a throttled tenant's weight is its weight times `FACTOR` (above 0, below 1), at least 1")
	throttleFor := fs.duration("tenant-throttle-for", 5*time.Minute, "how long (`DURATION`) an automatic throttle lasts (DELETE /ojs/v1/admin/tenants/{id}/throttle ends one sooner)")
	archiveDir := fs.String("dead-letter-archive", "", "folder `DIR` where the dead letter jobs that retention prunes from queues with pruning_policy archive are kept first, as JSON Lines (one file per UTC day, fsynced; ojs-dead-letter.md 8.2)")
	pruningPolicy := fs.String("dead-letter-pruning-policy", "delete", "the `POLICY` of the queues without a retention of their own: delete, or archive (needs --dead-letter-archive)")
	requestTimeout := fs.duration("request-timeout", server.DefaultRequestTimeout, "how long (`DURATION`) an API request may wait on the database before it is answered 504 backend_error (retryable); progress streams are not bounded")
	allowedHosts := fs.String("allowed-host", "", "without an API key, requests must name a loopback Host (localhost, 127.0.0.1, [::1]) against DNS rebinding; also accept these `NAMES` (comma-separated, with or without a port)")
	replayEvery := fs.duration("dead-letter-replay-interval", server.DefaultReplayInterval, "how often (`DURATION`) the maintenance leader applies the dead-letter replay rules (PUT /ojs/v1/dead-letter/replay-rules; ojs-dead-letter.md 7); 0: never")
	if _, err := fs.parse(args, 0, 0); err != nil {
		return err
	}
	nn, err := noisyConfig(*noisyEvery, *noisyDepth, *noisyActive, *noisyEnqueue, *noisyErrors, *throttle, *throttleFactor, *throttleFor)
	if err != nil {
		return err
	}
	key := *apiKey
	if key == "" {
		key = r.env.getenv(EnvAPIKey)
	}
	if err := checkListenAddr(*addr, key); err != nil {
		return usageErrorf("serve: %v", err)
	}
	if *maxBody <= 0 {
		return usageErrorf("serve: --max-body-bytes must be positive")
	}
	if *stallAfter < 0 || *staleAfter <= 0 {
		return usageErrorf("serve: --progress-stall-timeout must not be negative, --worker-stale-after must be positive")
	}
	if *requestTimeout <= 0 {
		return usageErrorf("serve: --request-timeout must be positive")
	}
	if *webhookWorkers < 0 {
		return usageErrorf("serve: --webhook-workers %d: must be 0 or more", *webhookWorkers)
	}
	var hosts []string
	for _, h := range strings.Split(*allowedHosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			hosts = append(hosts, h)
		}
	}
	if *poolSize < 2 || *poolSize > 10000 {
		return usageErrorf("serve: --pool-size must be between 2 and 10000")
	}
	if *metricsAddr != "" {
		if err := checkListenAddr(*metricsAddr, key); err != nil {
			return usageErrorf("serve: --metrics-addr: %v", err)
		}
	}
	var archive pronto.DeadLetterArchive
	if *archiveDir != "" {
		a, err := server.NewFileArchive(*archiveDir)
		if err != nil {
			return usageErrorf("serve: --dead-letter-archive: %v", err)
		}
		archive = a
	}
	switch pronto.PruningPolicy(*pruningPolicy) {
	case pronto.PruneDelete:
	case pronto.PruneArchive:
		if archive == nil {
			return usageErrorf("serve: --dead-letter-pruning-policy archive needs --dead-letter-archive")
		}
	default:
		return usageErrorf("serve: --dead-letter-pruning-policy %q: must be delete or archive", *pruningPolicy)
	}
	if *notifyURL != "" {
		if err := checkNotifyURL(*notifyURL); err != nil {
			return usageErrorf("serve: --notify-url %s: %v", redactAny(*notifyURL), err)
		}
	}
	db, err := r.open(ctx, openOptions{migrate: *migrate, create: *migrate, maxConns: int32(*poolSize), checkListen: true})
	if err != nil {
		return err
	}
	defer db.Close()

	logger := slog.New(slog.NewTextHandler(r.env.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	clientCfg := &pronto.Config{Logger: logger, ProgressStallTimeout: *stallAfter, NoisyNeighbors: nn,
		RemoveCompleted: *removeCompleted, DeadLetterArchive: archive, DeadLetterPruningPolicy: pronto.PruningPolicy(*pruningPolicy)}
	if ss, ok := db.store.(store.SettingStore); ok && *webhookWorkers > 0 {
		workers := pronto.NewWorkers()
		if err := webhook.AddWorker(workers, ss, nil); err != nil {
			return errorf("serve: %v", err)
		}
		clientCfg.Workers = workers
		clientCfg.Queues = map[string]pronto.QueueConfig{webhook.Queue: {MaxWorkers: *webhookWorkers}}
	}
	if *notifyURL != "" {
		goredis.SetLogger(quietRedisLog{}) // its dial retries' lines: the error below says it once
		cctx, cancel := context.WithTimeout(ctx, connectTimeout)
		n, err := redisstore.OpenNotifier(cctx, *notifyURL)
		cancel()
		if err != nil {
			// The URL was checked above: this is the server, not the command line.
			return errorf("serve: --notify-url: %s", redisConnectError(redactAny(*notifyURL), *notifyURL, err))
		}
		defer n.Close()
		clientCfg.Notifier = n
	}
	obs := newServeObservability(clientCfg, *pprofOn, *metricsAddr != "",
		promexport.Options{TenantLabels: *tenantLabels, PriorityLabels: *priorityLabels})
	client, err := pronto.NewClient(db.store, clientCfg)
	if err != nil {
		return errorf("serve: %v", err)
	}
	defer obs.attach(client)()
	srv, err := server.New(server.Config{
		Client: client, APIKey: key, MaxBodyBytes: *maxBody, Backend: db.t.kind, TestMode: *testMode, Logger: logger,
		Handlers: obs.handlers, WorkerStaleAfter: *staleAfter, RequireTenant: *requireTenant,
		RequestTimeout: *requestTimeout,
	})
	if err != nil {
		return errorf("serve: %v", err)
	}
	defer srv.Close()
	srv.SetSchedulingMetrics(obs.m) // the fetches' dispatch metrics (ojs_scheduling_*)
	obs.countWebhookDrops(srv)

	// Every listener is opened, and the dashboard made, before anything starts: a failure here
	// leaves nothing running (the deferred closes are then the whole shutdown).
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return errorf("serve: cannot listen on %s: %v", *addr, err)
	}
	defer ln.Close()
	var mln net.Listener
	if *metricsAddr != "" {
		if mln, err = net.Listen("tcp", *metricsAddr); err != nil {
			return errorf("serve: cannot listen on %s: %v", *metricsAddr, err)
		}
		defer mln.Close()
	}
	// The dashboard takes "/"; the OJS API keeps everything under /ojs/.
	dash, err := dashboard.New(dashboard.Config{Client: client, APIKey: key, ReadOnly: *uiReadOnly, Backend: db.t.kind, Logger: logger,
		MaxStreams: *uiMaxStreams, TrustForwardedProto: *uiTrustProto, RequestTimeout: dashboardTimeout(*uiTimeout)})
	if err != nil {
		return errorf("serve: dashboard: %v", err)
	}
	defer dash.Close()
	if err := client.Start(ctx); err != nil {
		return errorf("serve: starting the client: %v", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ojs/", srv)
	for path := range obs.handlers { // /metrics, /debug/pprof/: the API server's, behind its key
		mux.Handle(path, srv)
	}
	mux.Handle("/", dash)
	var root http.Handler = mux
	if key == "" {
		root = server.LoopbackGuard(mux, hosts) // the loopback listen is the only protection: see DNS rebinding
	}
	hs := server.NewHTTPServer(ln.Addr().String(), root)
	hs.ErrorLog = slog.NewLogLogger(logger.Handler(), slog.LevelWarn)
	hs.RegisterOnShutdown(dash.Close) // ends the dashboard's event streams, which would hold Shutdown

	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := srv.RunCron(runCtx); err != nil {
			logger.Warn("pronto serve: cron scheduler stopped", "err", err)
		}
	}()
	if *replayEvery > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			srv.RunReplay(runCtx, *replayEvery)
		}()
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	if mln != nil {
		var mh http.Handler = server.RequireAPIKey(key, metricsOnly(obs.metrics))
		if key == "" {
			mh = server.LoopbackGuard(mh, hosts)
		}
		ms := server.NewHTTPServer(mln.Addr().String(), mh)
		go func() { _ = ms.Serve(mln) }()
		defer ms.Close()
		fmt.Fprintf(r.env.Stdout, "pronto serve: metrics at http://%s/metrics\n", mln.Addr())
	}

	mode := ""
	if *testMode {
		mode = " [test mode: reset endpoint enabled]"
	}
	auth := "no API key (loopback only)"
	if key != "" {
		auth = "API key required"
	}
	fmt.Fprintf(r.env.Stdout, "pronto serve: OJS HTTP API on http://%s/ojs/v1 (database %s, %s)%s\n",
		ln.Addr(), db.t.display, auth, mode)
	fmt.Fprintf(r.env.Stdout, "pronto serve: dashboard at http://%s/\n", ln.Addr())

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-served:
	}
	srv.Drain()
	shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), *drain)
	defer cancel()
	if err := hs.Shutdown(shutCtx); err != nil && serveErr == nil {
		serveErr = err
	}
	stopRun()
	wg.Wait()
	if err := client.Stop(shutCtx); err != nil {
		logger.Warn("pronto serve: stopping the client", "err", err)
	}
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return errorf("serve: %v", serveErr)
	}
	fmt.Fprintln(r.env.Stdout, "pronto serve: stopped")
	return nil
}

// checkListenAddr is server.CheckListenAddr, with the port checked too: a port out of range is a
// mistake on the command line (exit 2), not a failure to listen (exit 1).
func checkListenAddr(addr, key string) error {
	if err := server.CheckListenAddr(addr, key); err != nil {
		return err
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("invalid listen address %q: %v", addr, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("invalid listen address %q: the port must be a number from 0 to 65535", addr)
	}
	return nil
}

// checkNotifyURL checks a --notify-url without connecting: a Redis URL, with the notifier's own
// ?channel= parameter, which the Redis URL parser does not know.
func checkNotifyURL(raw string) error {
	if lower := strings.ToLower(raw); !strings.HasPrefix(lower, "redis://") && !strings.HasPrefix(lower, "rediss://") {
		return errors.New("must be a redis:// or rediss:// URL, for example redis://127.0.0.1:6379/0")
	}
	base, query, ok := strings.Cut(raw, "?")
	if ok {
		q, err := url.ParseQuery(query)
		if err != nil {
			return fmt.Errorf("query: %v", err)
		}
		q.Del("channel")
		if rest := q.Encode(); rest != "" {
			base += "?" + rest
		}
	}
	return redisstore.CheckURL(base)
}

// noisyConfig builds the noisy-neighbour configuration from serve's flags (nil when checks are off),
// or a usage error naming the flag.
func noisyConfig(every time.Duration, depth, active, enqueue, errs float64, throttle bool, factor float64, lasts time.Duration) (*pronto.NoisyNeighborConfig, error) {
	switch {
	case every < 0 || every > 0 && every < 100*time.Millisecond:
		return nil, usageErrorf("serve: --tenant-noisy-interval must be 0 (off) or at least 100ms")
	case depth < 0:
		return nil, usageErrorf("serve: --tenant-noisy-depth-ratio must not be negative")
	case active < 0 || active >= 1:
		return nil, usageErrorf("serve: --tenant-noisy-active-share must be 0 (off) or below 1")
	case enqueue < 0:
		return nil, usageErrorf("serve: --tenant-noisy-enqueue-ratio must not be negative")
	case errs < 0:
		return nil, usageErrorf("serve: --tenant-noisy-error-ratio must not be negative")
	case factor <= 0 || factor >= 1:
		return nil, usageErrorf("serve: --tenant-throttle-factor must be above 0 and below 1")
	case lasts <= 0:
		return nil, usageErrorf("serve: --tenant-throttle-for must be positive")
	}
	if every == 0 {
		if throttle {
			return nil, usageErrorf("serve: --tenant-throttle needs the checks (--tenant-noisy-interval above 0)")
		}
		return nil, nil
	}
	off := func(v float64) float64 { // 0 turns a signal off; the Go config's zero is its default
		if v == 0 {
			return -1
		}
		return v
	}
	return &pronto.NoisyNeighborConfig{Interval: every, QueueDepthRatio: off(depth), ActiveShare: off(active),
		EnqueueRateRatio: off(enqueue), ErrorRateRatio: off(errs), Throttle: throttle, WeightFactor: factor, ThrottleFor: lasts}, nil
}

// dashboardTimeout maps --ui-request-timeout to dashboard.Config.RequestTimeout, where 0 means the
// default and a negative value no bound: on the command line 0 says "no bound".
func dashboardTimeout(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}
